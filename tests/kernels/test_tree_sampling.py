"""Tree sampling: each Triton op (the drop-in and the fused sampler) against its plain-torch
reference (``kernels/sampling/reference.py``, what a CPU-only host samples with), and each
reference against the independent oracle written a request and a node at a time
(``tests/kit/kernel_reference.py``) and against rules checked by hand.

Coins are fixed per example, so two implementations must make the very same draws; they differ
only when a coin lands within float rounding of a CDF step (probability ~1e-7 a draw).
"""

import functools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.kernels.row_pass_readback import chunk_pass
from tests.kernels.tree_fixtures import (assert_same, built_tree, draw_tree_shape, favour_children, one_child_round,
                                         poisoned_outputs)

from sglang_eagle_ext.kernels import sampling
from sglang_eagle_ext.kernels.sampling import reference, scratch
from tests.kit import kernel_reference as oracle

VOCAB = 40


@st.composite
def sampling_rounds(draw):
    topk, steps, n = draw_tree_shape(draw, max_topk=4, max_steps=4, max_n=20)
    thresholds = draw(st.sampled_from([(1.0, 1.0), (1.0, 1.0), (0.0, 0.0), (0.5, 0.3), (0.9, 1.0)]))
    return dict(bs=draw(st.integers(1, 3)), topk=topk, steps=steps, n=n, seed=draw(st.integers(0, 2**31 - 1)),
                orphans=draw(st.booleans()), thresholds=thresholds, boost=draw(st.sampled_from([0.0, 3.0, 8.0])),
                strict=draw(st.booleans()))


def _case(case):
    bs, n = case["bs"], case["n"]
    candidates, ri, nt, ns, gen = built_tree(case["seed"], bs, case["topk"], case["steps"], n, vocab=12,
                                             orphans=case["orphans"])
    logits = favour_children(torch.randn(bs * n, VOCAB, generator=gen) * 2, candidates, nt, gen, case["boost"])
    logits[:, 20:24] = logits[:, 19:20]  # ties
    coins = torch.rand(bs, n, generator=gen)
    final_coins = torch.rand(bs, generator=gen)
    return (candidates, ri, nt, ns, coins, final_coins), logits, gen


def _assert_drop_ins_agree(case, expected_op, op):
    """Both drop-in ops on the case's tree and probabilities: the same outputs and draft scratch."""
    bs, n, steps = case["bs"], case["n"], case["steps"]
    tree_args, logits, _ = _case(case)
    probs = torch.softmax(logits / 0.8, -1).reshape(bs, n, VOCAB)
    if case["seed"] % 2:  # zero-mass children, as after a top-k / top-p renorm
        probs = torch.where(probs < 0.03, 0.0, probs)
    results = []
    for drop_in in (expected_op, op):
        out, draft = poisoned_outputs(bs, n, steps), torch.zeros_like(probs)
        drop_in(*out, *tree_args, probs, draft, *case["thresholds"], strict_acceptance=case["strict"])
        results.append(out + (draft,))
    assert_same(*results)


@settings(max_examples=150, deadline=None)
@given(sampling_rounds())
def test_drop_in_kernel_matches_reference(case):
    # tiles of 16 tokens: several per row
    _assert_drop_ins_agree(case, reference.tree_speculative_sampling_target_only,
                           functools.partial(sampling.tree_speculative_sampling_target_only, block_v=16))


@settings(max_examples=150, deadline=None)
@given(sampling_rounds())
def test_drop_in_reference_matches_oracle(case):
    _assert_drop_ins_agree(case, oracle.tree_sampling_reference, reference.tree_speculative_sampling_target_only)


@pytest.mark.parametrize("op", [oracle.tree_sampling_reference, sampling.tree_speculative_sampling_target_only,
                                reference.tree_speculative_sampling_target_only])
@pytest.mark.parametrize("child_prob, coin, threshold_single, accepted_before, accepted_strict", [
    (0.5, 0.5, 1.0, True, False),   # coin equal to the running sum: `<=` accepts, 0.5.21's `<` does not
    (0.5, 0.25, 1.0, True, True),
    (0.0, 0.0, 1.0, True, False),   # zero target mass, coin 0: accepted only before 0.5.21
    (0.0, 0.7, 0.0, True, False),   # zero mass passes threshold_single 0 only before 0.5.21
])
def test_each_release_acceptance_test(op, child_prob, coin, threshold_single, accepted_before, accepted_strict):
    tree, probs, thresholds = one_child_round(child_prob, coin, threshold_single)
    for strict, expected in ((False, accepted_before), (True, accepted_strict)):
        out = poisoned_outputs(1, 2, 1)
        op(*out, *tree, probs, torch.zeros_like(probs), *thresholds, strict_acceptance=strict)
        assert int(out[2][0]) == int(expected), (strict, out)


@st.composite
def filters(draw, bs):
    # Top-k around the shortlists' coverage (4 or 8 with the tiles below), far above it, at V.
    top_ks = draw(st.lists(st.sampled_from([-1, 0, 1, 2, 4, 5, 8, 9, 12, 30, VOCAB - 1, VOCAB, 100]),
                           min_size=bs, max_size=bs))
    top_ps = draw(st.lists(st.sampled_from([1.0, 0.999, 0.9, 0.6, 0.2, 0.01]), min_size=bs, max_size=bs))
    temperatures = draw(st.lists(st.sampled_from([0.3, 0.8, 1.0, 1.7]), min_size=bs, max_size=bs))
    return torch.tensor(temperatures), torch.tensor(top_ks, dtype=torch.int32), torch.tensor(top_ps)


# (chunk length, shortlist slots): rows of 3 or 5 chunks (the last partial) or of one; shortlists
# that cover top-8 / top-4 / top-2 (the last overflows on nearly every row: exact passes).
TILINGS = [(16, 32), (8, 16), (64, 64), (16, 4)]


def _fused_sampler_inputs(case, data):
    """The case's tree and coins, its logits (ties w.p. 1/2, bf16 on odd seeds) and drawn filters."""
    tree_args, logits, _ = _case(case)
    if data.draw(st.booleans()):
        logits = torch.round(logits * 2) / 2  # many ties: at the top, at pivots, at chunk floors
    if case["seed"] % 2:
        logits = logits.to(torch.bfloat16)
    return (*tree_args, logits, *data.draw(filters(case["bs"])), *case["thresholds"])


# each example is the fused kernel's three launches in Triton's interpreter, seconds apiece on CI's CPU; the GPU
# tests run the compiled kernel against the same reference. Few examples: the exact ties where a comparison's
# `>=` against `>` shows are in test_fused_kernel_matches_reference_at_exact_ties, random rounds rarely reach them
@settings(max_examples=20, deadline=None)
@given(sampling_rounds(), st.data())
def test_fused_kernel_matches_reference(case, data):
    bs, n, steps = case["bs"], case["n"], case["steps"]
    inputs = _fused_sampler_inputs(case, data)
    block_v, slots = data.draw(st.sampled_from(TILINGS))
    expected = poisoned_outputs(bs, n, steps)
    reference.tree_sampling_from_logits(*expected, *inputs, strict_acceptance=case["strict"])
    ours = poisoned_outputs(bs, n, steps)
    sampling.tree_sampling_from_logits(*ours, *inputs, strict_acceptance=case["strict"], block_v=block_v,
                                       scratch_slots=slots)
    assert_same(ours, expected)


# float32 ln 2: -k * LN2 times the kernels' float32 log2(e) rounds to exactly -k, so at temperature 1 the kernels'
# weights exp2(-k) are exact, and their sums tie with a top-p boundary exactly (the reference's float64 weights
# lie about 1e-9 below, which leaves its pivot on the same side).
LN2 = float(torch.tensor(math.log(2.0)))

# Rows whose filters, coins and thresholds tie exactly (the random rounds above almost never do), each with the
# root's bonus or accepted token and the accept count worked out by hand. The root has one child; far: the other
# logits lie ~1000 below (zero weight in both float32 and float64), else ~4 below.
EXACT_TIES = [
    # top-p 0.75 of the mass 1 + 1/2 + 2 * 1/4 is 1.5, reached exactly at token 9: it is the pivot, the child 4 has
    # q = 2/3 < coin 0.8 and the bonus is 9, all that is left (keeping the 1/4s as well, it is 33; leaving the
    # pivot out, or its 1/2 out of the total, the child is accepted); shortlists, then exact passes (top-k V - 1)
    pytest.param(dict(ties={4: 0.0, 9: -LN2, 21: -2 * LN2, 33: -2 * LN2}, far=True, temperature=1.0, top_k=-1,
                      top_p=0.75, child=4, coin=0.8, final_coin=0.9), 9, 0, id="top-p-boundary-shortlists"),
    pytest.param(dict(ties={4: 0.0, 9: -LN2, 21: -2 * LN2, 33: -2 * LN2}, far=True, temperature=1.0,
                      top_k=VOCAB - 1, top_p=0.75, child=4, coin=0.8, final_coin=0.9), 9, 0,
                 id="top-p-boundary-exact-passes"),
    # top-k 2 keeps all four tied maxima, q = 1/4 each; the coin 0.25 equals it: `<=` accepts, strict `<` does not
    # (then the bonus is the first of the other three past 0.3 * 3/4)
    pytest.param(dict(ties={3: 0.0, 11: 0.0, 17: 0.0, 38: 0.0}, far=False, temperature=0.8, top_k=2, top_p=1.0,
                      child=38, coin=0.25, final_coin=0.3), 38, 1, id="coin-on-running-sum"),
    pytest.param(dict(ties={3: 0.0, 11: 0.0, 17: 0.0, 38: 0.0}, far=False, temperature=0.8, top_k=2, top_p=1.0,
                      child=38, coin=0.25, final_coin=0.3, strict=True), 3, 0, id="coin-on-running-sum-strict"),
    # q = 1/2 equals threshold_single 0.5: accepted by both tests though the coin 0.9 is above q
    pytest.param(dict(ties={3: 0.0, 17: 0.0}, far=False, temperature=1.7, top_k=2, top_p=1.0, child=17, coin=0.9,
                      final_coin=0.3, thresholds=(0.5, 1.0)), 17, 1, id="q-on-threshold-single"),
    pytest.param(dict(ties={3: 0.0, 17: 0.0}, far=False, temperature=1.7, top_k=2, top_p=1.0, child=17, coin=0.9,
                      final_coin=0.3, thresholds=(0.5, 1.0), strict=True), 17, 1, id="q-on-threshold-single-strict"),
    # the child 25 has no mass; the bonus coin 0.5 lands on the CDF step of token 3 (1/2): the draw takes the
    # first token whose running sum exceeds it, 17
    pytest.param(dict(ties={3: 0.0, 17: 0.0}, far=False, temperature=1.0, top_k=2, top_p=1.0, child=25, coin=0.3,
                      final_coin=0.5), 17, 0, id="bonus-coin-on-cdf-step"),
]


@pytest.mark.parametrize("case, root_token, accepted", EXACT_TIES)
def test_fused_kernel_matches_reference_at_exact_ties(case, root_token, accepted):
    """The reference gives the hand-worked outcome, and the fused kernel (shortlists of 16-token chunks) the
    reference's outputs."""
    gen = torch.Generator().manual_seed(11)
    root = -1000 - 10 * torch.rand(VOCAB, generator=gen) if case["far"] else torch.randn(VOCAB, generator=gen) - 4
    assert bool((root < 0).all())  # below the tied maxima
    for token, value in case["ties"].items():
        root[token] = value
    logits = torch.stack([root, torch.randn(VOCAB, generator=gen)])
    tree = (torch.tensor([[0, case["child"]]]), torch.tensor([[0, 1]]), torch.tensor([[1, -1]]),
            torch.tensor([[-1, -1]]), torch.tensor([[case["coin"], 0.5]]), torch.tensor([case["final_coin"]]))
    filters = (torch.tensor([case["temperature"]]), torch.tensor([case["top_k"]], dtype=torch.int32),
               torch.tensor([case["top_p"]]))
    thresholds, strict = case.get("thresholds", (1.0, 1.0)), case.get("strict", False)
    expected, ours = poisoned_outputs(1, 2, 1), poisoned_outputs(1, 2, 1)
    reference.tree_sampling_from_logits(*expected, *tree, logits, *filters, *thresholds, strict_acceptance=strict)
    assert (int(expected[0][0]), int(expected[2][0])) == (root_token, accepted)
    sampling.tree_sampling_from_logits(*ours, *tree, logits, *filters, *thresholds, strict_acceptance=strict,
                                       block_v=16, scratch_slots=32)
    assert_same(ours, expected)


@settings(max_examples=150, deadline=None)
@given(sampling_rounds(), st.data())
def test_fused_reference_matches_oracle(case, data):
    bs, n, steps = case["bs"], case["n"], case["steps"]
    inputs = _fused_sampler_inputs(case, data)
    expected = poisoned_outputs(bs, n, steps)
    oracle.fused_tree_sampling_reference(*expected, *inputs, strict_acceptance=case["strict"])
    ours = poisoned_outputs(bs, n, steps)
    reference.tree_sampling_from_logits(*ours, *inputs, strict_acceptance=case["strict"])
    assert_same(ours, expected)


def test_fused_sampler_treats_signed_zeros_as_equal():
    # found by hypothesis: bf16 logits rounded to halves hold both -0.0 and +0.0 at the top-p
    # pivot; the kernels' order keys once put -0.0 below +0.0 and dropped those tokens
    case = dict(bs=1, topk=4, steps=2, n=5, seed=150737, orphans=True, thresholds=(1.0, 1.0), boost=0.0)
    tree_args, logits, _ = _case(case)
    logits = (torch.round(logits * 2) / 2).to(torch.bfloat16)
    assert bool(((logits == 0) & torch.signbit(logits)).any()) and bool(((logits == 0) & ~torch.signbit(logits)).any())
    filters = (torch.tensor([1.7]), torch.tensor([-1], dtype=torch.int32), torch.tensor([0.9]))
    expected, ours = poisoned_outputs(1, 5, 2), poisoned_outputs(1, 5, 2)
    reference.tree_sampling_from_logits(*expected, *tree_args, logits, *filters)
    sampling.tree_sampling_from_logits(*ours, *tree_args, logits, *filters, block_v=16, scratch_slots=32)
    assert_same(ours, expected)


@pytest.mark.parametrize("bad_logits, complaint", [
    (lambda logits: logits[1:], r"logits must be \[bs\*n, V\].*\[2, 5\] candidates \(10 rows\)"),
    (lambda logits: logits.t().contiguous().t(), "logits must have unit stride along the vocabulary"),
])
def test_fused_sampler_refuses_logits_it_cannot_index(bad_logits, complaint):
    case = dict(bs=2, topk=2, steps=2, n=5, seed=3, orphans=False, boost=0.0)
    tree_args, logits, _ = _case(case)
    filters = (torch.tensor([1.0, 0.5]), torch.tensor([-1, 4], dtype=torch.int32), torch.tensor([1.0, 0.9]))
    ours = poisoned_outputs(2, 5, 2)
    with pytest.raises(ValueError, match=complaint):
        sampling.tree_sampling_from_logits(*ours, *tree_args, bad_logits(logits), *filters)
    assert_same(ours, poisoned_outputs(2, 5, 2))  # refused before any launch


def _key(x: torch.Tensor) -> torch.Tensor:
    """The kernels' int32 order key of float32 values (larger float, larger key)."""
    bits = torch.where(x == 0, 0.0, x.float()).view(torch.int32)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(TILINGS), st.sampled_from([-1, 1, 3, 4, 8, 9]),
       st.sampled_from([1.0, 0.5]), st.booleans(), st.sampled_from([2, 4, 64]), st.sampled_from([1, 2, 256]),
       st.sampled_from([1, 2, 32]))
def test_chunk_pass_shortlists_every_token_at_or_above_a_valid_floor(seed, tiling, top_k, top_p, ties, tile,
                                                                     hot_segments, gather_segments):
    """Launch 1 alone: per chunk, the max and mass are the chunk's; the shortlist is exactly the
    chunk's tokens at or above the floor, in token order (the walk's bonus draw relies on it); the
    floor is at most the chunk's s-th largest logit (s = top-k, or the coverage for top-p alone),
    so no better token is missed. Tiles of 2 and 4 tokens make each chunk several loop steps;
    room for 1 or 2 hot segments sends most chunks through the second sweep (appends from several
    tiles), for 256 none; gathers of 1 or 2 segments take several steps."""
    block_v, slots = tiling
    gen = torch.Generator().manual_seed(seed)
    rows, vocab = 3, 37
    logits = torch.randn(rows, vocab, generator=gen) * 2
    if ties:
        logits = torch.round(logits)
    temperature = 0.7
    stats, shortlists, chunks, select_max = chunk_pass(
        logits, 1, torch.full((rows,), temperature), torch.full((rows,), top_k, dtype=torch.int32),
        torch.full((rows,), top_p), block_v, slots, tile=tile, hot_segments=hot_segments,
        gather_segments=gather_segments)
    cover = (top_k if top_k <= select_max else 0) if 0 < top_k < vocab else (select_max if top_p < 1 else 0)
    for r in range(rows):
        for c in range(chunks):
            z = logits[r, c * block_v:(c + 1) * block_v]
            record = stats[r, c].tolist()
            chunk_max, mass = record[scratch.STAT_MAX.value], record[scratch.STAT_MASS.value]
            floor, count = record[scratch.STAT_FLOOR.value], record[scratch.STAT_COUNT.value]
            assert torch.tensor(chunk_max, dtype=torch.int32).view(torch.float32) == z.max()
            expected_mass = torch.exp((z.double() - z.max()) / temperature).sum()
            assert torch.isclose(torch.tensor(mass, dtype=torch.int32).view(torch.float32).double(), expected_mass,
                                 rtol=1e-5)
            if cover == 0:
                assert count == 0
                continue
            keys = _key(z)
            assert floor <= int(torch.sort(keys, descending=True).values[min(cover, z.numel()) - 1])
            above = torch.nonzero(keys >= floor).flatten()
            assert count == len(above)
            if count <= slots:
                packed = (keys[above].long() << 32) | (above + c * block_v)
                assert torch.equal(shortlists[r, c, :count], packed)


def test_chunk_floor_is_tight_on_full_and_padded_chunks():
    """The floor's counting search ends just below the s-th largest group maximum (one segment
    of 16 tokens per group at this chunk length), also on a last chunk padded with -inf beyond
    the vocabulary: few more tokens are shortlisted than those at or above that maximum, so rows stay on the fast
    path (an overflowing shortlist would send them through exact passes)."""
    gen = torch.Generator().manual_seed(7)
    block_v, vocab, top_k = 4096, 2 * 4096 + 1000, 50
    logits = torch.randn(2, vocab, generator=gen) * 3
    stats, _, chunks, _ = chunk_pass(
        logits, 1, torch.full((2,), 1.0), torch.full((2,), top_k, dtype=torch.int32), torch.full((2,), 1.0),
        block_v, 128)
    for r in range(2):
        for c in range(chunks):
            z = logits[r, c * block_v:(c + 1) * block_v]
            best = _key(torch.cat([z, z.new_full((block_v - z.numel(),), float("-inf"))]).reshape(256, 16).amax(1))
            exact = best.sort(descending=True).values[top_k - 1]
            at_or_above_exact = int((_key(z) >= exact).sum())
            floor, count = int(stats[r, c, scratch.STAT_FLOOR.value]), int(stats[r, c, scratch.STAT_COUNT.value])
            assert floor <= exact and at_or_above_exact <= count <= at_or_above_exact + 4


@pytest.mark.parametrize("filtered", [oracle.filtered_probs_reference,
                                      lambda z, *filters: reference.filtered_probs(z[None], *filters)[0]],
                         ids=["oracle", "reference"])
def test_filtered_probs_semantics(filtered):
    """The top-k / top-p rules of the oracle and of the reference, checked by hand on a row with ties."""
    z = torch.tensor([2.0, 1.0, 1.0, 0.0, 3.0, -1.0])
    probs = filtered(z, 1.0, 3, 1.0)  # 3rd largest is 1.0, tied: 4 kept
    assert (probs > 0).tolist() == [True, True, True, False, True, False]
    e = torch.exp(z.double() - 3)
    total = e[[0, 1, 2, 4]].sum()
    # top-p 0.8 of that set: 3.0 holds e^0/total < 0.8, with 2.0 it is >= 0.8 -> pivot 2.0
    assert e[4] / total < 0.8 <= (e[4] + e[0]) / total
    probs = filtered(z, 1.0, 3, 0.8)
    assert (probs > 0).tolist() == [True, False, False, False, True, False]
    assert torch.allclose(probs.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert torch.equal(filtered(z, 1.0, 0, 1.0) > 0, torch.ones(6, dtype=torch.bool))


def test_residual_draw_oracle_follows_vocabulary_order():
    residual = torch.tensor([0.0, 0.2, 0.0, 0.5, 0.3])
    assert oracle.sample_residual_reference(residual, 0.0) == 1
    assert oracle.sample_residual_reference(residual, 0.3) == 3
    assert oracle.sample_residual_reference(residual, 0.99) == 4
    assert oracle.sample_residual_reference(torch.zeros(5), 0.5) == 4
