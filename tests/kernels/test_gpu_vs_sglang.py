"""GPU checks of the tree kernels against the installed SGLang's own CUDA ops (``gpu_marks``): build, greedy
(drop-in and every fused plan), the drop-in sampling op and its plain-torch reference with identical
coins, the fused sampler against its reference, and CUDA-graph replays of every op. The fused sampler's distribution
and SGLang-equality tests live in ``test_gpu_sampling_distribution.py``.

Run on a CUDA machine with SGLang installed (or ``sgl_kernel`` alone, whose ops are then compared);
skipped elsewhere. Each test prints its counts (``-s`` shows them).
"""

import functools

import pytest
import torch

from tests.kernels.gpu_marks import (BUILD_OP, CUDA, GREEDY_OP, SAMPLING_OP, SOURCE, STRICT_ACCEPTANCE, needs_cuda,
                                     needs_sgl)

if CUDA:
    from sglang_eagle_ext.kernels import sampling, tree_build, verify_greedy
    from sglang_eagle_ext.kernels.sampling import reference
    from tests.kit.draft_trees import random_draft_tree
    from sglang_eagle_ext.kernels.tree_mask_modes import (
        FULL_MASK,
        QLEN_ONLY,
        QLEN_ONLY_BITPACKING,
        bitpacked_bytes_per_row,
    )

CONFIGS = [(1, 3, 4), (4, 3, 8), (8, 5, 32), (8, 5, 64), (2, 1, 3), (3, 4, 20), (6, 6, 48), (16, 3, 128)]


def _valid(tree):
    """True per request when every selected node's parent is selected (SGLang's op is defined)."""
    sel, parents = tree.top_scores_index, tree.parent_list
    block = sel // tree.topk
    if parents.shape[1] == 0:
        return torch.ones(sel.shape[0], dtype=torch.bool)
    parent_flat = torch.gather(parents, 1, block.clamp(max=parents.shape[1] - 1))
    found = (parent_flat[:, :, None] == sel[:, None, :]).any(-1)
    return ((block == 0) | found).all(1).cpu()


def _mask_buffer(mode, seq_lens, bs, n):
    if mode == FULL_MASK:
        return torch.ones(int(seq_lens.sum()) * n + n * n * bs, dtype=torch.bool, device="cuda")
    if mode == QLEN_ONLY:
        return torch.ones(n * n * bs, dtype=torch.bool, device="cuda")
    dtype = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[bitpacked_bytes_per_row(n)]
    return torch.zeros(n * bs, dtype=dtype, device="cuda")


def _build(fn, tree, mode):
    bs, n = tree.top_scores_index.shape[0], tree.num_draft_tokens
    mask = _mask_buffer(mode, tree.seq_lens, bs, n)
    positions = torch.full((bs * n,), -7, dtype=torch.long, device="cuda")
    links = torch.full((3, bs, n), -1, dtype=torch.long, device="cuda")
    fn(tree.parent_list, tree.top_scores_index, tree.seq_lens, mask, positions, links[0], links[1], links[2],
       tree.topk, tree.steps, n, mode)
    return mask, positions, links


def _request_views(mask, positions, links, mode, seq_lens, n):
    """Per-request outputs, so that requests SGLang leaves undefined can be left out."""
    out, start = [], 0
    bytes_row = mask.view(torch.uint8).numel() // (len(seq_lens) * n) if mode == QLEN_ONLY_BITPACKING else 0
    for b, s in enumerate(seq_lens.tolist()):
        if mode == FULL_MASK:
            size = n * (s + n)
            m = mask[start:start + size]
            start += size
        elif mode == QLEN_ONLY:
            m = mask[b * n * n:(b + 1) * n * n]
        else:
            m = mask.view(torch.uint8)[b * n * bytes_row:(b + 1) * n * bytes_row]
        out.append((m, positions[b * n:(b + 1) * n], links[:, b]))
    return out


@needs_sgl
def test_build_tree_equals_sglang_on_random_trees():
    gen = torch.Generator().manual_seed(11)
    compared = skipped = 0
    for k, steps, n in CONFIGS:
        modes = [FULL_MASK, QLEN_ONLY] + ([QLEN_ONLY_BITPACKING] if n <= 32 else [])
        for trial in range(25):
            bs = int(torch.randint(1, 65, (1,), generator=gen))
            tree = random_draft_tree(bs, k, steps, n, vocab=max(64, k), max_seq_len=600,
                                     tie_levels=20 if trial % 2 else None, generator=gen, device="cuda")
            # SGLang's chain walk of an invalid tree writes past its rows, into the next request's
            # mask block: only requests whose predecessor is valid too are defined there.
            valid = _valid(tree)
            defined = valid & torch.cat([torch.ones(1, dtype=torch.bool), valid[:-1]])
            for mode in modes:
                ours = _request_views(*_build(tree_build.build_tree_kernel_efficient, tree, mode), mode,
                                      tree.seq_lens, n)
                theirs = _request_views(*_build(BUILD_OP, tree, mode), mode,
                                        tree.seq_lens, n)
                for b, (o, t) in enumerate(zip(ours, theirs)):
                    if not defined[b]:
                        assert torch.equal(o[2], t[2]), "links differ on an invalid tree"
                        skipped += 1
                        continue
                    for x, y in zip(o, t):
                        assert torch.equal(x, y), (k, steps, n, mode, b)
                    compared += 1
    print(f"build_tree: {compared} request trees equal to {SOURCE} (all outputs); "
          f"{skipped} invalid trees (or next to one) compared on links only")
    assert compared >= 2000


def _greedy_case(gen, k, steps, n, bs, vocab=32):
    tree = random_draft_tree(bs, k, steps, n, vocab=vocab, generator=gen, device="cuda")
    _, _, ri, nt, ns, tokens = tree_build.build_eagle_tree(
        tree.bonus_tokens, tree.parent_list, tree.top_scores_index, tree.draft_tokens, tree.seq_lens,
        int(tree.seq_lens.sum()), k, steps, n)
    candidates = tokens.reshape(bs, n)
    # Targets that often agree with a child, so that paths get long.
    device_gen = torch.Generator(device="cuda").manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
    logits = torch.randn(bs * n, vocab, device="cuda", generator=device_gen)  # full rows: made on the GPU
    first_child_token = torch.where(nt >= 0, torch.gather(candidates, 1, nt.clamp(min=0)), 0).reshape(-1)
    boost = (torch.rand(bs * n, generator=gen).cuda() < 0.8).float() * 6
    logits[torch.arange(bs * n, device="cuda"), first_child_token] += boost
    return candidates, ri, nt, ns, logits


def _greedy_outputs(bs, n, steps):
    return (torch.full((bs * n,), -5, dtype=torch.int32, device="cuda"),
            torch.full((bs, steps + 1), -1, dtype=torch.int32, device="cuda"),
            torch.full((bs,), -3, dtype=torch.int32, device="cuda"))


# Our fused greedy plans, as the caller picks them: the default choice; split and lazy forced;
# lazy with many programs per path row; lazy where every program but the last gives up waiting
# at once and reduces the whole row alone (the no-hang fallback).
GREEDY_PLANS = {
    "default": {},
    "split": dict(lazy=False),
    "lazy": dict(lazy=True),
    "lazy, 8 programs/SM": dict(lazy=True, target_programs=8 * 132),
    "lazy, no waiting": dict(lazy=True, max_polls=1),
}


@needs_sgl
def test_verify_greedy_equals_sglang_on_random_trees():
    gen = torch.Generator().manual_seed(12)
    requests = accepted = 0
    for k, steps, n in CONFIGS:
        for trial in range(20):
            bs = int(torch.randint(1, 65, (1,), generator=gen))
            vocab = 32 if trial % 2 else 128256  # tiny rows, and full rows as the benchmark's
            candidates, ri, nt, ns, logits = _greedy_case(gen, k, steps, n, bs, vocab)
            if trial % 4 == 1:
                logits = logits.bfloat16()
            target = logits.argmax(-1).reshape(bs, n)
            theirs = _greedy_outputs(bs, n, steps)
            GREEDY_OP(*theirs, candidates, ri, nt, ns, target)
            ours = _greedy_outputs(bs, n, steps)
            verify_greedy.verify_tree_greedy(*ours, candidates, ri, nt, ns, target)
            for x, y in zip(theirs, ours):
                assert torch.equal(x, y), "drop-in"
            for plan, options in GREEDY_PLANS.items():
                fused = _greedy_outputs(bs, n, steps)
                verify_greedy.verify_tree_greedy_from_logits(*fused, candidates, ri, nt, ns, logits, **options)
                for x, y in zip(theirs, fused):
                    assert torch.equal(x, y), plan
            requests += bs
            accepted += int(theirs[2].sum())
    print(f"verify_greedy: {requests} requests equal to argmax + {SOURCE} greedy (drop-in and "
          f"{len(GREEDY_PLANS)} fused plans each: {', '.join(GREEDY_PLANS)}), {accepted} draft tokens accepted")
    assert requests >= 2000


def _sampling_case(gen, k, steps, n, bs, vocab):
    candidates, ri, nt, ns, logits = _greedy_case(gen, k, steps, n, bs, vocab)
    coins = torch.rand(bs, n, generator=gen).cuda()
    final_coins = torch.rand(bs, generator=gen).cuda()
    return candidates, ri, nt, ns, logits, coins, final_coins


@needs_sgl
@pytest.mark.parametrize("ours", ["triton", "reference"])
@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (0.6, 0.4), (0.0, 0.0)])
def test_sampling_op_equals_sglang_with_identical_coins(thresholds, ours):
    op = {"triton": sampling, "reference": reference}[ours].tree_speculative_sampling_target_only
    gen = torch.Generator().manual_seed(13)
    requests = differ = 0
    for k, steps, n in CONFIGS:
        for _ in range(10):
            bs = int(torch.randint(1, 33, (1,), generator=gen))
            candidates, ri, nt, ns, logits, coins, final_coins = _sampling_case(gen, k, steps, n, bs, 1000)
            probs = torch.softmax(logits / 0.7, -1).reshape(bs, n, -1)
            results = []
            for drop_in in (SAMPLING_OP, functools.partial(op, strict_acceptance=STRICT_ACCEPTANCE)):
                out = _greedy_outputs(bs, n, steps)
                draft = torch.zeros_like(probs)
                drop_in(*out, candidates, ri, nt, ns, coins, final_coins, probs, draft, *thresholds)
                results.append(out + (draft,))
            same = torch.ones(bs, dtype=torch.bool, device="cuda")
            for x, y in zip(results[0][1:3], results[1][1:3]):
                same &= (x == y).reshape(bs, -1).all(1)
            same &= (results[0][0] == results[1][0]).reshape(bs, n).all(1)
            same &= (results[0][3] == results[1][3]).reshape(bs, -1).all(1)
            requests += bs
            differ += int((~same).sum())
    print(f"sampling op ({ours}) {thresholds}: {requests - differ}/{requests} requests identical to {SOURCE}")
    # Only the float order of the residual sums differs: a coin within rounding of a CDF step.
    assert differ <= max(1, requests // 1000)


@needs_cuda
def test_fused_sampling_equals_reference_on_gpu():
    gen = torch.Generator().manual_seed(15)
    requests = differ = 0
    for k, steps, n in [(4, 3, 8), (8, 5, 32), (2, 1, 3)]:
        for trial in range(4):
            bs = 8
            candidates, ri, nt, ns, logits, coins, final_coins = _sampling_case(gen, k, steps, n, bs, 3000)
            logits[:, 100:140] = logits[:, 99:100]  # ties at the top-k / top-p pivots
            temperatures = (torch.rand(bs, generator=gen) + 0.5).cuda()
            top_ks = torch.tensor([1, 5, 60, 0, 3000, 2000, 7, -1], dtype=torch.int32).cuda()
            top_ps = torch.tensor([1.0, 0.5, 0.9, 0.3, 1.0, 0.99, 0.95, 0.999]).cuda()
            args = (candidates, ri, nt, ns, coins, final_coins, logits, temperatures, top_ks, top_ps)
            ours = _greedy_outputs(bs, n, steps)
            sampling.tree_sampling_from_logits(*ours, *args)
            ref = tuple(t.cpu() for t in _greedy_outputs(bs, n, steps))
            reference.tree_sampling_from_logits(*ref, *(a.cpu() for a in args))
            same = (ref[2] == ours[2].cpu()) & (ref[1] == ours[1].cpu()).all(1)
            same &= (ref[0] == ours[0].cpu()).reshape(bs, n).all(1)
            requests += bs
            differ += int((~same).sum())
    print(f"fused sampling vs reference on GPU: {requests - differ}/{requests} requests identical")
    assert differ == 0


@needs_cuda
@pytest.mark.parametrize("k, steps, n, bs, vocab", [(4, 3, 8, 16, 5000), (8, 5, 32, 8, 128256), (1, 3, 4, 64, 128256)])
def test_ops_capture_in_a_cuda_graph(k, steps, n, bs, vocab):
    """Every op of ours, captured in one CUDA graph and replayed, gives what eager calls give."""
    gen = torch.Generator().manual_seed(17)
    candidates, ri, nt, ns, logits, coins, final_coins = _sampling_case(gen, k, steps, n, bs, vocab)
    tree = random_draft_tree(bs, k, steps, n, vocab=64, generator=gen, device="cuda")
    build_args = (tree.bonus_tokens, tree.parent_list, tree.top_scores_index, tree.draft_tokens, tree.seq_lens,
                  int(tree.seq_lens.sum()), k, steps, n)
    sampling_args = (candidates, ri, nt, ns, coins, final_coins, logits, torch.ones(bs, device="cuda"),
                     torch.full((bs,), 50, dtype=torch.int32, device="cuda"), torch.full((bs,), 0.9, device="cuda"))
    target = logits.argmax(-1).reshape(bs, n)

    def ops():
        outputs = list(tree_build.build_eagle_tree(*build_args))
        for plan in ({}, dict(lazy=False), dict(lazy=True)):
            greedy = _greedy_outputs(bs, n, steps)
            verify_greedy.verify_tree_greedy_from_logits(*greedy, candidates, ri, nt, ns, logits, **plan)
            outputs += greedy
        drop_in = _greedy_outputs(bs, n, steps)
        verify_greedy.verify_tree_greedy(*drop_in, candidates, ri, nt, ns, target)
        sampled = _greedy_outputs(bs, n, steps)
        sampling.tree_sampling_from_logits(*sampled, *sampling_args)
        return outputs + list(drop_in + sampled)

    eager = ops()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ops()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert len(eager) == len(captured)
    for x, y in zip(eager, captured):
        assert torch.equal(x, y)
    print(f"CUDA graph k/S/n={k}/{steps}/{n} bs={bs} V={vocab}: {len(eager)} outputs of 7 ops equal to eager")
