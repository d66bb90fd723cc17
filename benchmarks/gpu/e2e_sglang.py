"""End-to-end EAGLE-3 rows on stock SGLang (GPU): losslessness, acceptance, and our-vs-built-in speed.

Run from the repository root on a GPU machine where SGLang is installed and this package is
importable with its entry point registered (``benchmarks/gpu/run_e2e.sh`` does both)::

    python benchmarks/gpu/e2e_sglang.py --out DIR [--throughput]

* A tiny random bf16 Llama target (8 layers, H=256, head_dim 64) is built in ``DIR/models``. Its
  lm_head is drawn with std 2.0, so next-token logits are tens of units apart and bf16 rounding
  rarely changes the argmax; in addition the non-speculative baseline returns the top-2 log
  probabilities, and any divergence is classified by the baseline's top-1/top-2 margin at the
  first differing position (a "near-tie" is a margin of at most ``NEAR_TIE``).
* Each row builds a random drafter (layers, aux states, fc_norm, dialect) and starts an EAGLE3
  engine with CUDA graphs; greedy outputs are compared with the baseline's token by token.
* ``--throughput``: our class against SGLang's built-in class (``SGLANG_EAGLE_EXT=0``) on the
  same 1-layer 3-aux SpecForge drafter, batch 1 and batch 32, output tokens per second; both
  engines run side by side and are measured in alternating order (5 rounds, median ratio).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "sglang"))

# Baseline top-1/top-2 margin (nats) at or below which a divergence counts as a near-tie: the
# tiny target's logits lie in [64, 128), where bf16 spacing is 0.5, so this is two bf16 steps
# (observed margins at divergences are exact multiples of 0.5).
NEAR_TIE = 1.0
MAX_NEW_TOKENS = 48
PROMPTS = [
    "the quick brown fox", "once upon a time", "a small village by the sea",
    "in the morning the", "she opened the door and", "numbers one two three",
    "the cat sat on", "rain fell over the hills",
]


@dataclasses.dataclass(frozen=True)
class Row:
    layers: int
    num_aux: int
    fc_norm: bool
    dialect: str
    topk: int
    steps: int
    draft_tokens: int


ROWS = [
    Row(layers=1, num_aux=3, fc_norm=False, dialect="specforge", topk=1, steps=3, draft_tokens=4),
    Row(layers=2, num_aux=4, fc_norm=True, dialect="speculators", topk=4, steps=3, draft_tokens=8),
    Row(layers=3, num_aux=2, fc_norm=True, dialect="specforge", topk=2, steps=2, draft_tokens=4),
]


def engine_kwargs(**wanted):
    """Only the fields this SGLang's ServerArgs has (they move between releases)."""
    import inspect

    from sglang.srt.server_args import ServerArgs

    fields = getattr(ServerArgs, "__dataclass_fields__", None) or inspect.signature(ServerArgs).parameters
    graph_bs = wanted.pop("graph_bs")
    for name in ("cuda_graph_bs", "cuda_graph_bs_decode"):
        if name in fields:
            wanted[name] = graph_bs
    for name in ("cuda_graph_max_bs", "cuda_graph_max_bs_decode"):
        if name in fields:
            wanted[name] = max(graph_bs)
    if "disable_piecewise_cuda_graph" in fields:
        wanted["disable_piecewise_cuda_graph"] = True
    return {k: v for k, v in wanted.items() if k in fields}


def start_engine(target: str, drafter: str | None = None, row: Row | None = None,
                 graph_bs=(1, 2, 4, 8)):
    import sglang

    spec = {}
    if drafter is not None:
        spec = dict(speculative_algorithm="EAGLE3", speculative_draft_model_path=drafter,
                    speculative_num_steps=row.steps, speculative_eagle_topk=row.topk,
                    speculative_num_draft_tokens=row.draft_tokens)
    return sglang.Engine(**engine_kwargs(
        model_path=target, dtype="bfloat16", attention_backend="triton", sampling_backend="pytorch",
        mem_fraction_static=0.25, max_running_requests=64, context_length=1024,
        graph_bs=list(graph_bs), log_level="error", **spec))


def greedy(engine, prompts, max_new_tokens=MAX_NEW_TOKENS, top2=False):
    params = {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}
    extra = dict(return_logprob=True, top_logprobs_num=2) if top2 else {}
    return engine.generate(prompt=prompts, sampling_params=params, **extra)


def compare(outputs, baseline) -> dict:
    exact, near_tie_only, real = 0, 0, []
    for index, (out, base) in enumerate(zip(outputs, baseline)):
        ids, ref = out["output_ids"], base["output_ids"]
        if ids == ref:
            exact += 1
            continue
        position = next(i for i, (a, b) in enumerate(zip(ids, ref)) if a != b)
        top = base["meta_info"]["output_top_logprobs"][position]
        margin = top[0][0] - top[1][0]
        if margin <= NEAR_TIE:
            near_tie_only += 1
        else:
            real.append({"prompt": index, "position": position, "margin": round(margin, 3)})
    return {"exact": exact, "near_tie": near_tie_only, "mismatch": real, "prompts": len(outputs)}


def acceptance(outputs) -> dict:
    tokens = sum(o["meta_info"]["completion_tokens"] for o in outputs)
    verify = sum(o["meta_info"].get("spec_verify_ct", 0) for o in outputs)
    return {"completion_tokens": tokens, "spec_verify_ct": verify,
            "accept_length": round(tokens / verify, 3) if verify else None}


def _engine_server(connection, target: str, drafter: str, builtin: bool) -> None:
    """Child process hosting one EAGLE3 engine; answers (batch, new_tokens) with (tokens, seconds)."""
    if builtin:
        os.environ["SGLANG_EAGLE_EXT"] = "0"  # every process of this engine: SGLang's built-in class
    engine = start_engine(target, drafter, ROWS[0], graph_bs=(1, 2, 4, 8, 16, 32))
    greedy(engine, PROMPTS, max_new_tokens=16)  # warm-up
    connection.send("ready")
    while (request := connection.recv()) is not None:
        batch, new_tokens = request
        prompts = [PROMPTS[i % len(PROMPTS)] + f" {i}" for i in range(batch)]
        start = time.perf_counter()
        outputs = greedy(engine, prompts, max_new_tokens=new_tokens)
        connection.send((sum(o["meta_info"]["completion_tokens"] for o in outputs),
                         time.perf_counter() - start))
    engine.shutdown()


def compare_speed(target: str, drafter: str, rounds: int = 5) -> dict:
    """Ours and the built-in class served side by side on the same GPU and drafter, measured in
    alternating order, so that clock and host noise hit both alike; the ratio of each round's
    pair is taken and the median reported."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    engines = {}
    for name, builtin in (("ours", False), ("builtin", True)):
        parent, child = context.Pipe()
        process = context.Process(target=_engine_server, args=(child, target, drafter, builtin))
        process.start()
        engines[name] = (parent, process)
    for parent, _ in engines.values():
        assert parent.recv() == "ready"
    record = {}
    for batch, new_tokens in ((1, 256), (32, 128)):
        rates = {"ours": [], "builtin": []}
        for round_ in range(rounds):
            order = ("ours", "builtin") if round_ % 2 == 0 else ("builtin", "ours")
            for name in order:
                engines[name][0].send((batch, new_tokens))
                tokens, seconds = engines[name][0].recv()
                rates[name].append(tokens / seconds)
        ratios = [o / b for o, b in zip(rates["ours"], rates["builtin"])]
        record[f"batch{batch}"] = {
            "ours_tok_s": round(statistics.median(rates["ours"]), 1),
            "builtin_tok_s": round(statistics.median(rates["builtin"]), 1),
            "ratio_median": round(statistics.median(ratios), 4),
            "ratios": [round(r, 4) for r in ratios]}
    for parent, process in engines.values():
        parent.send(None)
        process.join(timeout=60)
    return record


def run_task(task: str, out: str, throughput: bool) -> dict:
    """One engine's work (SGLang kills the whole process when an engine fails to start)."""
    from matched_drafter import build_matched_drafter

    target = os.path.join(out, "models", "target")
    if task == "baseline":
        engine = start_engine(target)
        outputs = greedy(engine, PROMPTS, top2=True)
        engine.shutdown()
        return {"outputs": [{"output_ids": o["output_ids"], "meta_info": {
            "output_top_logprobs": [[list(t[:2]) for t in pos] for pos in o["meta_info"]["output_top_logprobs"]]}}
            for o in outputs]}
    if task == "speed":
        row = ROWS[0]
        drafter = build_matched_drafter(os.path.join(out, "models", "speed_drafter"), target,
                                        layers=row.layers, num_aux=row.num_aux, fc_norm=row.fc_norm,
                                        dialect=row.dialect, seed=0)
        return compare_speed(target, drafter)
    number = int(task[len("row"):])
    row = ROWS[number]
    with open(os.path.join(out, "baseline.json")) as handle:
        baseline = json.load(handle)["outputs"]
    drafter = build_matched_drafter(os.path.join(out, "models", f"drafter{number}"), target,
                                    layers=row.layers, num_aux=row.num_aux, fc_norm=row.fc_norm,
                                    dialect=row.dialect, seed=number)
    started = time.perf_counter()
    engine = start_engine(target, drafter, row)
    record = {"row": dataclasses.asdict(row), "start_s": round(time.perf_counter() - started, 1)}
    outputs = greedy(engine, PROMPTS)
    record.update(compare(outputs, baseline))
    # equal digests across rows: the output does not depend on the drafter
    record["output_digest"] = hashlib.sha1(json.dumps([o["output_ids"] for o in outputs]).encode()).hexdigest()[:12]
    record.update(acceptance(outputs))
    engine.shutdown()
    return record


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--throughput", action="store_true")
    parser.add_argument("--only", help="comma-separated tasks (baseline,row0,...,speed)")
    parser.add_argument("--task", help="internal: run one engine's task in this process")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.task:
        record = run_task(args.task, args.out, args.throughput)
        with open(os.path.join(args.out, f"{args.task}.json"), "w") as handle:
            json.dump(record, handle)
        return 0

    import subprocess

    import sglang
    import torch

    from sglang_eagle_ext.tiny.target import TinyTargetSettings, build_tiny_target

    build_tiny_target(os.path.join(args.out, "models", "target"), TinyTargetSettings(
        num_layers=8, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=512, lm_head_std=2.0))
    results = {"sglang": sglang.__version__, "device": torch.cuda.get_device_name(0),
               "date": time.strftime("%Y-%m-%d"), "near_tie_nats": NEAR_TIE,
               "max_new_tokens": MAX_NEW_TOKENS, "rows": []}
    tasks = ["baseline"] + [f"row{i}" for i in range(len(ROWS))] + (["speed"] if args.throughput else [])
    if args.only:
        tasks = args.only.split(",")
    for task in tasks:
        command = [sys.executable, __file__, "--out", args.out, "--task", task]
        if args.throughput:
            command.append("--throughput")
        code = subprocess.run(command, timeout=300).returncode
        path = os.path.join(args.out, f"{task}.json")
        record = json.load(open(path)) if code == 0 and os.path.exists(path) else {"error": f"exit {code}"}
        if task.startswith("row"):
            record.setdefault("row", dataclasses.asdict(ROWS[int(task[3:])]))
            results["rows"].append(record)
        elif task == "speed":
            results["speed"] = record
        elif "error" in record:
            print("BASELINE FAILED", flush=True)
            break
        print("TASK", task, json.dumps({k: v for k, v in record.items() if k != "outputs"}), flush=True)
    with open(os.path.join(args.out, "results.json"), "w") as handle:
        json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
