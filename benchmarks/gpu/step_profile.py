"""Where an EAGLE-3 decode step's time goes in SGLang's engine (GPU; SGLang 0.5.23's v2 worker).

For each drafter depth (1 and 3 layers) and tree (chain 1/3/4, tree 8/5/32) one engine serves the
``fused_verify_e2e`` workload (Llama-3.1-8B geometry, ``zipf_target``'s realistic next-token
distributions, ``zipf_drafter``'s accepted drafts); at batch 1, 16 and 64, greedy and T 0.7 top-p
0.9 (stock verify, with flashinfer's renorm when ``SGL_KERNEL_USE_FLASHINFER=1``), ``step_timer``
(a plugin this script registers) records every decode step of ``--rounds`` timed requests: each
phase's span on the GPU timeline (CUDA events) and its host time, and the step's GPU period.

usage (repository root; SGLang and this package installed, see ``stage_package.sh``):
  python3 benchmarks/gpu/step_profile.py OUTDIR [--layers 1,3] [--trees 0,2] [--rounds 3]
  python3 benchmarks/gpu/step_profile.py OUTDIR --smoke   # CPU, a tiny target: the plumbing only
  python3 benchmarks/gpu/step_profile.py OUTDIR --target DIR --drafter DIR --classes plugin,stock
      # a real target and its trained drafter (random-token prompts), served by this plugin's draft
      # class and by stock SGLang's (plugin off), side by side
Writes ``OUTDIR/results.json`` (per configuration and cell: medians and every step), logs in
``OUTDIR/logs``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time

from fused_verify_e2e import (LLAMA_31_8B, DRAFT_VOCAB, LEAD_IN_TOKENS, MODES, SMOKE, build_models, driver,
                              engine_options, prompts, register_plugin)
from results_file import save_json
from step_timer import DIR_ENV
from verify_workload import BATCHES, TREES, flashinfer_renorm_requested

from sglang_eagle_ext.sglang.compat.fused_verify import ENV_SWITCH
from sglang_eagle_ext.sglang.plugin import SWITCH as PLUGIN_SWITCH

PROFILED_MODES = ("greedy", "T0.7 top-p0.9")
READY_TIMEOUT_S = 480
STEPS_FILE_TIMEOUT_S = 60


def slug(*parts) -> str:
    return "_".join(str(p).replace("/", "-").replace(" ", "-") for p in parts)


def host(connection, target: str, drafter: str, options: dict, batches: list[int], modes: list[str],
         timer_dir: str, log_path: str, plugin: bool = True) -> None:
    """Child process hosting one engine (stock verify): answers (label, batch, mode, new tokens) with
    the timed request's counters; the label file marks its steps for ``step_timer``."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ[ENV_SWITCH] = "0"
    os.environ[PLUGIN_SWITCH] = "1" if plugin else "0"  # off: stock SGLang's own draft class and loader
    os.environ[DIR_ENV] = timer_dir
    import sglang

    engine = sglang.Engine(model_path=target, speculative_draft_model_path=drafter, **options)
    with open(os.path.join(target, "config.json"), encoding="utf-8") as handle:
        vocab = json.load(handle)["vocab_size"]
    requests = prompts(options["max_running_requests"], vocab)
    label_path = os.path.join(timer_dir, "label")

    def generate(batch: int, mode: str, new_tokens: int):
        params = {**MODES[mode], "max_new_tokens": new_tokens, "ignore_eos": True}
        return engine.generate(input_ids=requests[:batch], sampling_params=params)

    for batch in batches:  # warm-up of every measured shape
        for mode in modes:
            generate(batch, mode, 8)
    connection.send("ready")
    while (request := connection.recv()) is not None:
        label, batch, mode, new_tokens = request
        generate(batch, mode, LEAD_IN_TOKENS)
        with open(label_path + ".tmp", "w") as handle:
            handle.write(label)
        os.replace(label_path + ".tmp", label_path)
        outputs = generate(batch, mode, new_tokens)
        os.remove(label_path)
        generate(1, "greedy", LEAD_IN_TOKENS)  # a step after the label is gone: the steps are written
        connection.send({"tokens": sum(o["meta_info"]["completion_tokens"] for o in outputs),
                         "verify": sum(o["meta_info"]["spec_verify_ct"] for o in outputs)})
    engine.shutdown()


def summary(steps: list[dict], batch: int) -> dict:
    """Medians over the steps that decoded the whole batch (requests finishing early shrink the last)."""
    full = [s for s in steps if s["batch"] == batch]
    phases = sorted({p for s in full for p in s["gpu_ms"]})

    def median(values):
        return round(statistics.median(values), 4) if values else None

    return {"steps": len(full),
            "gpu_ms": {p: median([s["gpu_ms"].get(p, 0.0) for s in full]) for p in phases},
            "host_ms": {p: median([s["host_ms"].get(p, 0.0) for s in full]) for p in phases},
            "gpu_period_ms": median([s["gpu_period_ms"] for s in full if "gpu_period_ms" in s])}


def wait_for(path: str) -> dict:
    deadline = time.monotonic() + STEPS_FILE_TIMEOUT_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"step_timer wrote no {path}: is the plugin registered in the scheduler?")
        time.sleep(0.05)
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--layers", default="1,3", help="drafter depths")
    parser.add_argument("--trees", default="0,2", help="indices into verify_workload.TREES")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--rounds", type=int, default=3, help="timed requests per cell")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny target: check the plumbing")
    parser.add_argument("--target", help="a real target's directory, profiled with --drafter instead of the "
                        "zipf workload (--layers is then ignored)")
    parser.add_argument("--drafter", help="the trained drafter served with --target")
    parser.add_argument("--classes", default="plugin", help="with --target: plugin, stock or both (comma-"
                        "separated): which draft class serves it (stock: SGLANG_EAGLE_EXT=0)")
    args = parser.parse_args()
    if bool(args.target) != bool(args.drafter):
        parser.error("--target and --drafter go together")
    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    layer_counts = [int(n) for n in args.layers.split(",")]
    if args.smoke:
        from sglang_eagle_ext.sglang.compat import cpu

        cpu.install()
        os.environ.update(cpu.process_environment(dict(os.environ)))
        target_config, draft_vocab = SMOKE["target"], SMOKE["draft_vocab"]
        trees, batches, modes = SMOKE["trees"], SMOKE["batches"], SMOKE["modes"]
        rounds, new_tokens = 1, SMOKE["new_tokens"]
    else:
        target_config, draft_vocab = LLAMA_31_8B, DRAFT_VOCAB
        trees = [TREES[int(i)] for i in args.trees.split(",")]
        batches = [int(b) for b in args.batches.split(",")]
        modes, rounds, new_tokens = list(PROFILED_MODES), args.rounds, args.new_tokens
    # the zipf workload's target plugin only where its target is profiled
    register_plugin(out, ("step_timer",) if args.target else ("zipf_target", "step_timer"))
    device = "cpu" if args.smoke else "cuda"

    import sglang
    import torch

    path = os.path.join(out, "results.json")
    results = {"sglang": sglang.__version__, "torch": torch.__version__,
               "commit": os.environ.get("E2E_COMMIT", "unknown"),
               "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "driver": driver(device),
               "flashinfer_renorm": flashinfer_renorm_requested(),
               "target": args.target or {k: target_config[k] for k in ("hidden_size", "num_hidden_layers",
                                                                       "intermediate_size", "vocab_size")},
               "drafter": args.drafter,
               "draft_vocab": draft_vocab, "new_tokens": new_tokens, "rounds": rounds, "configs": {}}
    context = multiprocessing.get_context("spawn")
    engines = {}
    for layers in ([None] if args.target else layer_counts):  # every engine starts at once (start is mostly
        # host work), then each is measured alone
        if args.target:
            target, drafter = args.target, args.drafter
        else:
            target, drafter = build_models(out, target_config, draft_vocab, device, layers=layers)
        for tree, side in [(tree, side) for tree in trees
                           for side in (args.classes.split(",") if args.target else ["plugin"])]:
            name = slug(f"{layers}-layer" if layers else "trained", "-".join(map(str, tree)),
                        *([side] if args.target else []))
            timer_dir = os.path.join(out, "timer", name)
            os.makedirs(timer_dir, exist_ok=True)
            options = engine_options(tree, batches, args.smoke)
            if args.target:  # real weights, and a context for the chat-length prompts
                options.update(load_format="auto", speculative_draft_load_format="auto")
            if not args.smoke:
                options["mem_fraction_static"] = 0.85  # four engines share the GPU
            parent, child = context.Pipe()
            log_path = os.path.join(out, "logs", f"{name}.log")
            process = context.Process(target=host, args=(child, target, drafter, options, batches, modes, timer_dir,
                                                         log_path, side == "plugin"))
            process.start()
            engines[name] = (layers, tree, options, parent, process, log_path, timer_dir, side)
    started = time.monotonic()
    for name, (_, _, _, parent, _, log_path, _, _) in engines.items():
        if not parent.poll(max(1.0, READY_TIMEOUT_S - (time.monotonic() - started))):
            for engine in engines.values():
                engine[4].kill()
            raise SystemExit(f"{name}: the engine did not start; see {log_path}")
        assert parent.recv() == "ready"
    print(f"engines ready in {time.monotonic() - started:.1f} s", flush=True)
    for name, (layers, tree, options, parent, process, log_path, timer_dir, side) in engines.items():
        config = results["configs"][name] = {
            "layers": layers, "tree": list(tree), "class": side, "engine_options": options, "cells": [],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        for batch in batches:
            for mode in modes:
                steps, tokens, verify = [], 0, 0
                for round_ in range(rounds):
                    label = slug(name, f"b{batch}", mode, f"r{round_}")
                    parent.send((label, batch, mode, new_tokens))
                    counters = parent.recv()
                    tokens, verify = tokens + counters["tokens"], verify + counters["verify"]
                    steps += wait_for(os.path.join(timer_dir, f"steps-{label}.json"))["steps"]
                cell = {"batch": batch, "mode": mode, "accept_length": round(tokens / verify, 3),
                        **summary(steps, batch), "every_step": steps}
                config["cells"].append(cell)
                save_json(path, results)
                print(f"{name} batch {batch} {mode}: period {cell['gpu_period_ms']} ms, "
                      f"accept {cell['accept_length']}, {cell['steps']} steps, gpu {cell['gpu_ms']}", flush=True)
        parent.send(None)
        process.join(timeout=60)
        if process.is_alive():
            process.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
