"""Sampled EAGLE verify on a CPU-only host: the plain-torch renorm and tree-sampling ops (the
sampling references, ``kernels/sampling/reference.py``) against the float64 oracle, the
distribution they sample, and their binding into SGLang.

The tree op alone is checked against the oracle's ``tree_sampling_reference`` in
``tests/kernels/test_tree_sampling.py`` (and the Triton drop-in against the tree op). Here the ops
run as SGLang's ``eagle_sample`` chains them: ``softmax(logits / T)``, top-k renorm, top-p renorm,
tree sampling.
"""

import importlib
from types import SimpleNamespace

import pytest
import torch
from tests.kernels.tree_fixtures import assert_same, built_tree, favour_children, one_child_round, poisoned_outputs

from sglang_eagle_ext.sglang.compat import cpu, cpu_sampling, installed_release
from sglang_eagle_ext.sglang.compat.releases import STRICT_ACCEPTANCE
from tests.kit import kernel_reference as reference
from tests.kit import verify_batch

VOCAB = 64
TOP_K_ALL = verify_batch.TOP_K_ALL
TOP_KS = [TOP_K_ALL, 1, 2, 5, 20, VOCAB - 1, VOCAB]
TOP_PS = [1.0, 0.999, 0.9, 0.5, 0.1]


def verify_probs(logits, temperatures, top_ks, top_ps):
    """The target probabilities SGLang 0.5.23's ``eagle_sample`` builds, through our ops (a renorm
    runs only when some row needs it, as there)."""
    probs = torch.softmax(logits / temperatures.unsqueeze(1), dim=-1)
    if bool((top_ks != TOP_K_ALL).any()):
        probs = cpu_sampling.top_k_renorm_prob(probs, top_ks)
    if bool((top_ps != 1.0).any()):
        probs = cpu_sampling.top_p_renorm_prob(probs, top_ps)
    return probs


def random_filters(rows, gen):
    pick = lambda values: torch.tensor(values)[torch.randint(len(values), (rows,), generator=gen)]  # noqa: E731
    return pick([0.3, 0.8, 1.0, 1.7]), pick(TOP_KS).to(torch.int32), pick(TOP_PS)


@pytest.mark.parametrize("seed", range(6))
def test_renorm_matches_the_float64_filter(seed):
    gen = torch.Generator().manual_seed(seed)
    rows = 48
    logits = torch.randn(rows, VOCAB, generator=gen) * 3
    if seed % 2:
        logits = torch.round(logits * 2) / 2  # ties at the top-k and top-p pivots
    temperatures, top_ks, top_ps = random_filters(rows, gen)
    ours = verify_probs(logits, temperatures, top_ks, top_ps)
    for row in range(rows):
        expected = reference.filtered_probs_reference(logits[row], float(temperatures[row]), int(top_ks[row]),
                                                      float(top_ps[row]))
        assert torch.equal(ours[row] > 0, expected > 0), row  # the same tokens survive
        torch.testing.assert_close(ours[row].double(), expected, rtol=1e-5, atol=1e-7)
    assert bool((ours > 0).sum(-1).lt(VOCAB).any())  # the filters did cut rows


def test_renorm_takes_scalars_and_keeps_ties_at_the_pivot():
    probs = torch.tensor([[0.4, 0.2, 0.2, 0.1, 0.1]])
    torch.testing.assert_close(cpu_sampling.top_k_renorm_prob(probs, 2), torch.tensor([[0.5, 0.25, 0.25, 0, 0]]))
    torch.testing.assert_close(cpu_sampling.top_k_renorm_prob(probs, TOP_K_ALL), probs)
    # 0.4 + 0.2 reaches 0.55: the pivot is 0.2, and its tie stays
    torch.testing.assert_close(cpu_sampling.top_p_renorm_prob(probs, 0.55), torch.tensor([[0.5, 0.25, 0.25, 0, 0]]))
    torch.testing.assert_close(cpu_sampling.top_p_renorm_prob(probs, 0.3), torch.tensor([[1.0, 0, 0, 0, 0]]))
    # a set whose mass equals top_p exactly is enough (FlashInfer's and the reference's rule)
    halves = torch.tensor([[0.5, 0.25, 0.25]])
    torch.testing.assert_close(cpu_sampling.top_p_renorm_prob(halves, 0.5), torch.tensor([[1.0, 0, 0]]))
    torch.testing.assert_close(cpu_sampling.top_p_renorm_prob(probs, 1.0), probs)
    with pytest.raises(ValueError, match="one value per row"):
        cpu_sampling.top_k_renorm_prob(probs, torch.tensor([1, 2]))


@pytest.mark.parametrize("seed", range(12))
def test_verify_pipeline_accepts_as_the_float64_reference(seed):
    """Same coins, same trees: our ops accept the same drafts and draw the same tokens as the
    float64 filter followed by the reference walk, for every release's acceptance test."""
    bs, topk, steps, n = 3, 4, 3, 13
    candidates, ri, nt, ns, gen = built_tree(seed, bs, topk, steps, n, vocab=12, orphans=seed % 3 == 0)
    logits = favour_children(torch.randn(bs * n, VOCAB, generator=gen) * 2, candidates, nt, gen, boost=6.0)
    temperatures, top_ks, top_ps = random_filters(bs, gen)
    coins, final_coins = torch.rand(bs, n, generator=gen), torch.rand(bs, generator=gen)
    strict = bool(seed % 2)
    expected = poisoned_outputs(bs, n, steps)
    reference.fused_tree_sampling_reference(*expected, candidates, ri, nt, ns, coins, final_coins, logits,
                                            temperatures, top_ks, top_ps, strict_acceptance=strict)
    ours = poisoned_outputs(bs, n, steps)
    probs = verify_probs(logits, temperatures.repeat_interleave(n), top_ks.repeat_interleave(n),
                         top_ps.repeat_interleave(n)).reshape(bs, n, VOCAB)
    cpu_sampling.tree_speculative_sampling_target_only(*ours, candidates, ri, nt, ns, coins, final_coins, probs,
                                                       torch.zeros_like(probs), strict_acceptance=strict)
    assert_same(ours, expected)


def _repeated_tree(copies: int):
    """One verify tree, ``copies`` times: root 0 with children 1, 2, 3 (tokens 1, 2, 3); node 1
    with children 4, 5 (tokens 4, 5); two draft steps. Each node's row is a different target
    distribution over 8 tokens, with much of its mass on the children's tokens."""
    n, vocab = 6, 8
    rows = torch.tensor([[0.05, 0.30, 0.15, 0.10, 0.05, 0.05, 0.20, 0.10],
                         [0.10, 0.05, 0.05, 0.05, 0.35, 0.20, 0.10, 0.10],
                         [0.125] * 8, [0.125] * 8,
                         [0.30, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10],
                         [0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.65]])
    per_request = lambda row: torch.tensor(row).repeat(copies, 1)  # noqa: E731
    tree = (per_request([0, 1, 2, 3, 4, 5]), torch.arange(copies * n).reshape(copies, n),
            per_request([1, 4, -1, -1, -1, -1]), per_request([-1, 2, 3, -1, 5, -1]))
    return tree, rows, rows.repeat(copies, 1, 1).reshape(copies, n, vocab)


def test_sampled_tokens_follow_the_target_distribution():
    """Target-only tree sampling is exact: the first token is distributed as the root's row, and
    the token after an accepted child as that child's row (seeded; 5 standard deviations)."""
    copies = 40000
    tree, rows, probs = _repeated_tree(copies)
    gen = torch.Generator().manual_seed(11)
    predicts, accept_index, accepted = poisoned_outputs(copies, 6, 2)
    cpu_sampling.tree_speculative_sampling_target_only(
        predicts, accept_index, accepted, *tree, torch.rand(copies, 6, generator=gen),
        torch.rand(copies, generator=gen), probs, torch.zeros_like(probs), strict_acceptance=True)
    first = predicts[accept_index[:, 0].long()].long()
    second = predicts[accept_index[:, 1].clamp(min=0).long()].long()

    def assert_distributed_as(tokens, expected):
        frequency = torch.bincount(tokens, minlength=expected.numel()).double() / tokens.numel()
        tolerance = 5 * torch.sqrt(expected * (1 - expected) / tokens.numel())
        assert bool(((frequency - expected.double()).abs() <= tolerance).all()), (frequency, expected)

    assert_distributed_as(first, rows[0])
    assert bool((accepted[first == 1] >= 1).all()) and bool((accepted[first == 5] == 0).all())
    assert_distributed_as(second[first == 1], rows[1])  # child 1 (token 1) accepted: its row next
    assert_distributed_as(second[first == 2], rows[2])


def test_binding_fills_only_the_names_sglang_left_none(capsys):
    def stock_renorm(probs, top_k):
        return probs

    module = SimpleNamespace(top_k_renorm_prob=stock_renorm, top_p_renorm_prob=None,
                             tree_speculative_sampling_target_only=None)
    cpu._supply_verify_sampling(module)
    assert module.top_k_renorm_prob is stock_renorm
    assert module.top_p_renorm_prob is cpu_sampling.top_p_renorm_prob
    assert "top_p_renorm_prob, tree_speculative_sampling_target_only" in capsys.readouterr().err
    # the bound tree op applies the installed release's acceptance test: a coin equal to the
    # child's mass accepts it only before 0.5.21
    tree, probs, thresholds = one_child_round(0.5, 0.5, 1.0)
    out = poisoned_outputs(1, 2, 1)
    module.tree_speculative_sampling_target_only(*out, *tree, probs, torch.zeros_like(probs), *thresholds)
    assert int(out[2][0]) == (0 if STRICT_ACCEPTANCE.holds(installed_release()) else 1)
    # a release whose verify module lacks the names (0.5.22 and older) gets nothing
    older = SimpleNamespace()
    cpu._supply_verify_sampling(older)
    assert vars(older) == {} and capsys.readouterr().err == ""


def test_installed_sglang_verify_gets_the_ops_on_this_host():
    """The CPU shims (installed by the test session, as by ``sglang-eagle serve`` in every SGLang
    process) bind our ops into the installed SGLang's ``eagle_utils``, where it has no kernel."""
    if torch.cuda.is_available():
        pytest.skip("SGLang has CUDA kernels here: nothing is bound")
    eagle_utils = importlib.import_module("sglang.srt.speculative.eagle_utils")
    assert eagle_utils.top_k_renorm_prob is cpu_sampling.top_k_renorm_prob
    assert eagle_utils.top_p_renorm_prob is cpu_sampling.top_p_renorm_prob
    bound = eagle_utils.tree_speculative_sampling_target_only
    assert bound.func is cpu_sampling.tree_speculative_sampling_target_only
    assert bound.keywords == {"strict_acceptance": STRICT_ACCEPTANCE.holds(installed_release())}


@pytest.mark.parametrize("seed", [2, 5])
def test_sglang_eagle_sample_draws_as_the_float64_reference(seed, monkeypatch):
    """SGLang's own sampled verify (the installed release's ``eagle_sample``) on this host, through
    the bound ops: the same accepts and tokens as the float64 reference with the coins SGLang
    draws (a mixed batch: top-k 50 with top-p 0.9, a greedy row, plain temperature)."""
    if torch.cuda.is_available():
        pytest.skip("SGLang has CUDA kernels here: nothing is bound")
    import sglang.srt.runtime_context as runtime_context

    eagle_utils = importlib.import_module("sglang.srt.speculative.eagle_utils")
    spec = SimpleNamespace(speculative_use_rejection_sampling=False, speculative_accept_threshold_single=1.0,
                           speculative_accept_threshold_acc=1.0)
    monkeypatch.setattr(eagle_utils, "get_spec", lambda: spec)  # no server published its settings here
    single = SimpleNamespace(world_size=1)
    monkeypatch.setattr(runtime_context, "get_parallel", lambda: SimpleNamespace(tp_group=single, attn_tp_group=single))

    bs, topk, steps, n, vocab = 3, 2, 3, 6, 384
    candidates, retrive_index, next_token, next_sibling, gen = built_tree(seed, bs, topk, steps, n, vocab=vocab)
    logits = favour_children(torch.randn(bs * n, vocab, generator=gen) * 2.5, candidates, next_token, gen, boost=10.0)
    info = verify_batch.sampling_info(torch.tensor([[0.7], [1.0], [0.9]]),
                                      torch.tensor([50, 1, TOP_K_ALL], dtype=torch.int32),
                                      torch.tensor([0.9, 1.0, 1.0]))
    torch.manual_seed(seed)
    coins = torch.rand_like(candidates, dtype=torch.float32)  # SGLang's draws, in its order
    final_coins = torch.rand((bs,), dtype=torch.float32)
    expected = poisoned_outputs(bs, n, steps)
    reference.fused_tree_sampling_reference(*expected, candidates, retrive_index, next_token, next_sibling, coins,
                                            final_coins, logits, info.temperatures.reshape(-1), info.top_ks,
                                            info.top_ps, strict_acceptance=STRICT_ACCEPTANCE.holds(installed_release()))

    verify_input = verify_batch.verify_input(candidates.reshape(-1), n, steps, topk, retrive_index, next_token,
                                             next_sibling)
    batch = verify_batch.batch(info, torch.tensor([11, 17, 23]), candidates.reshape(-1))
    torch.manual_seed(seed)
    predict, accept_lens, accept_index = eagle_utils.eagle_sample(verify_input, batch,
                                                                  SimpleNamespace(next_token_logits=logits.clone()))
    assert torch.equal(accept_index, expected[1]) and torch.equal(accept_lens, expected[2] + 1)
    accepted_rows = expected[1][expected[1] >= 0].long()
    assert torch.equal(predict[accepted_rows], expected[0][accepted_rows])
    assert int(expected[2].sum()) > 0  # drafts were accepted: the walk went past the roots
