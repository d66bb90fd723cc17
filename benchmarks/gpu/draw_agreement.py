"""How often stock's sampled verify and the fused sampler draw differently with the same coins, and
why: at scale, on the GPU, with the installed SGLang (0.5.17+: coins drawn by ``_verify_coins``).

The step check compares about two thousand requests; end to end on 0.5.23 one of 108 sampled runs
differed from stock's output. This script compares ``ROUNDS`` seeds on each of a few verify cases
(batch 64, chain 1/3/4 and tree 4/3/8, top-k 50 and top-p 0.9, logits rounded to bf16 as an
engine's head gives them), about a million requests, and also stock against itself (is stock's own
draw deterministic?). For each request whose draws differ it recomputes the draw in float64
(``tree_sampling_from_logits`` of ``kernels/sampling/reference.py`` with the same coins, reproduced
from the seed) and again with every coin moved by ``NUDGE`` up and down: a draw that changes under
such a nudge sits on a boundary of the cumulative distribution, where two correct float32
summations may fall on either side.

usage: python3 benchmarks/gpu/draw_agreement.py OUT.json [--rounds N]
"""

from __future__ import annotations

import sys
import time

import torch

import fused_verify_step
from fused_verify_step import call, stock_and_fused, verify_round
from results_file import save_json
from sglang_eagle_ext.sglang.compat import installed_release, releases
from sglang_eagle_ext.kernels.sampling.reference import tree_sampling_from_logits
from verify_workload import FILTERS

ROUNDS = 2500
CASES = 4  # logits cases per (tree, filter); the coins vary per round
TREES = [(1, 3, 4), (4, 3, 8)]
BATCH = 64
NUDGE = 1e-6
REFERENCE_CHECKS = 16  # requests whose draws agree, recomputed to confirm the coins are reproduced


def coins(seed: int, bs: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The coins ``_verify_coins`` draws after ``torch.manual_seed(seed)`` (no sampling seed)."""
    torch.manual_seed(seed)
    per_node = torch.rand((bs, n), dtype=torch.float32, device=fused_verify_step.DEVICE)
    return per_node, torch.rand((bs,), dtype=torch.float32, device=fused_verify_step.DEVICE)


def reference_draw(case, b: int, coin, final_coin, strict: bool) -> tuple:
    """Request ``b``'s float64 draw: the rows it walked and the tokens it emitted there."""
    verify_input, batch, logits = case
    n = verify_input.draft_token_num
    steps = verify_input.spec_steps
    info = batch.sampling_info
    one = slice(b, b + 1)
    candidates = verify_input.draft_token.reshape(-1, n)[one].cpu()
    retrive_index = verify_input.retrieve_index[one].cpu() - b * n  # the rows of request b, from 0
    predicts = torch.zeros(n, dtype=torch.int32)
    accept_index = torch.full((1, steps + 1), -1, dtype=torch.int32)
    accept_length = torch.zeros(1, dtype=torch.int32)
    tree_sampling_from_logits(predicts, accept_index, accept_length, candidates, retrive_index,
                              verify_input.retrieve_next_token[one].cpu(),
                              verify_input.retrieve_next_sibling[one].cpu(), coin.reshape(1, n).cpu(),
                              final_coin.reshape(1).cpu(), logits[b * n:(b + 1) * n].cpu(),
                              info.temperatures[one].reshape(-1).cpu(), info.top_ks[one].cpu(),
                              info.top_ps[one].cpu(), strict_acceptance=strict)
    return accepted(predicts, accept_index[0], 0)


def accepted(predicts, accept_row, first_row: int) -> tuple:
    """(rows walked, from the request's first, the tokens emitted there): the release's accept length
    counts the bonus token from 0.5.23 on, so it is read off ``accept_index`` (-1 past the walk)."""
    rows = accept_row[accept_row >= 0].long()
    return (rows - first_row).tolist(), predicts[rows].tolist()


def arm_draw(output, b: int, n: int) -> tuple:
    predict, _, accept_index = output
    return accepted(predict, accept_index[b], b * n)


def differing(a, b, n: int) -> torch.Tensor:
    same = (a[1] == b[1]) & (a[2] == b[2]).all(-1) & (a[0] == b[0]).reshape(-1, n).all(-1)
    return torch.nonzero(~same).reshape(-1)


def explain(case, b: int, seed: int, strict: bool, stock_out, fused_out) -> dict:
    n = case[0].draft_token_num
    coin, final_coin = (c[b] for c in coins(seed, BATCH, n))
    exact = reference_draw(case, b, coin, final_coin, strict)
    nudged = [reference_draw(case, b, (coin * f).clamp(max=1 - 1e-7), (final_coin * f).clamp(max=1 - 1e-7), strict)
              for f in (1 - NUDGE, 1 + NUDGE)]
    return dict(seed=seed, request=b, stock=arm_draw(stock_out, b, n), fused=arm_draw(fused_out, b, n),
                reference=exact, on_boundary=any(draw != exact for draw in nudged))


def main(out_path: str, rounds: int) -> None:
    release = installed_release()
    strict = releases.STRICT_ACCEPTANCE.holds(release)
    stock, fused = stock_and_fused(release)
    record = dict(release=str(release), device=torch.cuda.get_device_name(), torch=torch.__version__,
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), rounds=rounds, cases=CASES, batch=BATCH,
                  nudge=NUDGE, logits="bf16-rounded", cells=[])
    for tree in TREES:
        for label, filters in FILTERS.items():
            cell = dict(tree=list(tree), filters=label, requests=0, stock_vs_fused=0, stock_vs_stock=0,
                        differences=[], reference_checks=[])
            for index in range(CASES):
                verify_input, batch, logits = verify_round(BATCH, tree, 7000 + 97 * index, filters)
                case = (verify_input, batch, logits.to(torch.bfloat16).float())
                n = verify_input.draft_token_num
                for r in range(rounds):
                    seed = 1_000_000 * index + r
                    a = call(stock, verify_input, batch, case[2].clone(), seed)
                    b = call(fused, verify_input, batch, case[2].clone(), seed)
                    cell["requests"] += BATCH
                    for request in differing(a, b, n).tolist():
                        cell["stock_vs_fused"] += 1
                        cell["differences"].append(explain(case, request, seed, strict, a, b))
                    if r % 10 == 0:  # stock against itself
                        again = call(stock, verify_input, batch, case[2].clone(), seed)
                        cell["stock_vs_stock"] += len(differing(a, again, n))
                    if r < REFERENCE_CHECKS // CASES:
                        request = r % BATCH
                        coin, final_coin = (c[request] for c in coins(seed, BATCH, n))
                        cell["reference_checks"].append(
                            reference_draw(case, request, coin, final_coin, strict) == arm_draw(a, request, n))
            print(tree, label, {k: v for k, v in cell.items() if k not in ("differences", "reference_checks")},
                  "reference reproduces stock:", sum(cell["reference_checks"]), "of", len(cell["reference_checks"]),
                  "boundary:", sum(d["on_boundary"] for d in cell["differences"]), flush=True)
            record["cells"].append(cell)
            save_json(out_path, record)


if __name__ == "__main__":
    argv = sys.argv[1:]
    main(argv[0], int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else ROUNDS)
