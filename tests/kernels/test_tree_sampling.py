"""Tree sampling: the drop-in op and the fused sampler against the pure-torch references.

Coins are fixed per example, so a kernel and its reference must make the very same draws; they
differ only when a coin lands within float rounding of a CDF step (probability ~1e-7 a draw).
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_fixtures import assert_same, built_tree, favour_children, poisoned_outputs

from sglang_eagle_ext.kernels import reference, tree_sampling

VOCAB = 40


@st.composite
def sampling_rounds(draw):
    topk = draw(st.integers(1, 4))
    steps = draw(st.integers(1, 4))
    n = draw(st.integers(2, min(topk + (steps - 1) * topk * topk, 20) + 1))
    thresholds = draw(st.sampled_from([(1.0, 1.0), (1.0, 1.0), (0.0, 0.0), (0.5, 0.3), (0.9, 1.0)]))
    return dict(bs=draw(st.integers(1, 3)), topk=topk, steps=steps, n=n, seed=draw(st.integers(0, 2**31 - 1)),
                orphans=draw(st.booleans()), thresholds=thresholds, boost=draw(st.sampled_from([0.0, 3.0, 8.0])))


def _case(case):
    bs, n = case["bs"], case["n"]
    candidates, ri, nt, ns, gen = built_tree(case["seed"], bs, case["topk"], case["steps"], n, vocab=12,
                                             orphans=case["orphans"])
    logits = favour_children(torch.randn(bs * n, VOCAB, generator=gen) * 2, candidates, nt, gen, case["boost"])
    logits[:, 20:24] = logits[:, 19:20]  # ties
    coins = torch.rand(bs, n, generator=gen)
    final_coins = torch.rand(bs, generator=gen)
    return (candidates, ri, nt, ns, coins, final_coins), logits, gen


@settings(max_examples=150, deadline=None)
@given(sampling_rounds())
def test_sampling_op_matches_reference(case):
    bs, n, steps = case["bs"], case["n"], case["steps"]
    tree_args, logits, gen = _case(case)
    probs = torch.softmax(logits / 0.8, -1).reshape(bs, n, VOCAB)
    results = []
    for op in (reference.tree_sampling_reference, tree_sampling.tree_speculative_sampling_target_only):
        out, draft = poisoned_outputs(bs, n, steps), torch.zeros_like(probs)
        kwargs = {"block_v": 16} if op is tree_sampling.tree_speculative_sampling_target_only else {}
        op(*out, *tree_args, probs, draft, *case["thresholds"], **kwargs)
        results.append(out + (draft,))
    assert_same(*results)


@st.composite
def filters(draw, bs):
    top_ks = draw(st.lists(st.sampled_from([-1, 0, 1, 2, 5, 12, 30, VOCAB, 100]), min_size=bs, max_size=bs))
    top_ps = draw(st.lists(st.sampled_from([1.0, 0.999, 0.9, 0.6, 0.2, 0.01]), min_size=bs, max_size=bs))
    temperatures = draw(st.lists(st.sampled_from([0.3, 0.8, 1.0, 1.7]), min_size=bs, max_size=bs))
    return torch.tensor(temperatures), torch.tensor(top_ks, dtype=torch.int32), torch.tensor(top_ps)


@settings(max_examples=80, deadline=None)
@given(sampling_rounds(), st.data())
def test_fused_sampler_matches_reference(case, data):
    bs, n, steps = case["bs"], case["n"], case["steps"]
    tree_args, logits, gen = _case(case)
    temperatures, top_ks, top_ps = data.draw(filters(bs))
    if case["seed"] % 2:
        logits = logits.to(torch.bfloat16)
    expected = poisoned_outputs(bs, n, steps)
    reference.fused_tree_sampling_reference(*expected, *tree_args, logits, temperatures, top_ks, top_ps,
                                            *case["thresholds"])
    # A small tile and scratch send some rows down the exact fallback passes (top-k above what
    # the tile selects, scratch overflow, top-p pivot beyond the collected tokens).
    ours = poisoned_outputs(bs, n, steps)
    tree_sampling.tree_sampling_from_logits(*ours, *tree_args, logits, temperatures, top_ks, top_ps,
                                            *case["thresholds"], block_v=16, scratch_slots=32)
    assert_same(ours, expected)


def test_filtered_probs_reference_semantics():
    """The reference's top-k / top-p rules, checked by hand on a row with ties."""
    z = torch.tensor([2.0, 1.0, 1.0, 0.0, 3.0, -1.0])
    probs = reference.filtered_probs_reference(z, 1.0, 3, 1.0)  # 3rd largest is 1.0, tied: 4 kept
    assert (probs > 0).tolist() == [True, True, True, False, True, False]
    e = torch.exp(z.double() - 3)
    total = e[[0, 1, 2, 4]].sum()
    # top-p 0.8 of that set: 3.0 holds e^0/total < 0.8, with 2.0 it is >= 0.8 -> pivot 2.0
    assert e[4] / total < 0.8 <= (e[4] + e[0]) / total
    probs = reference.filtered_probs_reference(z, 1.0, 3, 0.8)
    assert (probs > 0).tolist() == [True, False, False, False, True, False]
    assert torch.allclose(probs.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert torch.equal(reference.filtered_probs_reference(z, 1.0, 0, 1.0) > 0, torch.ones(6, dtype=torch.bool))


def test_residual_draw_reference_follows_vocabulary_order():
    residual = torch.tensor([0.0, 0.2, 0.0, 0.5, 0.3])
    assert reference.sample_residual_reference(residual, 0.0) == 1
    assert reference.sample_residual_reference(residual, 0.3) == 3
    assert reference.sample_residual_reference(residual, 0.99) == 4
    assert reference.sample_residual_reference(torch.zeros(5), 0.5) == 4
