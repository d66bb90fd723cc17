"""Tables of ``benchmarks/results/fused_verify/`` (GPU runs of ``benchmarks/gpu/fused_verify_step.py``
and ``benchmarks/gpu/fused_verify_server.py``) as ``benchmarks/results/fused_verify.md``.

usage: python benchmarks/fused_verify_table.py [--check]
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "fused_verify")
OUTPUT = os.path.join(HERE, "results", "fused_verify.md")
# Llama-3.1-8B's KV cache in bf16: 2 (K and V) x 32 layers x 8 KV heads x 128 dims x 2 bytes
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2
RUNS = {  # file -> (commit, command); the commit is the checkout the device ran
    "step_h100_sglang-0.5.16.json": ("9ee680b", "SITE=/tmp/site source benchmarks/gpu/stage_package.sh && "
                                     "SGL_KERNEL_USE_FLASHINFER=1 python3 -P benchmarks/gpu/fused_verify_step.py OUT.json"),
    "server_h100_sglang-0.5.16.json": ("b0400ad", "SITE=/tmp/site source benchmarks/gpu/stage_package.sh && "
                                       "SGL_KERNEL_USE_FLASHINFER=1 python3 benchmarks/gpu/fused_verify_server.py OUTDIR"),
}


def step_table(name: str, run: dict) -> list[str]:
    commit, command = RUNS[name]
    checks = run["identical"]
    lines = [f"## `eagle_sample` stock vs fused: {run['device']}, SGLang {run['release']}, torch {run['torch']}",
             "", f"{run['date']}, commit `{commit}`, flashinfer's renorm active in the stock arm "
             "(`SGL_KERNEL_USE_FLASHINFER=1`; flashinfer 0.6.14, sglang-kernel 0.4.5). Command:", "",
             f"    {command}", "",
             f"Vocabulary {run['vocab']}; logits: each row ranks the vocabulary at random and gives rank r the "
             f"logit `-{run['zipf']} ln r + N(0, 0.3)`, drafted children +12 with probability 0.7; entropy at "
             f"T 0.7: {min(t['entropy_nats'] for t in run['timing'] if 'entropy_nats' in t):.2f}-"
             f"{max(t['entropy_nats'] for t in run['timing'] if 'entropy_nats' in t):.2f} nats.", "",
             f"**Same coins, same outputs:** {sum(c['identical'] for c in checks)} of "
             f"{sum(c['requests'] for c in checks)} requests identical (predict, accept index, accept length) over "
             f"{len(checks)} rounds: trees 1/3/4, 4/3/8, 8/5/32; batch 1, 16 (every 4th request greedy, a quarter "
             "of the vocabulary at -inf as a grammar leaves it), 64 (every 3rd greedy); both filters.", "",
             "**Emitted-token distribution** (first new token of each request, all rows one distribution, "
             "chi-square against the float64 filtered target):", "",
             "| filters | arm | tokens | support | chi2 | dof | p |", "|---|---|---|---|---|---|---|"]
    for d in run["distribution"]:
        lines.append(f"| {d['filters']} | {d['arm']} | {d['tokens']} | {d['support']} | {d['chi2']:.1f} | {d['dof']} "
                     f"| {d['p']:.3f} |")
    lines += ["", "**Time and memory per `eagle_sample` call** (median of alternating rounds; memory: peak "
              "allocation during the call; KV tokens: what the difference buys at Llama-3.1-8B bf16, "
              f"{KV_BYTES_PER_TOKEN // 1024} KiB per token):", "",
              "| filters | tree | batch | stock ms | fused ms | stock / fused | stock MiB | fused MiB | KV tokens |",
              "|---|---|---|---|---|---|---|---|---|"]
    for t in run["timing"]:
        tree = "/".join(map(str, t["tree"]))
        if "mem_stock" in t:
            freed = (t["mem_stock"] - t["mem_fused"]) // KV_BYTES_PER_TOKEN
            mem = f"{t['mem_stock'] / 2**20:.0f} | {t['mem_fused'] / 2**20:.0f} | {freed}"
        else:
            mem = "- | - | -"
        lines.append(f"| {t['filters']} | {tree} | {t['bs']} | {t['ms_stock']:.3f} | {t['ms_fused']:.3f} | "
                     f"{t['speedup']:.2f}x | {mem} |")
    lines += ["", "Greedy rows (each round stock, then fused; not alternated): an all-greedy batch is handed "
              "back to stock by the wrapper, so the difference is the wrapper's check."]
    return lines


def server_table(name: str, run: dict) -> list[str]:
    commit, command = RUNS[name]
    lines = [f"## Inside a server: {run['device']}, SGLang {run['sglang']}", "",
             f"{run['date']}, commit `{commit}`. Command:", "", f"    {command}", "",
             "Two EAGLE3 engines (tiny target, lm_head std 1.0; row 1's drafter, tree 4/3/8; `random_seed` 1234), "
             "stock and `SGLANG_EAGLE_EXT_FUSED_VERIFY=1`, 8 prompts sent one at a time, 48 new tokens each:", "",
             "| sampling | identical prompts | accept length stock | accept length fused |", "|---|---|---|---|"]
    for label, same in run["identical"].items():
        lines.append(f"| {label} | {same} of 8 | {run['stock'][label]['accept_length']} | "
                     f"{run['fused'][label]['accept_length']} |")
    proof = [line for line in run["fused"]["plugin_log"] if "served by the fused sampler" in line]
    lines += ["", "The fused engine's log:", "", *(f"    {line}" for line in proof), "",
              "The random drafter rarely matches this target (accept length near 1): the walks here are short; "
              "deep walks are covered by the step table above."]
    return lines


def render() -> str:
    lines = ["# Fused verify in SGLang's server (GPU)", "",
             "Generated by `benchmarks/fused_verify_table.py` from `benchmarks/results/fused_verify/`.", ""]
    for name in RUNS:
        run = json.load(open(os.path.join(RESULTS, name)))
        lines += (step_table if name.startswith("step") else server_table)(name, run) + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if open(OUTPUT).read() == text else "benchmarks/results/fused_verify.md is stale")
    tmp = OUTPUT + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, OUTPUT)
