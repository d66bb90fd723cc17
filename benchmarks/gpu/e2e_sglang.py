"""End-to-end EAGLE-3 rows on stock SGLang (GPU): losslessness, acceptance, and our-vs-built-in speed.

Run from the repository root on a GPU machine where SGLang is installed and this package is
importable with its entry point registered (``benchmarks/gpu/run_e2e.sh`` does both)::

    python benchmarks/gpu/e2e_sglang.py --out DIR [--throughput] [--only TASKS] [--tp N]

* A tiny random bf16 Llama target (8 layers, H=256, head_dim 64) is built in ``DIR/models``. Its
  lm_head is drawn with std 2.0, so next-token logits are tens of units apart and bf16 rounding
  rarely changes the argmax; in addition the non-speculative baseline returns the top-2 log
  probabilities, and any divergence is classified by the baseline's top-1/top-2 margin at the
  first differing position (a "near-tie" is a margin of at most ``NEAR_TIE``).
* Each row builds a random drafter (layers, aux states, fc_norm, dialect) and starts an EAGLE3
  engine with CUDA graphs and the row's tree kernels (``SGLANG_EAGLE_EXT_TREE_KERNELS``: ours,
  ``triton``, or SGLang's own, ``sglang``); greedy outputs are compared with the baseline's
  token by token. Rows 1 and 3 serve the same drafter with our kernels and with SGLang's: their
  outputs must be identical (same output digest). Row 4 is activated by the
  ``SGLANG_EXTERNAL_MODEL_PACKAGE`` fallback instead of the entry point.
* The baseline and the rows are independent engines and start side by side (engine start is
  mostly host work: CUDA-graph capture, Triton compilation).
* ``--throughput`` (task ``speed``): a 1-layer 3-aux SpecForge drafter served by three engines
  side by side: our class and SGLang's built-in class (``SGLANG_EAGLE_EXT=0``), both with
  SGLang's tree kernels, so that only the model class differs; and our class with our Triton
  tree kernels. The target is Llama-3-8B-shaped (``SPEED_TARGET``, random weights made by
  SGLang's ``dummy`` loader, the tiny vocabulary), so that a step costs milliseconds of GPU time
  and host noise does not swamp a 2 % difference; the drafter is a real checkpoint of that width,
  loaded by the class under test. Output tokens per second at batch 1 and batch 32, the arms
  measured in rotating order for ``SPEED_ROUNDS`` rounds; per-round ratios and their median.
* ``--tp N`` (N > 1): the baseline and every row run with tensor parallelism over N GPUs, and a
  ``baseline_tp1`` task (the same non-speculative engine at TP 1, with its top-2 log probabilities)
  runs beside them. Losslessness is judged against the TP-N baseline (the same engine layout); each
  row and the TP-N baseline are also compared with the TP-1 baseline under the same near-tie rule
  (``vs_tp1``), so that a digest that differs from TP 1's is classified rather than just different.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from results_file import save_json

# the checkout's root, after the installed packages: the tests' kit (tests.kit), with which this script
# and those importing it build their drafters
sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# Baseline top-1/top-2 margin (nats) at or below which a divergence counts as a near-tie: the
# tiny target's top logits lie near 64 (bf16 spacing 0.25 to 0.5 there), so this is a few bf16
# steps (observed margins at divergences are exact multiples of 0.25).
NEAR_TIE = 1.0
MAX_NEW_TOKENS = 48
PROMPTS = [
    "the quick brown fox", "once upon a time", "a small village by the sea",
    "in the morning the", "she opened the door and", "numbers one two three",
    "the cat sat on", "rain fell over the hills",
]
TREE_KERNELS_SWITCH = "SGLANG_EAGLE_EXT_TREE_KERNELS"
TASK_TIMEOUT_S = int(os.environ.get("E2E_TASK_TIMEOUT", "400"))  # the side-by-side engines' deadline
TP_SIZE = 1  # --tp: every task's engine over this many GPUs (baseline_tp1 excepted)
SPEED_TIMEOUT_S = 540  # three engines of a 7e9-parameter target: start-up, graph capture, 2 x 45 measurements


@dataclasses.dataclass(frozen=True)
class Row:
    layers: int
    num_aux: int
    fc_norm: bool
    dialect: str
    topk: int
    steps: int
    draft_tokens: int
    seed: int
    kernels: str = "triton"  # value of SGLANG_EAGLE_EXT_TREE_KERNELS for this engine
    activation: str = "entry-point"  # or "fallback": SGLANG_EXTERNAL_MODEL_PACKAGE, entry point skipped


ROWS = [
    Row(layers=1, num_aux=3, fc_norm=False, dialect="specforge", topk=1, steps=3, draft_tokens=4, seed=0),
    Row(layers=2, num_aux=4, fc_norm=True, dialect="speculators", topk=4, steps=3, draft_tokens=8, seed=1),
    Row(layers=3, num_aux=2, fc_norm=True, dialect="specforge", topk=2, steps=2, draft_tokens=4, seed=2),
    # row 1's drafter with SGLang's tree kernels: outputs must equal row 1's exactly
    Row(layers=2, num_aux=4, fc_norm=True, dialect="speculators", topk=4, steps=3, draft_tokens=8, seed=1,
        kernels="sglang"),
    # row 1's weights in SpecForge's flat layout with vLLM's top-level ids, activated by the
    # fallback package: stock SGLang reads this config (a speculators config it cannot read
    # before our late activation), but not these ids; 4 aux states start only if the target's
    # taps are still normalised after SGLang imports its model registry (which activates us)
    Row(layers=2, num_aux=4, fc_norm=True, dialect="flat-top-level-ids", topk=4, steps=3, draft_tokens=8,
        seed=1, activation="fallback"),
]
ACTIVATION_ENV = {
    "entry-point": {},
    # SGLANG_PLUGINS is SGLang's whitelist of plugin names: one that names no plugin skips ours
    "fallback": {"SGLANG_PLUGINS": "none", "SGLANG_EXTERNAL_MODEL_PACKAGE": "sglang_eagle_ext.sglang.models"},
}

# --throughput: the drafter of row 0, served by three engines
SPEED_ROW = ROWS[0]
SPEED_ARMS = {
    "ours": {TREE_KERNELS_SWITCH: "sglang"},
    "builtin": {"SGLANG_EAGLE_EXT": "0", TREE_KERNELS_SWITCH: "sglang"},
    "ours_triton": {TREE_KERNELS_SWITCH: "triton"},
}
SPEED_SHAPES = ((1, 256), (32, 128))  # (batch, new tokens per request)
SPEED_ROUNDS = 15
# Llama-3-8B's geometry (32 layers, H 4096, 32 heads, 8 KV heads, I 14336) with the tiny
# tokenizer's 512-token vocabulary: about 7e9 parameters, a few ms of GPU time per forward
SPEED_TARGET = dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                    head_dim=128, intermediate_size=14336, attention_bias=False)


def engine_kwargs(graph_bs=None, **wanted):
    """Only the fields this SGLang's ServerArgs has (they move between releases); decode CUDA
    graphs of exactly ``graph_bs`` when given (no prefill graphs)."""
    from sglang_eagle_ext.sglang.compat.runtime import decode_graph_options, server_option_names

    if graph_bs is not None:
        wanted.update(decode_graph_options(graph_bs))
    fields = server_option_names()
    return {k: v for k, v in wanted.items() if k in fields}


def start_engine(target: str, drafter: str | None = None, row: Row | None = None,
                 graph_bs=(1, 2, 4, 8), **extra):
    import sglang

    spec = {}
    if drafter is not None:
        spec = dict(speculative_algorithm="EAGLE3", speculative_draft_model_path=drafter,
                    speculative_num_steps=row.steps, speculative_eagle_topk=row.topk,
                    speculative_num_draft_tokens=row.draft_tokens)
    # Several engines share the GPU. SGLang sizes the KV pool as the memory free after loading
    # minus (1 - mem_fraction_static) of the memory free at start; a high fraction keeps that
    # positive while other engines allocate, and max_total_tokens keeps each pool small.
    options = dict(model_path=target, dtype="bfloat16", attention_backend="triton", sampling_backend="pytorch",
                   mem_fraction_static=0.7, max_total_tokens=65536, max_running_requests=64,
                   context_length=1024, log_level="error", **spec)
    if TP_SIZE > 1:
        options["tp_size"] = TP_SIZE
    options.update(extra)  # a caller's value wins (tp_size, max_total_tokens, ...)
    return sglang.Engine(**engine_kwargs(graph_bs=list(graph_bs), **options))


def greedy(engine, prompts, max_new_tokens=MAX_NEW_TOKENS, top2=False):
    params = {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}
    extra = dict(return_logprob=True, top_logprobs_num=2) if top2 else {}
    return engine.generate(prompt=prompts, sampling_params=params, **extra)


def compare(output_ids, baseline) -> dict:
    exact, near_tie_only, real = 0, 0, []
    for index, (ids, base) in enumerate(zip(output_ids, baseline)):
        ref = base["output_ids"]
        if ids == ref:
            exact += 1
            continue
        position = next(i for i, (a, b) in enumerate(zip(ids, ref)) if a != b)
        top = base["output_top_logprobs"][position]
        margin = top[0][0] - top[1][0]
        if margin <= NEAR_TIE:
            near_tie_only += 1
        else:
            real.append({"prompt": index, "position": position, "margin": round(margin, 3)})
    return {"exact": exact, "near_tie": near_tie_only, "mismatch": real, "prompts": len(output_ids)}


def acceptance(outputs) -> dict:
    tokens = sum(o["meta_info"]["completion_tokens"] for o in outputs)
    verify = sum(o["meta_info"].get("spec_verify_ct", 0) for o in outputs)
    return {"completion_tokens": tokens, "spec_verify_ct": verify,
            "accept_length": round(tokens / verify, 3) if verify else None}


def digest(output_ids) -> str:
    return hashlib.sha1(json.dumps(output_ids).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------
# --throughput: three engines side by side
# ---------------------------------------------------------------------------------------------

def _speed_prompts(batch: int) -> list[str]:
    return [PROMPTS[i % len(PROMPTS)] + f" {i}" for i in range(batch)]


def _engine_server(connection, target: str, drafter: str, environment: dict) -> None:
    """Child process hosting one EAGLE3 engine; answers (batch, new_tokens) with (tokens, seconds)."""
    os.environ.update(environment)  # inherited by every process of this engine
    # no prefix cache: every round prefills the same prompts in full, as the first one did
    engine = start_engine(target, drafter, SPEED_ROW, graph_bs=(1, 2, 4, 8, 16, 32),
                          disable_radix_cache=True, load_format="dummy", speculative_draft_load_format="auto")
    for batch, _ in SPEED_SHAPES:  # warm-up at the measured batch sizes (Triton compiles once)
        greedy(engine, _speed_prompts(batch), max_new_tokens=16)
    connection.send("ready")
    while (request := connection.recv()) is not None:
        batch, new_tokens = request
        start = time.perf_counter()
        outputs = greedy(engine, _speed_prompts(batch), max_new_tokens=new_tokens)
        seconds = time.perf_counter() - start
        connection.send((sum(o["meta_info"]["completion_tokens"] for o in outputs), seconds,
                         digest([o["output_ids"] for o in outputs])))
    engine.shutdown()


def write_speed_target(tiny_target: str, directory: str) -> None:
    """Config and tokenizer of the speed target (no weights: SGLang's ``dummy`` loader draws them)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(tiny_target, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    config.update(SPEED_TARGET, dtype="bfloat16")
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2)
    for name in os.listdir(tiny_target):
        if name.startswith("tokenizer") or name == "generation_config.json":
            shutil.copy(os.path.join(tiny_target, name), directory)


def compare_speed(target: str, drafter: str) -> dict:
    """The arms measured in rotating order (round r starts with arm r mod 3), so that clock and
    host noise hit all alike; per-round ratios against the built-in class, and their median."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    engines = {}
    for name, environment in SPEED_ARMS.items():
        parent, child = context.Pipe()
        process = context.Process(target=_engine_server, args=(child, target, drafter, environment))
        process.start()
        engines[name] = (parent, process)
    for parent, _ in engines.values():
        assert parent.recv() == "ready"
    names = list(SPEED_ARMS)
    record = {"rounds": SPEED_ROUNDS, "arms": SPEED_ARMS}
    for batch, new_tokens in SPEED_SHAPES:
        rates = {name: [] for name in names}
        digests = {name: set() for name in names}
        for round_ in range(SPEED_ROUNDS):
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                engines[name][0].send((batch, new_tokens))
                tokens, seconds, output_digest = engines[name][0].recv()
                rates[name].append(tokens / seconds)
                digests[name].add(output_digest)
        shape = {"new_tokens": new_tokens,
                 "tok_s": {name: [round(r, 1) for r in rates[name]] for name in names},
                 "tok_s_median": {name: round(statistics.median(rates[name]), 1) for name in names},
                 "output_digests": {name: sorted(digests[name]) for name in names}}
        for name in names:
            if name != "builtin":
                ratios = [o / b for o, b in zip(rates[name], rates["builtin"])]
                shape[f"{name}_vs_builtin"] = {"ratio_median": round(statistics.median(ratios), 4),
                                               "ratios": [round(r, 4) for r in ratios]}
        record[f"batch{batch}"] = shape
    for parent, process in engines.values():
        parent.send(None)
        process.join(timeout=60)
    return record


# ---------------------------------------------------------------------------------------------
# Tasks: one engine each, in its own process (SGLang kills the process when an engine fails)
# ---------------------------------------------------------------------------------------------

def run_task(task: str, out: str) -> dict:
    from tests.kit.matched_drafter import build_matched_drafter

    target = os.path.join(out, "models", "speed_target" if task == "speed" else "target")
    if task in ("baseline", "baseline_tp1"):
        engine = start_engine(target, **({"tp_size": 1} if task == "baseline_tp1" else {}))
        outputs = greedy(engine, PROMPTS, top2=True)
        engine.shutdown()
        return {"outputs": [{"output_ids": o["output_ids"], "output_top_logprobs": [
            [list(t[:2]) for t in pos] for pos in o["meta_info"]["output_top_logprobs"]]} for o in outputs]}
    row = SPEED_ROW if task == "speed" else ROWS[int(task[len("row"):])]
    drafter = build_matched_drafter(os.path.join(out, "models", f"{task}_drafter"), target,
                                    layers=row.layers, num_aux=row.num_aux, fc_norm=row.fc_norm,
                                    dialect=row.dialect, seed=row.seed)
    if task == "speed":
        return compare_speed(target, drafter)
    started = time.perf_counter()
    engine = start_engine(target, drafter, row)
    record = {"row": dataclasses.asdict(row), "start_s": round(time.perf_counter() - started, 1)}
    outputs = greedy(engine, PROMPTS)
    record["output_ids"] = [o["output_ids"] for o in outputs]
    record.update(acceptance(outputs))
    engine.shutdown()
    return record


_PLUGIN_LINE = re.compile(r"sglang-eagle-ext: .*")


def plugin_lines(log_path: str) -> list[str]:
    """The plugin's activation lines of one task's processes, pids dropped, each once."""
    seen: dict[str, None] = {}
    with open(log_path, errors="replace") as handle:
        for line in handle:
            match = _PLUGIN_LINE.search(line)
            if match and any(k in line for k in ("drafts served", "disabled by", "tree kernels (pid")):
                seen[re.sub(r" \(pid \d+\)", "", match.group(0))] = None
    return list(seen)


def row_environment(row: Row) -> dict:
    return {TREE_KERNELS_SWITCH: row.kernels, **ACTIVATION_ENV[row.activation]}


def launch(task: str, out: str, environment: dict) -> subprocess.Popen:
    log = open(os.path.join(out, "logs", f"{task}.log"), "w")
    return subprocess.Popen([sys.executable, __file__, "--out", out, "--task", task, "--tp", str(TP_SIZE)],
                            env={**os.environ, **environment}, stdout=log, stderr=subprocess.STDOUT)


def finish(task: str, out: str, process: subprocess.Popen, deadline: float) -> dict:
    try:
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        code = "timeout"
    path = os.path.join(out, f"{task}.json")
    record = json.load(open(path)) if code == 0 and os.path.exists(path) else {"error": f"exit {code}"}
    record["plugin_log"] = plugin_lines(os.path.join(out, "logs", f"{task}.log"))
    return record


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--throughput", action="store_true", help="add the speed task")
    parser.add_argument("--only", help="comma-separated tasks (baseline,row0,...,speed)")
    parser.add_argument("--task", help="internal: run one engine's task in this process")
    parser.add_argument("--tp", type=int, default=1,
                        help="tensor-parallel size of every task's engine; above 1 adds the baseline_tp1 task")
    parser.add_argument("--dry-run", action="store_true", help="print the tasks and engine options, start nothing")
    args = parser.parse_args()
    global TP_SIZE
    TP_SIZE = args.tp
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    if args.task:
        record = run_task(args.task, args.out)
        save_json(os.path.join(args.out, f"{args.task}.json"), record)
        return 0

    tasks = ["baseline"] + [f"row{i}" for i in range(len(ROWS))] + (["speed"] if args.throughput else [])
    if args.only:
        tasks = args.only.split(",")
    if TP_SIZE > 1 and "baseline" in tasks and "baseline_tp1" not in tasks:
        tasks.insert(1, "baseline_tp1")
    if args.dry_run:
        print(json.dumps({"tp_size": TP_SIZE, "tasks": tasks, "environments": {
            t: row_environment(ROWS[int(t[3:])]) for t in tasks if t.startswith("row")}}))
        return 0

    import sglang
    import torch

    from sglang_eagle_ext.demo.tiny_target import TinyTargetSettings, build_tiny_target

    build_tiny_target(os.path.join(args.out, "models", "target"), TinyTargetSettings(
        num_layers=8, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=512, lm_head_std=2.0))
    results = {"sglang": sglang.__version__, "device": torch.cuda.get_device_name(0),
               "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "commit": os.environ.get("E2E_COMMIT", "unknown"), "near_tie_nats": NEAR_TIE,
               "max_new_tokens": MAX_NEW_TOKENS, "tp_size": TP_SIZE, "rows": []}
    if "speed" in tasks:
        write_speed_target(os.path.join(args.out, "models", "target"), os.path.join(args.out, "models", "speed_target"))
    engines = [t for t in tasks if t != "speed"]
    deadline = time.monotonic() + TASK_TIMEOUT_S
    running = {t: launch(t, args.out, row_environment(ROWS[int(t[3:])]) if t.startswith("row") else {})
               for t in engines}
    records = {t: finish(t, args.out, p, deadline) for t, p in running.items()}
    baseline = records.get("baseline", {}).get("outputs")
    baseline_tp1 = records.get("baseline_tp1", {}).get("outputs")
    if baseline is not None and baseline_tp1 is not None:
        ids = [o["output_ids"] for o in baseline]
        results["baseline_vs_tp1"] = {"digest": digest(ids),
                                      "digest_tp1": digest([o["output_ids"] for o in baseline_tp1]),
                                      **compare(ids, baseline_tp1)}
    for task in engines:
        record = records[task]
        if task.startswith("row"):
            record.setdefault("row", dataclasses.asdict(ROWS[int(task[3:])]))
            if "output_ids" in record:
                outputs = record.pop("output_ids")
                record["output_digest"] = digest(outputs)
                if baseline is not None:
                    record.update(compare(outputs, baseline))
                if baseline_tp1 is not None:
                    record["vs_tp1"] = compare(outputs, baseline_tp1)
            results["rows"].append(record)
        print("TASK", task, json.dumps({k: v for k, v in record.items() if k != "outputs"}), flush=True)
    save_json(os.path.join(args.out, "results.json"), results)
    if "speed" in tasks:
        record = finish("speed", args.out, launch("speed", args.out, {}),
                        time.monotonic() + SPEED_TIMEOUT_S)
        results["speed"] = record
        print("TASK speed", json.dumps(record), flush=True)
        save_json(os.path.join(args.out, "results.json"), results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
