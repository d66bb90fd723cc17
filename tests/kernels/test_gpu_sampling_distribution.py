"""GPU statistics of the tree samplers: the tokens they emit follow the target distribution
(chi-square over >= 100,000 draws), and the fused sampler makes the draws of SGLang's own op given
identical coins where the two define the same target distribution.

Run on a CUDA machine (``sglang-kernel`` importable for the comparison with SGLang); skipped
elsewhere. ``-s`` prints the statistics and counts. Seeds are fixed, so p-values are reproducible.
"""

import pytest
import torch

from tests.kernels.gpu_marks import CUDA, SAMPLING_OP, SOURCE, STRICT_ACCEPTANCE, needs_cuda, needs_sgl

if CUDA:
    from sglang_eagle_ext.kernels import sampling, tree_build
    from tests.kit import kernel_reference as reference
    from tests.kit.draft_trees import random_draft_tree

# One verify tree of n = 8 nodes, 3 draft steps: the root's children are 1, 2, 3; node 1's are
# 4 and 5; node 4's is 6 (full depth); node 2's is 7.
PARENTS = [-1, 0, 0, 0, 1, 1, 4, 2]
STEPS = 3
# Which token of its parent's row each child carries, by rank in that row (0 = most likely):
# node 3 ranks below every filter, so it is always rejected.
CHILD_RANK = {1: 0, 2: 3, 3: 5000, 4: 1, 5: 0, 6: 0, 7: 2}
VOCAB = 50_000  # four chunks of the row pass, the last one partial
DRAWS_PER_CALL, CALLS = 5_000, 20  # 100,000 draws
MIN_P_VALUE = 1e-3


def _links(n: int):
    next_token = [-1] * n
    next_sibling = [-1] * n
    for child in range(n - 1, 0, -1):  # descending: sibling lists end up ascending
        parent = PARENTS[child]
        next_sibling[child] = next_token[parent]
        next_token[parent] = child
    return torch.tensor(next_token), torch.tensor(next_sibling)


def _tree_rows(scale: float, margin: float, seed: int):
    """Logits of the 8 rows and the tokens of the tree's nodes (chosen by rank in the rows); the
    tokens of path 0-1-4-6 are raised ``margin`` above their row's maximum, so that it is often
    accepted to full depth."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randn(len(PARENTS), VOCAB, generator=gen) * scale
    rows[:, 7000:7004] = rows[:, 6999:7000]  # ties somewhere in the middle of every row
    order = torch.argsort(rows, dim=1, descending=True)
    tokens = torch.zeros(len(PARENTS), dtype=torch.int64)
    tokens[0] = 17
    for child, rank in CHILD_RANK.items():
        tokens[child] = order[PARENTS[child], rank]
    for child in (1, 4, 6):
        rows[PARENTS[child], tokens[child]] = rows[PARENTS[child]].max() + margin
    return rows, tokens


def _chi_square(counts: torch.Tensor, probs: torch.Tensor):
    """``(p-value, statistic, dof)`` of observed ``counts`` against ``probs`` (float64); bins
    expecting fewer than 5 draws are pooled into one. A draw of a zero-probability token fails."""
    expected = probs * counts.sum()
    assert counts[expected == 0].sum() == 0, "a token of probability zero was drawn"
    big = expected >= 5
    observed = torch.cat([counts[big], counts[~big & (expected > 0)].sum().reshape(1)])
    wanted = torch.cat([expected[big], expected[~big & (expected > 0)].sum().reshape(1)])
    if wanted[-1] == 0:
        observed, wanted = observed[:-1], wanted[:-1]
    stat = float(((observed - wanted) ** 2 / wanted).sum())
    dof = observed.numel() - 1
    p_value = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                            torch.tensor(stat / 2, dtype=torch.float64)))
    return p_value, stat, dof


def _draws(sampler, n: int, seed: int):
    """Run ``sampler(outputs, candidates, links, coins, final_coins, bs)`` CALLS times over
    DRAWS_PER_CALL copies of the tree; returns the emitted tokens that the checks need."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    next_token, next_sibling = (x.cuda() for x in _links(n))
    bs = DRAWS_PER_CALL
    ri = torch.arange(bs * n, device="cuda").reshape(bs, n)
    nt, ns = next_token.repeat(bs, 1), next_sibling.repeat(bs, 1)
    first, after_node1, after_path_to_6, accepted = [], [], [], 0
    for _ in range(CALLS):
        outputs = (torch.full((bs * n,), -5, dtype=torch.int32, device="cuda"),
                   torch.full((bs, STEPS + 1), -1, dtype=torch.int32, device="cuda"),
                   torch.full((bs,), -3, dtype=torch.int32, device="cuda"))
        coins = torch.rand(bs, n, device="cuda", generator=gen)
        final_coins = torch.rand(bs, device="cuda", generator=gen)
        sampler(outputs, ri, nt, ns, coins, final_coins, bs)
        predicts, accept_index, accept_num = outputs
        base = torch.arange(bs, device="cuda") * n
        first.append(predicts[base].long())
        # Given that node 1 was accepted at the root, the next token follows row 1's distribution
        # (whether node 4 or 5 was accepted there, or the residual was drawn).
        took1 = accept_index[:, 1] == base + 1
        after_node1.append(predicts[base[took1] + 1].long())
        # Path 0-1-4-6 is full depth: the bonus token at row 6 follows row 6 unrestricted.
        took6 = accept_index[:, 3] == base + 6
        after_path_to_6.append(predicts[base[took6] + 6].long())
        accepted += int(accept_num.sum())
    return torch.cat(first), torch.cat(after_node1), torch.cat(after_path_to_6), accepted


def _check(label: str, draws, target_rows):
    first, after_node1, after_path_to_6, accepted = draws
    results = []
    for name, tokens, row in (("first token", first, 0), ("after node 1", after_node1, 1),
                              ("after 0-1-4-6", after_path_to_6, 6)):
        counts = torch.bincount(tokens.cpu(), minlength=VOCAB).double()
        p_value, stat, dof = _chi_square(counts, target_rows[row])
        print(f"{label}, {name}: {tokens.numel()} draws, support {int((target_rows[row] > 0).sum())}, "
              f"chi2 {stat:.1f}, dof {dof}, p = {p_value:.3f}")
        results.append((tokens.numel(), p_value))
    print(f"{label}: {accepted / (CALLS * DRAWS_PER_CALL):.2f} draft tokens accepted per request")
    assert results[0][0] >= 100_000 and min(r[0] for r in results) >= 2_000
    assert min(r[1] for r in results) > MIN_P_VALUE


@needs_cuda
@pytest.mark.parametrize("label, scale, margin, temperature, top_k, top_p", [
    ("top-k 50 + top-p 0.9 (shortlists)", 2.0, 2.0, 0.8, 50, 0.9),
    ("top-p 0.9 alone (shortlists, row 6 by bisection)", 3.0, 0.0, 0.7, -1, 0.9),
    ("top-k 300 (exact passes over the row)", 2.0, 2.0, 0.7, 300, 1.0),
    ("unfiltered", 1.0, 8.0, 1.0, 0, 1.0),
])
def test_fused_sampler_emits_the_target_distribution(label, scale, margin, temperature, top_k, top_p):
    n = len(PARENTS)
    rows, tokens = _tree_rows(scale, margin, seed=21)
    target = [reference.filtered_probs_reference(rows[r], temperature, top_k, top_p) for r in range(n)]
    logits = rows.cuda().repeat(DRAWS_PER_CALL, 1)
    candidates = tokens.cuda().repeat(DRAWS_PER_CALL, 1)
    bs = DRAWS_PER_CALL
    filters = (torch.full((bs,), temperature, device="cuda"),
               torch.full((bs,), top_k, dtype=torch.int32, device="cuda"), torch.full((bs,), top_p, device="cuda"))

    def fused(outputs, ri, nt, ns, coins, final_coins, bs):
        sampling.tree_sampling_from_logits(*outputs, candidates, ri, nt, ns, coins, final_coins, logits, *filters)

    _check(f"fused, {label}", _draws(fused, n, seed=22), target)


@needs_cuda
def test_drop_in_op_emits_the_target_distribution():
    n = len(PARENTS)
    temperature, top_k, top_p = 0.8, 50, 0.9
    rows, tokens = _tree_rows(2.0, 2.0, seed=23)
    target = [reference.filtered_probs_reference(rows[r], temperature, top_k, top_p) for r in range(n)]
    probs = torch.stack(target).float().cuda().repeat(DRAWS_PER_CALL, 1, 1)
    candidates = tokens.cuda().repeat(DRAWS_PER_CALL, 1)

    def drop_in(outputs, ri, nt, ns, coins, final_coins, bs):
        sampling.tree_speculative_sampling_target_only(*outputs, candidates, ri, nt, ns, coins, final_coins,
                                                       probs, torch.zeros_like(probs))

    _check("drop-in op, top-k 50 + top-p 0.9", _draws(drop_in, n, seed=24), target)


def _choices(values, size: int, gen, dtype=None):
    return torch.tensor(values, dtype=dtype)[torch.randint(0, len(values), (size,), generator=gen)]


@needs_sgl
def test_fused_sampler_makes_sglang_draws_with_identical_coins():
    """SGLang's op fed with the target distribution of the fused sampler's semantics (the
    reference's, computed on the CPU, float32) and our fused sampler on the logits: same coins,
    same outputs. Rows of three chunks (the last partial), random trees, filters spanning the
    shortlist and fallback paths."""
    gen = torch.Generator().manual_seed(25)
    vocab = 40_000
    requests = differ = 0
    for k, steps, n in [(1, 3, 4), (4, 3, 8), (8, 5, 32), (3, 4, 20)]:
        for trial in range(8):
            bs = int(torch.randint(1, 9, (1,), generator=gen))
            tree = random_draft_tree(bs, k, steps, n, vocab=vocab, generator=gen, device="cuda")
            _, _, ri, nt, ns, tokens = tree_build.build_eagle_tree(
                tree.bonus_tokens, tree.parent_list, tree.top_scores_index, tree.draft_tokens, tree.seq_lens,
                int(tree.seq_lens.sum()), k, steps, n)
            candidates = tokens.reshape(bs, n)
            logits = torch.randn(bs * n, vocab, generator=gen) * 2.5
            child = torch.where(nt >= 0, torch.gather(candidates, 1, nt.clamp(min=0)), 0).reshape(-1).cpu()
            logits[torch.arange(bs * n), child] += 8.0 * (trial % 2)  # long accepted paths half of the time
            logits[:, 500:510] = logits[:, 499:500]  # ties
            temperatures = torch.rand(bs, generator=gen) + 0.5
            # top-k at and beyond the shortlists' coverage (64), none; top-p from none to tight.
            top_ks = _choices([1, 8, 50, 64, 65, 200, -1, 0], bs, gen, torch.int32)
            top_ps = _choices([1.0, 0.95, 0.8, 0.5, 0.1], bs, gen)
            probs = torch.stack([reference.filtered_probs_reference(logits[r], float(temperatures[r // n]),
                                                                    int(top_ks[r // n]), float(top_ps[r // n]))
                                 for r in range(bs * n)]).float().reshape(bs, n, vocab).cuda()
            logits, temperatures, top_ks, top_ps = (x.cuda() for x in (logits, temperatures, top_ks, top_ps))
            coins = torch.rand(bs, n, generator=gen).cuda()
            final_coins = torch.rand(bs, generator=gen).cuda()
            outputs = []
            for fused in (False, True):
                out = (torch.full((bs * n,), -5, dtype=torch.int32, device="cuda"),
                       torch.full((bs, steps + 1), -1, dtype=torch.int32, device="cuda"),
                       torch.full((bs,), -3, dtype=torch.int32, device="cuda"))
                if fused:
                    sampling.tree_sampling_from_logits(*out, candidates, ri, nt, ns, coins, final_coins, logits,
                                                       temperatures, top_ks, top_ps,
                                                       strict_acceptance=STRICT_ACCEPTANCE)
                else:
                    SAMPLING_OP(*out, candidates, ri, nt, ns, coins, final_coins, probs, torch.zeros_like(probs))
                outputs.append(out)
            (p0, a0, c0), (p1, a1, c1) = outputs
            same = (c0 == c1) & (a0 == a1).all(1) & (p0 == p1).reshape(bs, n).all(1)
            requests += bs
            differ += int((~same).sum())
    print(f"fused sampler vs {SOURCE} sampling op on the same distribution: "
          f"{requests - differ}/{requests} requests identical")
    # Only the float order of sums differs: a coin within rounding of a CDF step.
    assert requests >= 80 and differ <= max(1, requests // 500)
