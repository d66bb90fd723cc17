"""What tensor parallelism buys: output tokens/s at TP 1 and TP 2, EAGLE-3 against plain decoding (GPU, two cards).

Four engines of ``e2e_sglang``'s speed target (Llama-3-8B's geometry, the tiny tokenizer's 512-token
vocabulary, weights drawn by SGLang's ``dummy`` loader) start side by side on one two-GPU machine and
are measured one at a time, in rotating order, for ``--rounds`` rounds:

* ``eagle_tp1`` (GPU 0) and ``plain_tp1`` (GPU 1, ``base_gpu_id``): one card each;
* ``eagle_tp2`` and ``plain_tp2``: both cards (``tp_size=2``).

EAGLE-3 is the speed task's drafter (``e2e_sglang.SPEED_ROW``: 1 layer, 3 aux states, SpecForge
layout, chain 1/3/4) served by this package's class with its default tree kernels. The drafter is a
random checkpoint and the target's weights are the dummy loader's, so almost no draft is accepted
(accept lengths are in the results): the EAGLE-3 arms measure speculative decoding's cost per step
at this geometry, and the TP 2 / TP 1 ratios what the second card buys for each. The dummy loader
draws each rank's shard on its own, so the TP-1 and TP-2 targets are different random models: their
outputs are not compared (each EAGLE-3 arm's digests are recorded beside its plain arm's).

Output tokens/s of one request batch (``batch`` prompts, ``new_tokens`` each, greedy, prefix cache
off) per arm and round; medians, and per-round ratios (TP 2 over TP 1 for each method, EAGLE-3 over
plain at each TP) with their medians.

usage (repository root; SGLang and this package installed, see ``stage_package.sh``)::

    python3 benchmarks/gpu/tp_speed.py OUTDIR [--rounds 4] [--arms eagle_tp1,plain_tp1,eagle_tp2,plain_tp2]
    python3 benchmarks/gpu/tp_speed.py OUTDIR --dry-run   # the arms' engine options, nothing started
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time

import e2e_sglang
from results_file import save_json

ARMS = {
    "eagle_tp1": {"eagle": True, "tp_size": 1, "base_gpu_id": 0},
    "plain_tp1": {"eagle": False, "tp_size": 1, "base_gpu_id": 1},
    "eagle_tp2": {"eagle": True, "tp_size": 2, "base_gpu_id": 0},
    "plain_tp2": {"eagle": False, "tp_size": 2, "base_gpu_id": 0},
}
SHAPES = ((1, 256), (16, 128), (64, 128))  # (batch, new tokens per request)
GRAPH_BS = (1, 2, 4, 8, 16, 32, 64)
READY_TIMEOUT_S = 420


def engine_options(arm: str) -> dict:
    """What ``e2e_sglang.start_engine`` gets besides target and drafter for ``arm``."""
    spec = ARMS[arm]
    # four 8B-geometry engines over two cards (the TP-1 ones one card each): at most three per card
    return dict(graph_bs=GRAPH_BS, tp_size=spec["tp_size"], base_gpu_id=spec["base_gpu_id"],
                disable_radix_cache=True, load_format="dummy", max_total_tokens=16384,
                **({"speculative_draft_load_format": "auto"} if spec["eagle"] else {}))


def host(connection, arm: str, target: str, drafter: str, log_path: str) -> None:
    """Child process hosting one engine: answers (batch, new_tokens) with one measurement."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    spec = ARMS[arm]
    engine = e2e_sglang.start_engine(target, drafter if spec["eagle"] else None,
                                     e2e_sglang.SPEED_ROW if spec["eagle"] else None, **engine_options(arm))

    def measure(batch: int, new_tokens: int) -> dict:
        start = time.perf_counter()
        outputs = e2e_sglang.greedy(engine, e2e_sglang._speed_prompts(batch), max_new_tokens=new_tokens)
        seconds = time.perf_counter() - start
        return {"tokens": sum(o["meta_info"]["completion_tokens"] for o in outputs), "seconds": seconds,
                "verify": sum(o["meta_info"].get("spec_verify_ct", 0) for o in outputs),
                "digest": e2e_sglang.digest([o["output_ids"] for o in outputs])}

    for batch, _ in SHAPES:  # warm-up at every measured batch size
        measure(batch, 16)
    connection.send("ready")
    while (request := connection.recv()) is not None:
        connection.send(measure(*request))
    engine.shutdown()


def ratios(rates: dict, numerator: str, denominator: str) -> dict | None:
    if numerator not in rates or denominator not in rates:
        return None
    values = [n / d for n, d in zip(rates[numerator], rates[denominator])]
    return {"ratio_median": round(statistics.median(values), 4), "ratios": [round(v, 4) for v in values]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--rounds", type=int, default=4, help="a multiple of the arm count: each arm goes first "
                                                              "equally often")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = set(arms) - set(ARMS)
    if unknown:
        parser.error(f"unknown arms {sorted(unknown)}; known: {list(ARMS)}")
    if args.dry_run:
        print(json.dumps({"arms": {arm: engine_options(arm) for arm in arms}, "shapes": SHAPES,
                          "rounds": args.rounds}))
        return 0
    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)

    import sglang
    import torch

    from sglang_eagle_ext.demo.tiny_target import TinyTargetSettings, build_tiny_target
    from tests.kit.matched_drafter import build_matched_drafter

    tiny = os.path.join(out, "models", "target")
    build_tiny_target(tiny, TinyTargetSettings(num_layers=8, hidden_size=256, num_attention_heads=4,
                                               num_key_value_heads=2, intermediate_size=512, lm_head_std=2.0))
    target = os.path.join(out, "models", "speed_target")
    e2e_sglang.write_speed_target(tiny, target)
    row = e2e_sglang.SPEED_ROW
    drafter = build_matched_drafter(os.path.join(out, "models", "speed_drafter"), target, layers=row.layers,
                                    num_aux=row.num_aux, fc_norm=row.fc_norm, dialect=row.dialect, seed=row.seed)
    results = {"sglang": sglang.__version__, "torch": torch.__version__,
               "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "commit": os.environ.get("E2E_COMMIT", "unknown"), "target": e2e_sglang.SPEED_TARGET,
               "drafter_row": row.__dict__, "rounds": args.rounds,
               "arms": {arm: engine_options(arm) for arm in arms},
               "environment": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                              "NVSHMEM_DISABLE_NVLS", "SGL_KERNEL_USE_FLASHINFER")}}
    path = os.path.join(out, "results.json")
    save_json(path, results)
    context = multiprocessing.get_context("spawn")
    engines = {}
    started = time.monotonic()
    for arm in arms:
        parent, child = context.Pipe()
        process = context.Process(target=host, args=(child, arm, target, drafter,
                                                      os.path.join(out, "logs", f"{arm}.log")))
        process.start()
        engines[arm] = (parent, process)
    for arm, (parent, _) in engines.items():
        if not parent.poll(max(1.0, READY_TIMEOUT_S - (time.monotonic() - started))):
            for _, process in engines.values():
                process.kill()
            results["error"] = f"the {arm} engine did not start; see logs/{arm}.log"
            save_json(path, results)
            print(results["error"], flush=True)
            return 1
        assert parent.recv() == "ready"
    results["start_s"] = round(time.monotonic() - started, 1)
    print(f"engines ready in {results['start_s']} s", flush=True)
    for batch, new_tokens in SHAPES:
        runs = {arm: [] for arm in arms}
        for round_ in range(args.rounds):
            shift = round_ % len(arms)
            for arm in arms[shift:] + arms[:shift]:
                engines[arm][0].send((batch, new_tokens))
                runs[arm].append(engines[arm][0].recv())
        rates = {arm: [r["tokens"] / r["seconds"] for r in runs[arm]] for arm in arms}
        shape = {"new_tokens": new_tokens,
                 "tok_s": {arm: [round(r, 1) for r in rates[arm]] for arm in arms},
                 "tok_s_median": {arm: round(statistics.median(rates[arm]), 1) for arm in arms},
                 "accept_length": {arm: round(sum(r["tokens"] for r in runs[arm])
                                              / sum(r["verify"] for r in runs[arm]), 3)
                                   for arm in arms if ARMS[arm]["eagle"]},
                 "output_digests": {arm: sorted({r["digest"] for r in runs[arm]}) for arm in arms}}
        for name, (numerator, denominator) in {"eagle_tp2_vs_tp1": ("eagle_tp2", "eagle_tp1"),
                                               "plain_tp2_vs_tp1": ("plain_tp2", "plain_tp1"),
                                               "eagle_vs_plain_tp1": ("eagle_tp1", "plain_tp1"),
                                               "eagle_vs_plain_tp2": ("eagle_tp2", "plain_tp2")}.items():
            found = ratios(rates, numerator, denominator)
            if found is not None:
                shape[name] = found
        results[f"batch{batch}"] = shape
        save_json(path, results)
        print(f"batch {batch}: {shape['tok_s_median']} tok/s; "
              + ", ".join(f"{k} {v['ratio_median']}" for k, v in shape.items() if k.endswith(("vs_tp1", "tp1", "tp2"))
                          and isinstance(v, dict) and "ratio_median" in v), flush=True)
    for parent, process in engines.values():
        parent.send(None)
        process.join(timeout=60)
        if process.is_alive():
            process.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
