"""The binding switch and the call-site routing, on stand-in SGLang modules."""

import sys
import types

import pytest
import torch
from packaging.version import Version

from sglang_eagle_ext.kernels import sampling, verify_greedy
from sglang_eagle_ext.sglang.compat import tree_kernels as sglang_binding


def _sentinel(name):
    def original(*args, **kwargs):
        raise AssertionError(f"SGLang's {name} was called")

    return original


@pytest.fixture
def fake_sglang(monkeypatch):
    """Stand-ins for the modules of an 0.5.11-like layout (build leaf and sampling op imported
    at module level, greedy op imported from sgl_kernel at call time, NGRAM's copies of both ops)."""
    modules = {
        "sglang.srt.speculative.eagle_utils": {"sgl_build_tree_kernel_efficient": _sentinel("build"),
                                               "verify_tree_greedy_func": _sentinel("greedy func")},
        "sglang.srt.speculative.eagle_info": {"tree_speculative_sampling_target_only": _sentinel("sampling")},
        "sglang.srt.speculative.ngram_info": {"verify_tree_greedy": _sentinel("NGRAM's greedy op"),
                                              "tree_speculative_sampling_target_only": _sentinel("NGRAM's sampling")},
        "sgl_kernel": {"verify_tree_greedy": _sentinel("greedy op")},
    }
    fakes = {}
    for name, attrs in modules.items():
        module = types.ModuleType(name)
        for attr, value in attrs.items():
            setattr(module, attr, value)
        monkeypatch.setitem(sys.modules, name, module)
        fakes[name] = module
    for parent in ("sglang", "sglang.srt", "sglang.srt.speculative"):
        monkeypatch.setitem(sys.modules, parent, sys.modules.get(parent) or types.ModuleType(parent))
    # Layouts of other releases must not resolve to the real package during this test.
    for absent in ("sglang.kernels.ops.speculative.spec_tree", "sglang.kernels.ops.speculative.tree",
                   "sglang.kernels.ops.speculative.sampling", "sglang.srt.speculative.eagle_info_v2"):
        monkeypatch.setitem(sys.modules, absent, None)
    yield fakes
    sglang_binding.restore()


def test_triton_binds_every_present_point_and_restores(fake_sglang, monkeypatch):
    monkeypatch.setenv(sglang_binding.ENV_SWITCH, "triton")
    patched = sglang_binding.apply()
    assert len(patched) == 6, patched
    utils = fake_sglang["sglang.srt.speculative.eagle_utils"]
    info = fake_sglang["sglang.srt.speculative.eagle_info"]
    assert info.tree_speculative_sampling_target_only.__wrapped__.__wrapped__ is \
        sampling.tree_speculative_sampling_target_only
    assert fake_sglang["sgl_kernel"].verify_tree_greedy.__wrapped__ is verify_greedy.verify_tree_greedy
    ngram = fake_sglang["sglang.srt.speculative.ngram_info"]  # NGRAM's verify reads its own copies
    assert ngram.verify_tree_greedy is fake_sglang["sgl_kernel"].verify_tree_greedy
    assert ngram.tree_speculative_sampling_target_only is info.tree_speculative_sampling_target_only

    # The func wrapper keeps SGLang's contract: retrieve_* keywords in, the three outputs back.
    candidates = torch.tensor([[5, 6, 7]])
    outputs = (torch.full((3,), -1, dtype=torch.int32), torch.full((1, 3), -1, dtype=torch.int32),
               torch.zeros(1, dtype=torch.int32))
    returned = utils.verify_tree_greedy_func(
        *outputs, candidates=candidates, retrieve_index=torch.tensor([[0, 1, 2]]),
        retrieve_next_token=torch.tensor([[1, 2, -1]]), retrieve_next_sibling=torch.tensor([[-1, -1, -1]]),
        target_predict=torch.tensor([[6, 9, 4]]), topk=1)
    assert returned[2].tolist() == [1] and returned[1].tolist() == [[0, 1, -1]]
    assert returned[0].tolist() == [6, 9, -1]

    assert len(sglang_binding.restore()) == 6
    with pytest.raises(AssertionError, match="SGLang's build was called"):
        utils.sgl_build_tree_kernel_efficient()


def test_sglang_choice_binds_nothing(fake_sglang, monkeypatch):
    monkeypatch.setenv(sglang_binding.ENV_SWITCH, "triton")
    sglang_binding.apply()
    monkeypatch.setenv(sglang_binding.ENV_SWITCH, "sglang")
    assert sglang_binding.apply() == []
    with pytest.raises(AssertionError, match="SGLang's sampling was called"):
        fake_sglang["sglang.srt.speculative.eagle_info"].tree_speculative_sampling_target_only()


def test_unknown_choice_is_refused(monkeypatch):
    monkeypatch.setenv(sglang_binding.ENV_SWITCH, "cuda")
    with pytest.raises(ValueError, match="triton, sglang"):
        sglang_binding.apply()


def test_default_is_sglangs_ops(monkeypatch):
    monkeypatch.delenv(sglang_binding.ENV_SWITCH, raising=False)
    assert sglang_binding.selected_backend() == "sglang"
    assert sglang_binding.apply() == []


@pytest.mark.parametrize("release, accepted", [("0.5.20", 1), ("0.5.21", 0), ("0.5.22", 0)])
def test_jit_op_layout_and_each_release_acceptance_test(fake_sglang, monkeypatch, release, accepted):
    # 0.5.21-0.5.22 import the tree sampling and greedy ops inside eagle_sample /
    # verify_tree_greedy_func from the JIT ops' modules; the bound sampling op must apply the
    # installed release's acceptance test (0.5.21: `coin <`, so a coin equal to the child's
    # probability rejects it)
    from sglang_eagle_ext.sglang.compat import releases
    from tests.kernels.tree_fixtures import one_child_round, poisoned_outputs

    for name, attr in (("sglang.kernels.ops.speculative.sampling", "tree_speculative_sampling_target_only"),
                       ("sglang.kernels.ops.speculative.tree", "verify_tree_greedy")):
        module = types.ModuleType(name)
        setattr(module, attr, _sentinel(attr))
        monkeypatch.setitem(sys.modules, name, module)
    for parent in ("sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.speculative"):
        monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
    monkeypatch.setattr(releases, "installed_release", lambda: Version(release))
    monkeypatch.setenv(sglang_binding.ENV_SWITCH, "triton")
    patched = sglang_binding.apply()
    assert any(line.startswith("sglang.kernels.ops.speculative.tree.verify_tree_greedy") for line in patched)
    op = sys.modules["sglang.kernels.ops.speculative.sampling"].tree_speculative_sampling_target_only
    tree, probs, thresholds = one_child_round(0.5, 0.5, 1.0)
    out = poisoned_outputs(1, 2, 1)
    op(*out, *tree, probs, torch.zeros_like(probs), *thresholds, deterministic=True)
    assert int(out[2][0]) == accepted
