"""A tree in the per-step adaptive set (issue 39, stage B): its seams one at a time, on stand-ins.

The server checks are ``test_adaptive_lossless``'s: its one server is launched at tree 5/4/8 (SGLang's default for
Llama targets), the set's envelope, with the adaptive config's candidates 0, 1, 3, 5: off, chain 1/1/2, chain 3/1/4
and that tree, switched round-robin every step (the switch's test mode). Across the switches the drafter's next
top-k must be carried at the tree's width and sliced for the chain (``compat/adaptive_trees.py``): a chain
drafting from a tree's columns, or a tree from a chain's, breaks the server or the drafts. Greedy: the law's
argmax chain, every chain's drafts accepted whole and at least the tree's first (the argmax of the drafter's
law, which every tree keeps); sampled: the law's chi-square test.
"""

import contextlib
import functools
import json
from types import SimpleNamespace

import pytest
import torch


# The seams one at a time, on stand-ins for SGLang's worker and drafter (what each wrapper hands SGLang's method)
def test_a_launch_that_is_not_the_sets_envelope_stops_start_up_naming_the_flag():
    from sglang_eagle_ext.sglang.compat.adaptive_trees import TreeSet

    tree = TreeSet.checked(5, 4, 8, [0, 3, 5])
    assert (tree.chains, tree.topk_of(5), tree.topk_of(3), tree.topk_of(0)) == ((0, 3), 4, 1, 1)
    with pytest.raises(ValueError, match=r"SGLANG_EAGLE_EXT_ADAPTIVE .* must be its deepest.*--speculative-num-steps"):
        TreeSet.checked(3, 4, 8, [0, 3, 5])
    with pytest.raises(ValueError, match=r"chain 4/1/5 .*--speculative-num-draft-tokens is 4.*Raise it to 5"):
        TreeSet.checked(5, 4, 4, [0, 4, 5])


@pytest.mark.parametrize("topk, steps, config, error", [
    (1, 3, None, None), (4, 5, None, None), (4, 3, {"1": {"candidate_steps": [0, 3, 5]}}, "must be its deepest")])
def test_the_launch_is_checked_before_the_scheduler_takes_memory(monkeypatch, tmp_path, topk, steps, config, error):
    """The scheduler's construction (which loads the models and sizes the pools) does not begin for a launch
    that is not the set's envelope; a launch at top-k 1 is not looked at, and the reservation pinned only for
    a tree (to its launch value)."""
    from sglang_eagle_ext.sglang.compat import adaptive_trees

    path = None
    if config is not None:
        path = tmp_path / "adaptive.json"
        path.write_text(json.dumps(config))
    spec = SimpleNamespace(speculative_num_steps=steps, speculative_eagle_topk=topk, speculative_num_draft_tokens=8,
                           speculative_adaptive_config=path and str(path))
    monkeypatch.setattr(adaptive_trees.runtime, "module_attribute", lambda target: lambda: spec)
    sizing = pytest.importorskip(adaptive_trees._SIZING)
    monkeypatch.setattr(sizing, "get_alloc_len_per_decode", lambda: 20)  # the launch's; put back after the test
    constructed = []
    init = adaptive_trees._checking_the_launch(lambda self, server_args: constructed.append(server_args))
    if error:
        with pytest.raises(ValueError, match=error):
            init(None, "server args")
        assert not constructed
        return
    init(None, "server args")
    assert constructed == ["server args"]
    assert isinstance(sizing.get_alloc_len_per_decode, functools.partial) == (topk > 1)
    assert sizing.get_alloc_len_per_decode() == 20


def _stand_ins(topk=4):
    from sglang_eagle_ext.sglang.compat import adaptive_trees

    tree = adaptive_trees.TreeSet.checked(5, 4, 8, [0, 3, 5])
    drafter = SimpleNamespace(topk=topk, **{adaptive_trees._ATTRIBUTE: tree}, rebuilt=[])
    drafter._rebuild_topk1_chain_buffers = lambda: drafter.rebuilt.append(drafter.topk)
    worker = SimpleNamespace(topk=topk, _draft_worker=drafter, **{adaptive_trees._ATTRIBUTE: tree})
    return adaptive_trees, worker, drafter


def test_a_switch_sets_the_new_shapes_topk_before_stocks_switch():
    adaptive_trees, worker, drafter = _stand_ins()
    seen = []
    apply = adaptive_trees._switching_topk(lambda self, state: seen.append((self.topk, self._draft_worker.topk)))
    for steps, topk in ((3, 1), (5, 4), (0, 1)):
        apply(worker, SimpleNamespace(speculative_num_steps=steps))
        assert seen[-1] == (topk, topk)


def test_the_draft_extends_compute_the_trees_topk_and_the_draft_reads_its_shapes_columns():
    adaptive_trees, _, drafter = _stand_ins(topk=1)
    extend = adaptive_trees._extending_at_the_trees_topk(lambda self, batch: self.topk)
    assert extend(drafter, None) == 4 and drafter.topk == 1  # the chain's top-k put back after the call
    columns = []
    draft = adaptive_trees._drafting_the_running_columns(
        lambda self, batch: columns.append(batch.spec_info.topk_index.shape[1]))
    for running in (1, 4):
        drafter.topk = running
        spec_info = SimpleNamespace(topk_p=torch.rand(3, 4).sort(descending=True).values,
                                    topk_index=torch.arange(12).view(3, 4))
        draft(drafter, SimpleNamespace(spec_info=spec_info))
        assert columns[-1] == running and spec_info.topk_index[:, 0].tolist() == [0, 4, 8]  # the argmax first


def test_a_state_is_built_at_its_topk_inside_stocks_override(monkeypatch):
    adaptive_trees, worker, drafter = _stand_ins()
    spec = SimpleNamespace(speculative_eagle_topk=4)
    context = SimpleNamespace(override=lambda source, speculative_eagle_topk: setattr(
        spec, "speculative_eagle_topk", speculative_eagle_topk))
    monkeypatch.setattr(adaptive_trees.runtime, "module_attribute",
                        lambda target: (lambda: context) if target is adaptive_trees.GET_CONTEXT else (lambda: spec))
    events = []

    @contextlib.contextmanager
    def stock_override(self, steps, draft_tokens, cuda_graph_bs=None):  # stock's: enter and exit rebuild
        events.append(("stock enter", self.topk))
        yield
        events.append(("stock exit", self.topk))

    override = adaptive_trees._building_at_the_shapes_topk(stock_override)
    with override(worker, 3, 4):
        events.append(("build", worker.topk, drafter.topk, spec.speculative_eagle_topk))
    assert events == [("stock enter", 4), ("build", 1, 1, 1), ("stock exit", 4)]
    assert drafter.rebuilt == [1] and spec.speculative_eagle_topk == 4
