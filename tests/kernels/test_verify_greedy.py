"""Greedy verification: drop-in op and both fused-argmax plans against the reference."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.kernels.tree_fixtures import assert_same, built_tree, draw_tree_shape, favour_children, poisoned_outputs

from sglang_eagle_ext.kernels import verify_greedy, workspace
from tests.kit import kernel_reference as reference

VOCAB = 40


@st.composite
def verify_rounds(draw):
    topk, steps, n = draw_tree_shape(draw, max_topk=4, max_steps=4, max_n=24)
    return dict(bs=draw(st.integers(1, 4)), topk=topk, steps=steps, n=n, seed=draw(st.integers(0, 2**31 - 1)),
                orphans=draw(st.booleans()), dtype=draw(st.sampled_from([torch.float32, torch.bfloat16])))


def _logits(case, candidates, first_child, gen):
    bs, n = candidates.shape
    logits = torch.randn(bs * n, VOCAB, generator=gen)
    logits = favour_children(logits, candidates, first_child, gen, 6.0)
    if case["seed"] % 4 == 0:  # exact ties at the maximum: the first index must win
        logits[:, 7] = logits.max(-1).values
    return logits.to(case["dtype"])


# ties between equal maxima, where the argmax's tie rule shows, are in test_fused_argmax_ties_pick_the_first_index
@settings(max_examples=50, deadline=None)
@given(verify_rounds())
def test_greedy_ops_match_reference(case):
    bs, n, steps = case["bs"], case["n"], case["steps"]
    candidates, ri, nt, ns, gen = built_tree(case["seed"], bs, case["topk"], steps, n, vocab=12,
                                             orphans=case["orphans"])
    logits = _logits(case, candidates, nt, gen)
    target = logits.float().argmax(-1).reshape(bs, n)
    expected = poisoned_outputs(bs, n, steps)
    reference.verify_tree_greedy_reference(*expected, candidates, ri, nt, ns, target)

    drop_in = poisoned_outputs(bs, n, steps)
    verify_greedy.verify_tree_greedy(*drop_in, candidates, ri, nt, ns, target)
    assert_same(drop_in, expected)
    for lazy in (False, True):
        fused = poisoned_outputs(bs, n, steps)
        # 7 programs: several per row (split) or per path row (lazy: some wait, give up and
        # reduce the row alone, some find every part arrived), as bs and n vary.
        verify_greedy.verify_tree_greedy_from_logits(*fused, candidates, ri, nt, ns, logits, lazy=lazy,
                                                     block_v=16, target_programs=7)
        assert_same(fused, expected)
        # Workspace contract: the kernels leave key slots empty and tickets zero.
        keys, tickets = workspace.argmax_keys(logits.device, 1), workspace.tickets(logits.device, 1)
        assert bool((keys == workspace.EMPTY_KEY).all()) and bool((tickets == 0).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bs, n", [(1, 3), (4, 7)], ids=["across-programs", "within-a-lane"])
def test_fused_argmax_ties_pick_the_first_index(bs, n, dtype):
    """Every row's maximum is held three times: at the token of the node's first child (the walk
    then descends along first children), 16 tokens later (the same lane of a 16-token tile) and 27
    later (another lane); torch.argmax, the reference's target, takes the first. The property test
    meets such ties only now and then. Both plans cut 1 request of 3 rows into a program per
    16-token slice (ties settled across programs), and read each row of 4 requests of 7 in one
    program (ties settled within a lane, then across lanes)."""
    candidates, ri, nt, ns, gen = built_tree(5, bs, 2, 3, n, vocab=12)
    logits = torch.randn(bs * n, VOCAB, generator=gen).to(dtype)
    first = torch.where(nt >= 0, torch.gather(candidates, 1, nt.clamp(min=0)),
                        torch.randint(0, 12, nt.shape, generator=gen)).reshape(-1)
    rows = torch.arange(bs * n)
    for offset in (0, 16, 27):
        logits[rows, first + offset] = 8.0  # above any randn draw here, exact in bf16
    target = logits.float().argmax(-1)
    assert torch.equal(target, first)
    expected = poisoned_outputs(bs, n, 3)
    reference.verify_tree_greedy_reference(*expected, candidates, ri, nt, ns, target.reshape(bs, n))
    for lazy in (False, True):
        fused = poisoned_outputs(bs, n, 3)
        verify_greedy.verify_tree_greedy_from_logits(*fused, candidates, ri, nt, ns, logits, lazy=lazy, block_v=16,
                                                     target_programs=7)
        assert_same(fused, expected)


def test_fused_argmax_is_torch_argmax_with_nan_and_signed_zeros():
    """One node (no drafts): the bonus token is the row's argmax, NaN and -0.0 included."""
    rows = torch.tensor([[1.0, float("nan"), 3.0, float("nan")],
                         [-0.0, 0.0, -1.0, -2.0],
                         [float("-inf")] * 4,
                         [2.0, 5.0, 5.0, float("inf")]])
    candidates = torch.zeros(4, 1, dtype=torch.long)
    ri = torch.arange(4).reshape(4, 1)
    none = torch.full((4, 1), -1)
    for lazy in (False, True):
        out = poisoned_outputs(4, 1, 0)
        verify_greedy.verify_tree_greedy_from_logits(*out, candidates, ri, none, none, rows, lazy=lazy, block_v=2,
                                                     target_programs=8)
        assert out[0].tolist() == torch.argmax(rows, -1).tolist() == [1, 0, 0, 3]
        assert out[2].tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("bad_logits, complaint", [
    (lambda logits: logits[:-1], r"logits must be \[bs\*n, V\].*\[3, 4\] candidates \(12 rows\)"),
    (lambda logits: logits.t().contiguous().t(), "logits must have unit stride along the vocabulary"),
])
def test_fused_greedy_refuses_logits_it_cannot_index(bad_logits, complaint):
    candidates, ri, nt, ns, gen = built_tree(11, 3, 2, 2, 4, vocab=12)
    logits = torch.randn(12, VOCAB, generator=gen)
    out = poisoned_outputs(3, 4, 2)
    with pytest.raises(ValueError, match=complaint):
        verify_greedy.verify_tree_greedy_from_logits(*out, candidates, ri, nt, ns, bad_logits(logits))
    assert_same(out, poisoned_outputs(3, 4, 2))  # refused before any launch


def test_sglang_golden_vector():
    """sgl-kernel's own test case for verify_tree_greedy (values from its test suite)."""
    candidates = torch.tensor([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]])
    retrieve_index = torch.arange(12).reshape(2, 6)
    next_token = torch.tensor([[1, 2, -1, 4, 5, -1], [4, 2, 3, -1, 5, -1]])
    next_sibling = torch.tensor([[-1, 3, -1, -1, -1, -1], [-1, -1, -1, -1, 1, -1]])
    logits = torch.ones(12, 20)
    for row, token in [(0, 3), (3, 4), (4, 5), (6, 11), (10, 12)]:
        logits[row, token] = 10
    logits[logits.max(-1).values < 10, 18] = 10
    target = logits.argmax(-1).reshape(2, 6)
    for run in (lambda out: verify_greedy.verify_tree_greedy(*out, candidates, retrieve_index, next_token,
                                                             next_sibling, target),
                lambda out: verify_greedy.verify_tree_greedy_from_logits(*out, candidates, retrieve_index, next_token,
                                                                         next_sibling, logits, block_v=8)):
        out = (torch.full((12,), -1, dtype=torch.int32), torch.full((2, 4), -1, dtype=torch.int32),
               torch.zeros(2, dtype=torch.int32))
        run(out)
        assert out[0].tolist() == [3, -1, -1, 4, 5, 18, 11, -1, -1, -1, 12, 18]
        assert out[1].tolist() == [[0, 3, 4, 5], [6, 10, 11, -1]]
        assert out[2].tolist() == [3, 2]
