"""SGLang's own verify sampling step (``eagle_utils.eagle_sample`` of the installed release) on the
GPU, stock vs with the fused sampler wired in (``sglang_eagle_ext.sglang.compat.fused_verify``),
in one process, arms alternating.

Correctness: the same coins (same torch seed) give the same outputs on every tree and batch
(mixed greedy / top-k / top-p rows, grammar -inf); over >= 100,000 sampled tokens the first
emitted token of each request follows the target's filtered distribution (chi-square), for both
arms. Speed: milliseconds per ``eagle_sample`` call (median over alternating rounds) and the
GPU memory it allocates, at Llama-3.1-8B's vocabulary (128256) on logits with a realistic
entropy (``verify_workload.realistic_logits``; the entropy at the run's temperature is measured and
recorded).

usage: python3 benchmarks/gpu/fused_verify_step.py OUT.json [--quick]
"""

from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace

import torch
from packaging.version import Version

from sglang_eagle_ext.kernels.tree_build import build_eagle_tree
from sglang_eagle_ext.sglang.compat import fused_verify, installed_release
from results_file import save_json
from verify_workload import BATCHES, FILTERS, TREES, VOCAB, ZIPF, entropy_nats, realistic_logits

# the checkout's root, after the installed packages: the tests' kit (tests.kit)
sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tests.kit import verify_batch  # noqa: E402
from tests.kit.draft_trees import random_draft_tree  # noqa: E402
from tests.kit.kernel_reference import filtered_probs_reference  # noqa: E402

DEVICE = "cuda"


class OneRank:
    world_size = 1


def install_context(settings):
    """What the verify branch reads from a running server, for a bare process: wherever SGLang's
    modules hold the accessors (some import them by name)."""
    import sglang.srt.distributed  # noqa: F401
    import sglang.srt.server_args  # noqa: F401

    parallel = SimpleNamespace(tp_group=OneRank(), attn_tp_group=OneRank())
    replacements = {"get_spec": lambda: settings, "get_server_args": lambda: settings,
                    "get_global_server_args": lambda: settings, "get_parallel": lambda: parallel,
                    "get_tp_group": lambda: OneRank(), "get_attention_tp_group": lambda: OneRank()}
    for name, module in list(sys.modules.items()):
        if name.startswith("sglang.srt") and module is not None:
            for attr, value in replacements.items():
                if hasattr(module, attr):
                    setattr(module, attr, value)


def verify_round(bs: int, tree: tuple, seed: int, filters: tuple, greedy_every: int = 0, grammar: bool = False):
    """A verify input, batch and logits for ``bs`` requests (every ``greedy_every``-th greedy)."""
    topk, steps, n = tree
    gen = torch.Generator().manual_seed(seed)
    draft = random_draft_tree(bs, topk, steps, n, vocab=VOCAB, generator=gen)
    draft = SimpleNamespace(**{k: (v.to(DEVICE) if torch.is_tensor(v) else v) for k, v in vars(draft).items()})
    _, _, ri, nt, ns, tokens = build_eagle_tree(draft.bonus_tokens, draft.parent_list, draft.top_scores_index,
                                                draft.draft_tokens, draft.seq_lens, int(draft.seq_lens.sum()),
                                                topk, steps, n)
    cuda_gen = torch.Generator(device=DEVICE).manual_seed(seed)
    logits = realistic_logits(bs * n, cuda_gen)
    # drafted children get target mass (a trained drafter's hits), so walks go deep
    child = torch.where(nt >= 0, torch.gather(tokens.reshape(bs, n), 1, nt.clamp(min=0)), 0).reshape(-1)
    hit = (torch.rand(bs * n, generator=cuda_gen, device=DEVICE) < 0.7).float() * 12.0
    logits[torch.arange(bs * n, device=DEVICE), child] += hit
    verify_input = verify_batch.verify_input(tokens, n, steps, topk, ri, nt, ns)
    temperature, top_k, top_p = filters
    temps = torch.full((bs, 1), temperature, device=DEVICE)
    top_ks = torch.full((bs,), top_k, dtype=torch.int32, device=DEVICE)
    top_ps = torch.full((bs,), top_p, device=DEVICE)
    if greedy_every:
        greedy = torch.arange(bs, device=DEVICE) % greedy_every == 0
        temps[greedy] = 1.0
        top_ks[greedy] = 1
        top_ps[greedy] = 1.0
    batch = verify_batch.batch(verify_batch.sampling_info(temps, top_ks, top_ps), draft.seq_lens, tokens)
    if grammar:  # what SGLang's grammar mask leaves in the logits (its API differs per release)
        logits.index_fill_(1, torch.randperm(VOCAB, generator=gen)[: VOCAB // 4].to(DEVICE), float("-inf"))
    return verify_input, batch, logits


def call(sample, verify_input, batch, logits, seed):
    torch.manual_seed(seed)
    return sample(verify_input, batch, SimpleNamespace(next_token_logits=logits))


def same_outputs(stock, fused, seed, case) -> dict:
    verify_input, batch, logits = case
    a = call(stock, verify_input, batch, logits.clone(), seed)
    b = call(fused, verify_input, batch, logits.clone(), seed)
    n = verify_input.draft_token_num
    identical = (a[1] == b[1]) & (a[2] == b[2]).all(-1) & (a[0] == b[0]).reshape(-1, n).all(-1)
    return dict(requests=int(identical.numel()), identical=int(identical.sum()),
                accept_len_stock=float(a[1].float().mean()), accept_len_fused=float(b[1].float().mean()))


def first_tokens(sample, case, seeds) -> torch.Tensor:
    verify_input, batch, logits = case
    tokens = []
    for seed in seeds:
        predict, _, accept_index = call(sample, verify_input, batch, logits.clone(), seed)
        tokens.append(predict[accept_index[:, 0].long()])
    return torch.stack(tokens)  # [rounds, bs]


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int, float]:
    """Pearson's statistic over bins with expected count >= 5 (the rest pooled), dof, p-value."""
    total = counts.sum()
    expected = probs * total
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum().reshape(1)])
    exp = torch.cat([expected[big], expected[~big].sum().reshape(1)])
    keep = exp > 0
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    dof = int(keep.sum()) - 1
    p_value = torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                      torch.tensor(stat / 2, dtype=torch.float64))
    return stat, dof, float(p_value)


def timed(sample, case, seed) -> tuple[float, int]:
    verify_input, batch, logits = case
    work = logits.clone()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call(sample, verify_input, batch, work, seed)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end), torch.cuda.max_memory_allocated() - base


def branch(release):
    """The function holding the verify branch that a bare process can call: ``eagle_sample``
    (0.5.14+), else the v2 worker's ``EagleVerifyInput.sample`` (the v1 ``verify`` needs a live
    KV cache after its branch)."""
    if release >= Version("0.5.14"):
        import sglang.srt.speculative.eagle_utils as eagle_utils

        return eagle_utils.eagle_sample
    from sglang.srt.speculative.eagle_info_v2 import EagleVerifyInputV2Mixin

    return EagleVerifyInputV2Mixin.sample


def stock_and_fused(release):
    """The installed release's verify branch as shipped and with the fused sampler wired in, callable
    in this bare process (a server's context installed with stock's verify settings)."""
    import sglang.srt.speculative.eagle_info  # noqa: F401  (every seam's module loaded before the context is set)

    settings = SimpleNamespace(speculative_use_rejection_sampling=False, speculative_accept_threshold_single=1.0,
                               speculative_accept_threshold_acc=1.0, speculative_use_block_verification=False)
    stock = branch(release)
    fused_verify.apply(release)
    fused = branch(release)
    install_context(settings)
    return stock, fused


def main(out_path: str, quick: bool) -> None:
    release = installed_release()
    stock, fused = stock_and_fused(release)
    record = dict(release=str(release), device=torch.cuda.get_device_name(), torch=torch.__version__,
                  vocab=VOCAB, zipf=ZIPF, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print("release", release, record["device"], flush=True)

    # 1. identical outputs with identical coins
    checks = []
    for tree in TREES:
        for bs, greedy_every, grammar in ((1, 0, False), (16, 4, True), (64, 3, False)):
            for label, filters in FILTERS.items():
                case = verify_round(bs, tree, 100 + bs, filters, greedy_every, grammar)
                for seed in range(2 if quick else 4):
                    row = same_outputs(stock, fused, seed, case)
                    checks.append(dict(tree=tree, bs=bs, filters=label, greedy_every=greedy_every,
                                       grammar=grammar, seed=seed, **row))
    record["identical"] = checks
    save_json(out_path, record)
    print("identical:", sum(c["identical"] for c in checks), "of", sum(c["requests"] for c in checks), flush=True)

    # 2. distribution of emitted tokens (first token of each request) vs the target's
    dist = []
    bs, tree = 64, (4, 3, 8)
    rounds = 300 if quick else 1600
    for label, filters in FILTERS.items():
        case = verify_round(bs, tree, 7, filters)
        case[2][:] = case[2][0].clone()  # every row the same distribution: one target to test against
        probs = filtered_probs_reference(case[2][0].cpu(), *filters)
        for arm, sample in (("stock", stock), ("fused", fused)):
            tokens = first_tokens(sample, case, range(10_000, 10_000 + rounds)).reshape(-1).cpu()
            counts = torch.bincount(tokens, minlength=VOCAB).double()
            stat, dof, p = chi_square(counts, probs)
            dist.append(dict(filters=label, arm=arm, tokens=int(tokens.numel()), chi2=stat, dof=dof, p=p,
                             support=int((probs > 0).sum())))
            print("dist", label, arm, tokens.numel(), round(stat, 1), dof, p, flush=True)
    record["distribution"] = dist
    save_json(out_path, record)

    # 3. time and memory per eagle_sample call, arms alternating; written after each cell, so that a run its time
    # limit stops keeps the cells it timed (``timing_cells``: how many a whole run times)
    timing = []
    record["timing_cells"] = len(FILTERS) * len(TREES) * len(BATCHES) + len(TREES)
    for label, filters in FILTERS.items():
        for tree in TREES:
            for bs in BATCHES:
                case = verify_round(bs, tree, 500 + bs, filters)
                entropy = float(entropy_nats(case[2][: min(64, case[2].shape[0])], filters[0]).mean())
                for arm in (stock, fused):  # warm-up (compilation)
                    timed(arm, case, 0)
                ms = {"stock": [], "fused": []}
                mem = {}
                for r in range(5 if quick else 15):
                    for name, arm in ((("stock", stock), ("fused", fused)) if r % 2 == 0
                                      else (("fused", fused), ("stock", stock))):
                        t, m = timed(arm, case, r)
                        ms[name].append(t)
                        mem[name] = m
                med = {k: sorted(v)[len(v) // 2] for k, v in ms.items()}
                timing.append(dict(filters=label, tree=tree, bs=bs, ms_stock=med["stock"], ms_fused=med["fused"],
                                   speedup=med["stock"] / med["fused"], mem_stock=mem["stock"], mem_fused=mem["fused"],
                                   entropy_nats=entropy))
                print("time", label, tree, bs, round(med["stock"], 3), round(med["fused"], 3),
                      round(med["stock"] / med["fused"], 2), mem["stock"] >> 20, mem["fused"] >> 20, flush=True)
                record["timing"] = timing
                save_json(out_path, record)
    # greedy batches: the wrapper hands back to stock (its cost: one check)
    for tree in TREES:
        case = verify_round(64, tree, 900, (1.0, 1, 1.0))
        case[1].sampling_info.is_all_greedy = True
        for arm in (stock, fused):
            timed(arm, case, 0)
        ms = {"stock": [], "fused": []}
        for r in range(5 if quick else 15):
            for name, arm in (("stock", stock), ("fused", fused)):
                ms[name].append(timed(arm, case, r)[0])
        med = {k: sorted(v)[len(v) // 2] for k, v in ms.items()}
        timing.append(dict(filters="greedy", tree=tree, bs=64, ms_stock=med["stock"], ms_fused=med["fused"],
                           speedup=med["stock"] / med["fused"]))
        save_json(out_path, record)


if __name__ == "__main__":
    main(sys.argv[1], "--quick" in sys.argv)
