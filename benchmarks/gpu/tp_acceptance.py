"""Acceptance of a trained drafter at TP 1 and TP 2 (GPU, two cards): the demo's models.

The demo's tiny target (8 layers, H 64, 4 heads / 2 KV heads: both divide by 2) and its 2-layer
drafter distilled from that target (``sglang_eagle_ext.demo``, built by ``demo.build`` in its pinned
process, so the same floats on every x86-64 CPU) are served by four engines side by side:

* ``eagle_tp1`` (GPU 0) and ``eagle_tp2`` (both cards): EAGLE-3, the demo's chain (3 steps, top-k 1,
  4 draft tokens), this package's class;
* ``plain_tp1`` (GPU 1) and ``plain_tp2``: the target alone, with its top-2 log probabilities.

Two workloads, greedy: the demo's own (its 2 prompts, 24 new tokens, as in the demo transcript) and
a longer one (those 2 and ``e2e_sglang.PROMPTS``, 10 prompts, 64 new tokens). Per TP: the accept
length (tokens over verify steps) and the EAGLE-3 outputs against plain decoding at the same TP
(``e2e_sglang.compare``: exact, or first differing at a bf16 near-tie); and across TP: the plain
outputs at TP 2 against TP 1 and the EAGLE-3 outputs at TP 2 against TP 1 (same rule), which is what
an acceptance difference would come from: the target's argmax (what verify accepts) moves only at
near-ties when the all-reduce changes the rounding.

usage (repository root; SGLang and this package installed, see ``stage_package.sh``)::

    python3 benchmarks/gpu/tp_acceptance.py OUTDIR --models DEMO_WORKDIR   # DEMO_WORKDIR: target/, drafter-2layer/
    python3 benchmarks/gpu/tp_acceptance.py OUTDIR --models DIR --dry-run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import e2e_sglang
from results_file import save_json

ARMS = {
    "eagle_tp1": {"eagle": True, "tp_size": 1, "base_gpu_id": 0},
    "eagle_tp2": {"eagle": True, "tp_size": 2, "base_gpu_id": 0},
    "plain_tp1": {"eagle": False, "tp_size": 1, "base_gpu_id": 1},
    "plain_tp2": {"eagle": False, "tp_size": 2, "base_gpu_id": 0},
}
DEMO_PROMPTS = ["The old sailor counts", "A curious child waits for"]  # sglang_eagle_ext.demo.run.PROMPTS
WORKLOADS = {"demo": (DEMO_PROMPTS, 24), "long": (DEMO_PROMPTS + e2e_sglang.PROMPTS, 64)}
CHAIN = e2e_sglang.Row(layers=2, num_aux=3, fc_norm=False, dialect="sglang", topk=1, steps=3, draft_tokens=4, seed=0)
TIMEOUT_S = 400


def task(out: str, models: str, arm: str) -> dict:
    spec = ARMS[arm]
    target = os.path.join(models, "target")
    drafter = os.path.join(models, "drafter-2layer") if spec["eagle"] else None
    engine = e2e_sglang.start_engine(target, drafter, CHAIN if spec["eagle"] else None, graph_bs=(1, 2, 4, 8, 16),
                                     tp_size=spec["tp_size"], base_gpu_id=spec["base_gpu_id"],
                                     max_total_tokens=8192, context_length=512)
    record = {}
    for name, (prompts, new_tokens) in WORKLOADS.items():
        outputs = e2e_sglang.greedy(engine, prompts, max_new_tokens=new_tokens, top2=not spec["eagle"])
        record[name] = {"output_ids": [o["output_ids"] for o in outputs]}
        if spec["eagle"]:
            record[name].update(e2e_sglang.acceptance(outputs))
        else:
            record[name]["output_top_logprobs"] = [[[list(t[:2]) for t in position] for position in
                                                    o["meta_info"]["output_top_logprobs"]] for o in outputs]
    engine.shutdown()
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--models", required=True, help="the demo's work directory (target/, drafter-2layer/)")
    parser.add_argument("--arm", help="internal: run one arm in this process")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    out, models = os.path.abspath(args.out), os.path.abspath(args.models)
    for name in ("target", "drafter-2layer"):
        if not os.path.isfile(os.path.join(models, name, "config.json")):
            parser.error(f"{models}/{name}/config.json missing: build the demo's models there "
                         "(python -m sglang_eagle_ext.demo.build DIR sglang)")
    if args.dry_run:
        print(json.dumps({"arms": ARMS, "workloads": {k: [len(p), n] for k, (p, n) in WORKLOADS.items()},
                          "chain": CHAIN.__dict__}))
        return 0
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    if args.arm:
        save_json(os.path.join(out, f"{args.arm}.json"), task(out, models, args.arm))
        return 0

    import sglang
    import torch

    results = {"sglang": sglang.__version__, "torch": torch.__version__,
               "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "commit": os.environ.get("E2E_COMMIT", "unknown"), "near_tie_nats": e2e_sglang.NEAR_TIE,
               "chain": {"topk": CHAIN.topk, "steps": CHAIN.steps, "draft_tokens": CHAIN.draft_tokens},
               "workloads": {k: {"prompts": len(p), "max_new_tokens": n} for k, (p, n) in WORKLOADS.items()},
               "models": {name: json.load(open(os.path.join(models, name, "config.json"))).get("architectures")
                          for name in ("target", "drafter-2layer")}}
    deadline = time.monotonic() + TIMEOUT_S
    running = {}
    for arm in ARMS:
        log = open(os.path.join(out, "logs", f"{arm}.log"), "w")
        running[arm] = subprocess.Popen([sys.executable, __file__, out, "--models", models, "--arm", arm],
                                        stdout=log, stderr=subprocess.STDOUT)
    records = {}
    for arm, process in running.items():
        try:
            code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            code = "timeout"
        path = os.path.join(out, f"{arm}.json")
        records[arm] = json.load(open(path)) if code == 0 and os.path.exists(path) else {"error": f"exit {code}"}
        results.setdefault("errors", {})[arm] = records[arm].get("error")
    for name in WORKLOADS:
        cell = {}
        for tp in (1, 2):
            eagle, plain = records[f"eagle_tp{tp}"].get(name), records[f"plain_tp{tp}"].get(name)
            if eagle:
                cell[f"tp{tp}"] = {k: eagle[k] for k in ("completion_tokens", "spec_verify_ct", "accept_length")}
                cell[f"tp{tp}"]["digest"] = e2e_sglang.digest(eagle["output_ids"])
                if plain:
                    cell[f"tp{tp}"]["vs_plain"] = e2e_sglang.compare(eagle["output_ids"], [
                        {"output_ids": i, "output_top_logprobs": t}
                        for i, t in zip(plain["output_ids"], plain["output_top_logprobs"])])
            if plain:
                cell[f"plain_tp{tp}_digest"] = e2e_sglang.digest(plain["output_ids"])
        plain1 = records["plain_tp1"].get(name)
        if plain1:
            reference = [{"output_ids": i, "output_top_logprobs": t}
                         for i, t in zip(plain1["output_ids"], plain1["output_top_logprobs"])]
            for arm in ("plain_tp2", "eagle_tp2"):
                if records[arm].get(name):
                    cell[f"{arm}_vs_plain_tp1"] = e2e_sglang.compare(records[arm][name]["output_ids"], reference)
        results[name] = cell
    save_json(os.path.join(out, "results.json"), results)
    print(json.dumps({name: {tp: results[name].get(tp, {}).get("accept_length") for tp in ("tp1", "tp2")}
                      for name in WORKLOADS}), flush=True)
    print(json.dumps({k: v for k, v in results.items() if k in WORKLOADS or k == "errors"})[:3000], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
