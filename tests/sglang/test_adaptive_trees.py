"""A tree in the per-step adaptive set (issue 39, stage B): its seams one at a time, on stand-ins.

The server checks are ``test_adaptive_lossless``'s: its one server is launched at tree 5/4/8 (SGLang's default for
Llama targets), the set's envelope, with the adaptive config's candidates 0, 1, 3, 5: off, chain 1/1/2, chain 3/1/4
and that tree, switched round-robin every step (the switch's test mode). Across the switches the drafter's next
top-k must be carried at the tree's width and sliced for the chain (``compat/adaptive_trees.py``): a chain
drafting from a tree's columns, or a tree from a chain's, breaks the server or the drafts. Greedy: the law's
argmax chain, every chain's drafts accepted whole and at least the tree's first (the argmax of the drafter's
law, which every tree keeps); sampled: the law's chi-square test. Here, besides the seams on stand-ins: a real
``sglang.Engine`` launched at a tree that is not the set's envelope stops in the main process with the package's
one line, before SGLang starts its scheduler.
"""

import contextlib
import functools
import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import needs_sglang
from tests.script_module import ROOT


# The seams one at a time, on stand-ins for SGLang's worker and drafter (what each wrapper hands SGLang's method)
def test_a_launch_that_is_not_the_sets_envelope_stops_start_up_naming_the_flag():
    from sglang_eagle_ext.sglang.compat.adaptive_trees import TreeSet

    tree = TreeSet.checked(5, 4, 8, [0, 3, 5])
    assert (tree.chains, tree.topk_of(5), tree.topk_of(3), tree.topk_of(0)) == ((0, 3), 4, 1, 1)
    with pytest.raises(ValueError, match=r"SGLANG_EAGLE_EXT_ADAPTIVE .* must be its deepest.*--speculative-num-steps"):
        TreeSet.checked(3, 4, 8, [0, 3, 5])
    with pytest.raises(ValueError, match=r"chain 4/1/5 .*--speculative-num-draft-tokens is 4.*Raise it to 5"):
        TreeSet.checked(5, 4, 4, [0, 4, 5])
    # both flags wrong: both fixes in one message, and the launch they give is the envelope
    with pytest.raises(ValueError, match=r"Set --speculative-num-steps to 5 .*; and .*Raise it to 4 "):
        TreeSet.checked(3, 4, 3, [0, 1, 3, 5])
    assert TreeSet.checked(5, 4, 4, [0, 1, 3, 5]).chains == (0, 1, 3)


@pytest.mark.parametrize("topk, steps, config, error", [
    (1, 3, None, None), (None, None, None, None), (4, 5, None, None),
    (4, 3, {"1": {"candidate_steps": [0, 3, 5]}}, "must be its deepest"),
    (4, 5, {"1": {}}, "--speculative-adaptive-config .*: not SGLang's adaptive config")])
def test_the_launch_is_checked_on_the_resolved_record_with_one_line(monkeypatch, tmp_path, topk, steps, config,
                                                                    error):
    """The main process's check: stock's first two acts (the logger, the record's resolution) done first, then
    the shape resolution gave read; a launch that is not the set's envelope (or whose adaptive config cannot be
    read) stops with the package's one line, ``sglang-eagle-ext: not started: ...``, before stock's launch
    runs; a launch at top-k 1, or without speculation, is not looked at."""
    from sglang_eagle_ext.sglang.compat import adaptive_trees
    from sglang_eagle_ext.sglang.plugin import PluginActivationError

    path = None
    if config is not None:
        path = tmp_path / "adaptive.json"
        path.write_text(json.dumps(config))
    done = []
    record = SimpleNamespace(resolve_once=lambda: done.append("resolved"))
    resolved = SimpleNamespace(speculative_num_steps=steps, speculative_eagle_topk=topk,
                               speculative_num_draft_tokens=8, speculative_adaptive_config=path and str(path))
    stand_ins = {adaptive_trees.CHECK[1]: lambda server_args: done.append("logger"),
                 adaptive_trees.CHECK[3]: lambda server_args: resolved}
    monkeypatch.setattr(adaptive_trees.runtime, "module_attribute", stand_ins.__getitem__)
    launched = []
    launch = adaptive_trees._checking_the_launch(lambda cls, server_args, *args: launched.append(server_args))
    if error:
        with pytest.raises(PluginActivationError) as stopped:
            launch(None, record, "init_tokenizer_manager_func")
        assert re.fullmatch(rf"sglang-eagle-ext: not started: .*{error}.*", str(stopped.value))
        assert "\n" not in str(stopped.value) and not launched
    else:
        launch(None, record, "init_tokenizer_manager_func")
        assert launched == [record]
    assert done == ["logger", "resolved"]


@pytest.mark.parametrize("value", ["0", "1", "cycle"])
def test_the_check_is_armed_at_activation_and_wraps_the_engines_launch_where_the_switch_is_on(monkeypatch, value):
    """Armed with the plugin's fixes (the engine may be half imported when the scheduler's binding runs), not
    listed by name (the adaptive binding's phrase says it); the launch wrapped only with the switch on, and kept
    a classmethod (the HTTP server calls it on the class)."""
    import inspect

    from packaging.version import Version

    from sglang_eagle_ext.sglang import plugin
    from sglang_eagle_ext.sglang.compat import adaptive_trees
    from sglang_eagle_ext.sglang.compat.adaptive_shape import ENV_SWITCH

    armed = []
    monkeypatch.setattr("sglang_eagle_ext.sglang.compat.patch.after_import", lambda name, hook: armed.append(hook))
    monkeypatch.setenv(ENV_SWITCH, value)
    assert adaptive_trees.LAUNCH_CHECK.name not in plugin.arm(Version("0.5.23"), [])
    assert adaptive_trees.LAUNCH_CHECK.apply in armed
    armed.clear()
    plugin.arm(Version("0.5.21"), [])  # no tree in the set before 0.5.23
    assert adaptive_trees.LAUNCH_CHECK.apply not in armed
    engine = pytest.importorskip(adaptive_trees._ENGINE)
    stock = engine.Engine.__dict__["_launch_subprocesses"]
    monkeypatch.setattr(engine.Engine, "_launch_subprocesses", stock)  # put back after the test
    adaptive_trees.LAUNCH_CHECK.apply(engine)
    launch = inspect.getattr_static(engine.Engine, "_launch_subprocesses")
    assert isinstance(launch, classmethod)
    assert (getattr(launch.__func__, "__eagle_ext_original__", None) is stock.__func__) == (value != "0")


@pytest.mark.parametrize("topk", [1, 4])
def test_the_reservation_is_pinned_before_the_scheduler_takes_memory(monkeypatch, topk):
    """In the scheduler process, before its construction (which sizes the pools): the reservation pinned for a
    tree only, to its launch value."""
    from sglang_eagle_ext.sglang.compat import adaptive_trees

    spec = SimpleNamespace(speculative_num_steps=5, speculative_eagle_topk=topk, speculative_num_draft_tokens=8,
                           speculative_adaptive_config=None)
    monkeypatch.setattr(adaptive_trees.runtime, "module_attribute", lambda target: lambda: spec)
    sizing = pytest.importorskip(adaptive_trees._SIZING)
    monkeypatch.setattr(sizing, "get_alloc_len_per_decode", lambda: 20)  # the launch's; put back after the test
    constructed = []
    init = adaptive_trees._pinning_the_reservation(lambda self, server_args: constructed.append(server_args))
    init(None, "server args")
    assert constructed == ["server args"]
    assert isinstance(sizing.get_alloc_len_per_decode, functools.partial) == (topk > 1)
    assert sizing.get_alloc_len_per_decode() == 20


# the launch of the engine test below: not the envelope of the default candidates (0, 1, 3, 5)
BAD_TREE = {"speculative_num_steps": 3, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}


def bad_tree_child() -> None:
    """Runs in a fresh process: ``sglang.Engine`` at :data:`BAD_TREE` under ``--speculative-adaptive``, the
    default candidates (0, 1, 3, 5). Arguments: TARGET DRAFTER."""
    from sglang_eagle_ext.sglang.compat import cpu

    on_cpu = cpu.install()
    import sglang

    from sglang_eagle_ext.sglang.compat.releases import installed_release

    options = cpu.engine_options(installed_release()) if on_cpu else {"attention_backend": "triton"}
    sglang.Engine(model_path=sys.argv[1], speculative_draft_model_path=sys.argv[2], skip_tokenizer_init=True,
                  max_total_tokens=8192, context_length=256, log_level="error", speculative_algorithm="EAGLE3",
                  speculative_adaptive=True, **BAD_TREE, **options)
    print("STARTED", flush=True)


@needs_sglang
def test_a_bad_tree_launch_stops_in_the_main_process_with_the_packages_one_line(tmp_path):
    """A real ``sglang.Engine`` at tree 3/4/8 with the default candidates (the tree must be the deepest, 5):
    the process exits non-zero with ``sglang-eagle-ext: not started: ...`` naming ``--speculative-num-steps``
    and the fix, as its last line, and no traceback; only the main process ran (no scheduler's activation
    line: no model was loaded). The pair is ``test_adaptive_lossless``'s, built here in seconds."""
    from sglang_eagle_ext.demo.run import server_environment
    from sglang_eagle_ext.sglang.compat.adaptive_shape import ENV_SWITCH
    from sglang_eagle_ext.sglang.plugin import SWITCH

    built = subprocess.run([sys.executable, "benchmarks/gpu/zipf_checkpoint.py", str(tmp_path), "--smoke",
                            "--fewest-heads", "--device", "cpu"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    models = {name: str(tmp_path / "models" / name) for name in ("target", "drafter")}
    env = {**server_environment("cuda" if torch.cuda.is_available() else "cpu"), ENV_SWITCH: "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop(SWITCH, None)  # the plugin at its default: on
    run = subprocess.run([sys.executable, "-c", f"from {__name__} import bad_tree_child; bad_tree_child()",
                          models["target"], models["drafter"]],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode != 0 and "STARTED" not in run.stdout, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("sglang-eagle-ext: not started: SGLANG_EAGLE_EXT_ADAPTIVE with --speculative-eagle-topk "
                           "4: the launch shape 3/4/8 is the set's tree and must be its deepest"), output[-3000:]
    assert last.endswith("Set --speculative-num-steps to 5 or change the candidates")
    assert output.count("sglang-eagle-ext: not started") == 1
    # every activation line is the main process's: no scheduler (or detokenizer) process was started
    assert len(set(re.findall(r"\(pid (\d+)\)", output))) == 1, output[-3000:]


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
