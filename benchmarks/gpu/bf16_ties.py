"""Sampled verify on bf16 logits, as an engine's target produces them, stock vs the fused sampler.

The step check (``fused_verify_step.py``) draws float32 logits, which never tie. A bf16 head's
logits tie often, also at the top-k pivot: there a top-k filter may keep exactly k tokens or every
token tied with the k-th. This script measures, on the GPU with the installed SGLang:

1. per row of bf16 logits at T 0.7, how many tokens stock's top-k renorm keeps
   (``sglang.kernels.ops.sampling.renorm.top_k_renorm_prob`` on 0.5.23, what ``eagle_sample``
   calls) against k and against the number of tokens whose probability reaches the k-th largest
   (ties kept, the fused sampler's semantics);
2. whether stock's ``eagle_sample`` and the fused one make identical draws with the same coins on
   bf16 logits (trees and batches of the step check, top-k 50 and top-p 0.9).

usage: python3 benchmarks/gpu/bf16_ties.py OUT.json
"""

from __future__ import annotations

import sys
import time

import torch

from fused_verify_step import same_outputs, stock_and_fused, verify_round
from results_file import save_json
from sglang_eagle_ext.sglang.compat import installed_release
from verify_workload import FILTERS, TREES, VOCAB, realistic_logits

DEVICE = "cuda"
TOP_K = 50
TEMPERATURE = 0.7


def stock_top_k_renorm():
    """The top-k renorm op the installed release's verify calls."""
    try:
        from sglang.kernels.ops.sampling.renorm import top_k_renorm_prob  # 0.5.23
    except ImportError:
        from sgl_kernel import top_k_renorm_prob  # earlier releases
    return top_k_renorm_prob


def kept_counts(rows: int, seed: int) -> dict:
    """How many tokens stock's top-k renorm keeps on bf16-rounded logits, vs k and vs ties kept."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    logits = realistic_logits(rows, gen).to(torch.bfloat16).float()
    probs = torch.softmax(logits / TEMPERATURE, dim=-1)
    renormed = stock_top_k_renorm()(probs, torch.full((rows,), TOP_K, dtype=torch.int32, device=DEVICE))
    stock_kept = (renormed > 0).sum(-1)
    pivot = torch.topk(probs, TOP_K, dim=-1).values[:, -1:]
    with_ties = (probs >= pivot).sum(-1)
    tied_rows = with_ties > TOP_K
    return dict(rows=rows, rows_tied_at_pivot=int(tied_rows.sum()),
                stock_keeps_exactly_k=int((stock_kept == TOP_K).sum()),
                stock_keeps_ties=int((stock_kept == with_ties).sum()),
                stock_keeps_ties_on_tied_rows=int(((stock_kept == with_ties) & tied_rows).sum()),
                stock_keeps_exactly_k_on_tied_rows=int(((stock_kept == TOP_K) & tied_rows).sum()),
                stock_kept_other=int(((stock_kept != TOP_K) & (stock_kept != with_ties)).sum()))


def main(out_path: str) -> None:
    release = installed_release()
    stock, fused = stock_and_fused(release)
    record = dict(release=str(release), device=torch.cuda.get_device_name(), torch=torch.__version__, vocab=VOCAB,
                  top_k=TOP_K, temperature=TEMPERATURE, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    record["renorm_kept"] = kept_counts(4096, 3)
    print("renorm", record["renorm_kept"], flush=True)
    checks = []
    for tree in TREES:
        for bs in (1, 16, 64):
            for label, filters in FILTERS.items():
                verify_input, batch, logits = verify_round(bs, tree, 300 + bs, filters)
                case = (verify_input, batch, logits.to(torch.bfloat16).float())
                for seed in range(4):
                    checks.append(dict(tree=tree, bs=bs, filters=label, seed=seed,
                                       **same_outputs(stock, fused, seed, case)))
    record["identical_bf16"] = checks
    for label in FILTERS:
        rows = [c for c in checks if c["filters"] == label]
        print("identical bf16", label, sum(c["identical"] for c in rows), "of", sum(c["requests"] for c in rows),
              flush=True)
    save_json(out_path, record)


if __name__ == "__main__":
    main(sys.argv[1])
