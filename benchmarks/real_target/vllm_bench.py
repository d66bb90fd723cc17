"""SmolLM2 served by vLLM 0.33 with the trained drafters: the vLLM side of issue 38's side-by-side (GPU).

The peer of ``serve_bench.py`` (same target, prompts, cells, rounds and agreement rule; its helpers are
imported, not copied), on vLLM's offline engine (``vllm.LLM``) as installed by ``benchmarks/vllm_kit``.
Arms, one engine each, started one after another in a child process:

* ``plain``: the target alone, the baseline of every ratio and the greedy reference;
* ``<drafter>/k<K>/vllm``: EAGLE-3 with ``speculative_config={"method": "eagle3", "model": DIR,
  "num_speculative_tokens": K}``: a chain of K draft tokens (SGLang's chain K/1/K+1; vLLM 0.33 drafts
  chains only). vLLM reads a speculators-format drafter natively (its config's ``speculators_model_type``,
  vllm/transformers_utils/configs/speculators/base.py:51) and wraps any other EAGLE-3 export (SpecForge's)
  in its EAGLEConfig (vllm/config/speculative.py:1514-1529). A drafter vLLM cannot load is tried with its
  first K only; its other arms say so.

Cells as in serve_bench: batch 1 (the first ``--single`` MT-bench first turns, one request at a time), 16
and 64 (64 requests in waves of that size), greedy and temperature 0.7 / top-p 0.9, ``--new-tokens`` each
with ``ignore_eos``, ``--rounds`` timed rounds after an untimed warm-up of every batch size and mode. Per
cell: output tokens/s (median and every round), time to first token as serve_bench measures it (greedy
cells: serve_bench.first_token_requests, each wave alone with one new token) and as vLLM reports it in the
timed rounds (``engine_ttft_ms``: each request's ``RequestOutput.metrics.first_token_latency``, arrival to
first token, vllm/v1/metrics/stats.py:525),
acceptance length from vLLM's own spec-decode counters (``LLM.get_metrics()``, read before and after each
timed round: 1 + accepted / drafts, vLLM's definition at vllm/v1/spec_decode/metrics.py:186-190; a draft is
one request's verify step), per-position acceptance, and for greedy cells the outputs' agreement with
plain decoding under serve_bench's near-tie rule (plain's top-2 log-probs come from an untimed
``logprobs=2`` run).

The engine: bfloat16, vLLM's default attention on Hopper (FlashAttention 3, vllm/v1/attention/backends/
fa_utils.py:98) unless ``--attention-backend``, CUDA graphs and torch.compile at vLLM's defaults,
``max_num_seqs`` the largest batch, prefix caching off (each round prefills in full, as serve_bench's
engines do), ``gpu_memory_utilization`` 0.7, seed 0; the PyTorch/Triton sampler
(``VLLM_USE_FLASHINFER_SAMPLER=0``: FlashInfer's sampler JIT-compiles, and serve_bench's SGLang uses
``sampling_backend="pytorch"``).

usage (repository root, after ``source /tmp/site_vllm/env_vllm.sh``; ``--dry-run`` needs neither vLLM nor
a GPU and prints each arm's engine keywords)::

    python3 benchmarks/real_target/vllm_bench.py OUTDIR --target DIR --prompts mtbench.jsonl \
        --drafter speculators=DIR --drafter specforge=DIR [--chains 1,2,3,4] [--arms plain,...] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.append(os.path.dirname(os.path.dirname(HERE)))  # this checkout's package, if it is not staged
import engines  # noqa: E402
import serve_bench  # noqa: E402  (cells, agreement rule, modes: the SGLang side's own definitions)
from results_file import save_json  # noqa: E402  (benchmarks/gpu, put on sys.path by serve_bench)

CHAINS = (1, 2, 3, 4)
START_TIMEOUT_S = 480  # a cold start compiles the target (and drafter) with torch.compile first
CELL_TIMEOUT_S = 300
MEMORY = 0.7
# Set in every engine's process (and recorded in the results).
ENGINE_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_USE_DEEP_GEMM": "0", "VLLM_NO_USAGE_STATS": "1",
              "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}
SPEC_COUNTERS = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens": "accepted"}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def arm_names(drafters: list[str], chains: list[int]) -> list[str]:
    return ["plain"] + [f"{drafter}/k{k}/vllm" for drafter in drafters for k in chains]


def parse_arm(name: str) -> tuple[str | None, int | None]:
    """(drafter, chain length) of an arm name; (None, None) for plain decoding."""
    if name == "plain":
        return None, None
    drafter, chain, side = name.split("/")
    if side != "vllm" or not chain.startswith("k") or not chain[1:].isdigit() or int(chain[1:]) < 1:
        raise ValueError(f"not an arm name: {name!r} (plain or DRAFTER/kK/vllm)")
    return drafter, int(chain[1:])


def shape_label(k: int) -> str:
    """The chain in serve_bench's shape notation (steps/top-k/draft tokens)."""
    return f"chain {k}/1/{k + 1}"


def engine_kwargs(target: str, drafter: str | None, k: int | None, batches: tuple[int, ...], context_length: int,
                  attention_backend: str | None = None, memory: float = MEMORY,
                  compilation: dict | None = None, skip_tokenizer: bool = False,
                  kv_cache_bytes: int | None = None) -> dict:
    """``vllm.LLM`` keywords of one arm (vllm/entrypoints/llm.py:177; the rest go to EngineArgs).
    ``kv_cache_bytes``: the KV cache's size, which vLLM then takes as given instead of sizing it from its memory
    profile (config/cache.py: ``kv_cache_memory_bytes``): that profile would count memory another engine on the
    same GPU allocates meanwhile as this one's (turns.py)."""
    kwargs = {"model": target, "dtype": "bfloat16", "seed": serve_bench.SEED, "max_model_len": context_length,
              "max_num_seqs": max(batches), "gpu_memory_utilization": memory, "enable_prefix_caching": False,
              # LLM turns stats off unless asked (llm.py:225); get_metrics() asserts them (v1/engine/llm_engine.py:447)
              "disable_log_stats": False}
    if skip_tokenizer:
        kwargs["skip_tokenizer_init"] = True  # ids in, ids out (a target without a tokenizer)
    if attention_backend:
        kwargs["attention_config"] = {"backend": attention_backend}  # config/attention.py:40, a name is accepted
    if compilation:
        kwargs["compilation_config"] = compilation  # CompilationConfig fields (config/compilation.py)
    if kv_cache_bytes:
        kwargs["kv_cache_memory_bytes"] = kv_cache_bytes
    if drafter is not None:
        kwargs["speculative_config"] = {"method": "eagle3", "model": drafter, "num_speculative_tokens": k}
    return kwargs


def sampling_kwargs(mode: str, new_tokens: int, top2: bool = False, detokenize: bool = True) -> dict:
    """``vllm.SamplingParams`` keywords of a cell (serve_bench's modes; vllm/sampling_params.py:308-342)."""
    kwargs = {**serve_bench.MODES[mode], "max_tokens": new_tokens, "ignore_eos": True}
    if not detokenize:
        kwargs["detokenize"] = False  # an engine started without a tokenizer has none to detokenize with
    if top2:
        kwargs["logprobs"] = 2  # the sampled token's log-prob and the top 2 per position
    return kwargs


def plan(ids_count: int, batches: tuple[int, ...], single: int) -> dict:
    """Requests per wave of each batch size (serve_bench.cell_prompts on ``ids_count`` prompts)."""
    ids = [[i] for i in range(ids_count)]
    return {batch: [len(wave) for wave in serve_bench.cell_prompts(ids, batch, single)] for batch in batches}


def spec_counts(metrics) -> dict:
    """vLLM's spec-decode counters (vllm/v1/metrics/reader.py: Counter.value, Vector.values), summed over
    engines; absent counters (plain decoding) count 0."""
    out = zero_counts()
    for metric in metrics:
        if metric.name in SPEC_COUNTERS:
            out[SPEC_COUNTERS[metric.name]] += int(metric.value)
        elif metric.name == PER_POSITION:
            out = add_counts(out, {**zero_counts(), "per_position": [int(v) for v in metric.values]})
    return out


def zero_counts() -> dict:
    return {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_position": []}


def _pad(values: list[int], length: int) -> list[int]:
    return values + [0] * (length - len(values))


def counts_delta(after: dict, before: dict) -> dict:
    delta = {key: after[key] - before[key] for key in ("drafts", "draft_tokens", "accepted")}
    length = max(len(after["per_position"]), len(before["per_position"]))
    delta["per_position"] = [a - b for a, b in zip(_pad(after["per_position"], length),
                                                   _pad(before["per_position"], length))]
    return delta


def add_counts(total: dict, more: dict) -> dict:
    out = {key: total[key] + more[key] for key in ("drafts", "draft_tokens", "accepted")}
    length = max(len(total["per_position"]), len(more["per_position"]))
    out["per_position"] = [a + b for a, b in zip(_pad(total["per_position"], length),
                                                 _pad(more["per_position"], length))]
    return out


def top2_of(logprobs) -> list[list[float]]:
    """Each position's two highest log-probs (a position's dict holds the sampled token and the top 2,
    vllm/logprobs.py: Logprob.logprob)."""
    return [sorted((entry.logprob for entry in position.values()), reverse=True)[:2] if position else []
            for position in logprobs]


def host(connection, kwargs: dict, log_path: str, batches: tuple[int, ...]) -> None:
    """Child process hosting one engine; answers (waves, mode, new_tokens, top2) with one measurement."""
    entered = time.perf_counter()  # after the spawned interpreter's imports
    os.setpgrp()  # its own process group, with vLLM's engine-core process: serve_bench.end_group() ends both
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.update(ENGINE_ENV)
    try:
        from vllm import LLM, SamplingParams

        llm = LLM(**kwargs)
    except BaseException as exc:  # a drafter vLLM cannot read raises here
        traceback.print_exc()
        connection.send({"failed": f"{type(exc).__name__}: {exc}"[:600]})
        return
    spec = llm.llm_engine.vllm_config.speculative_config
    resolved = None
    if spec is not None:  # what vLLM made of the drafter (config/speculative.py)
        draft = spec.draft_model_config
        resolved = {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens,
                    "draft_architectures": list(getattr(draft.hf_config, "architectures", None) or []),
                    "draft_hf_config": type(draft.hf_config).__name__,
                    "aux_layer_ids": getattr(draft.hf_config, "eagle_aux_hidden_state_layer_ids", None)}
    detokenize = not kwargs.get("skip_tokenizer_init")
    built = time.perf_counter()
    for batch in batches:  # the first requests of each batch size and mode compile kernels: untimed
        for mode in serve_bench.MODES:
            llm.generate([{"prompt_token_ids": [1, 2, 3]}] * batch,
                         SamplingParams(**sampling_kwargs(mode, 8, detokenize=detokenize)), use_tqdm=False)
    print(serve_bench.start_parts(entered, built), flush=True)
    connection.send({"ready": True, "speculative": resolved})
    while (request := connection.recv()) is not None:
        waves, mode, new_tokens, top2 = request
        try:
            params = SamplingParams(**sampling_kwargs(mode, new_tokens, top2, detokenize))
            before = spec_counts(llm.get_metrics())
            outputs, started = [], time.perf_counter()
            for wave in waves:
                outputs += llm.generate([{"prompt_token_ids": ids} for ids in wave], params, use_tqdm=False)
            seconds = time.perf_counter() - started
            result = {"seconds": seconds, "tokens": sum(len(o.outputs[0].token_ids) for o in outputs),
                      "output_ids": [list(o.outputs[0].token_ids) for o in outputs],
                      "engine_ttft_s": [o.metrics.first_token_latency for o in outputs if o.metrics is not None],
                      "spec": counts_delta(spec_counts(llm.get_metrics()), before)}
            if top2:
                result["top2"] = [top2_of(o.outputs[0].logprobs or []) for o in outputs]
        except BaseException as exc:
            traceback.print_exc()
            connection.send({"failed": f"{type(exc).__name__}: {exc}"[:600]})
            break
        connection.send(result)
    llm.llm_engine.engine_core.shutdown()  # the engine-core process, before this one exits


def finish_cell(cell: dict) -> None:
    cell["tok_s_median"] = round(statistics.median(cell["tok_s"]), 1)
    for key in ("ttft_ms", "engine_ttft_ms"):
        if cell.get(key):
            cell[key + "_median"] = round(statistics.median(cell[key]), 2)
    if cell["spec"]["drafts"]:
        spec = cell["spec"]
        cell["accept_length"] = round(1 + spec["accepted"] / spec["drafts"], 3)
        cell["accept_rate_per_position"] = [round(a / spec["drafts"], 3) for a in spec["per_position"]]


def measure_arm(name: str, args, ids, drafters: dict, plain: dict | None) -> dict:
    drafter_name, k = parse_arm(name)
    kwargs = engine_kwargs(args.target, drafters.get(drafter_name), k, args.batches, args.context_length,
                           args.attention_backend, args.memory, args.compilation, args.tokenizer is not None,
                           args.kv_cache_bytes)
    record = {"arm": name, "drafter": drafter_name, "shape": None if k is None else shape_label(k),
              "engine": "vllm", "engine_kwargs": kwargs}
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    log_path = os.path.join(args.out, "vllm_" + name.replace("/", "_") + ".log")
    process = context.Process(target=host, args=(child, kwargs, log_path, args.batches))
    served = serve_bench.engine_turns(record, process, parent, child, args.turns, START_TIMEOUT_S, CELL_TIMEOUT_S,
                                      lambda link, cells: measure_cells(link, cells, args, ids, name))
    if served is None:
        return record
    answer, cells = served
    record["speculative"] = answer["speculative"]
    for cell in cells.values():
        finish_cell(cell)
    serve_bench.compare_cells(cells, plain, args.batches, name == "plain")
    record["cells"] = cells
    return record


def measure_cells(link, cells: dict, args, ids, name: str) -> None:
    """Every cell of one arm into ``cells``, from its engine's host (``link``, a :class:`serve_bench.Link`): per
    batch size both modes' rounds, the greedy time to first token and, for plain decoding, the reference outputs
    with their top-2 log-probs. An engine that fails mid-cells raises ``EngineGone`` with the cells so far kept."""
    for batch in args.batches:
        waves = serve_bench.cell_prompts(ids, batch, args.single)
        for round_ in range(args.rounds):
            modes = list(serve_bench.MODES) if round_ % 2 == 0 else list(serve_bench.MODES)[::-1]
            for mode in modes:
                link.send((waves, mode, args.new_tokens, False))
                result = link.recv()
                cell = cells.setdefault(f"batch{batch}/{mode}", {"tok_s": [], "tokens": 0, "engine_ttft_ms": [],
                                                                 "spec": zero_counts()})
                cell["tok_s"].append(round(result["tokens"] / result["seconds"], 1))
                cell["tokens"] += result["tokens"]
                cell["engine_ttft_ms"] += [round(1000 * t, 2) for t in result["engine_ttft_s"]]
                cell["spec"] = add_counts(cell["spec"], result["spec"])
                if mode == "greedy":
                    cell.setdefault("outputs", result["output_ids"])
        ttft = cells[f"batch{batch}/greedy"].setdefault("ttft_ms", [])
        for request in serve_bench.first_token_requests(waves, args.rounds):
            link.send(request)
            ttft.append(round(1000 * link.recv()["seconds"], 2))
        if name == "plain":  # the reference outputs with their top-2 log-probs (untimed)
            link.send((waves, "greedy", args.new_tokens, True))
            result = link.recv()
            cell = cells[f"batch{batch}/greedy"]
            cell["top2"] = result["top2"]
            cell["logprob_run_equal"] = result["output_ids"] == cell["outputs"]


def environment() -> dict:
    import vllm

    return {**engines.run_environment(), "engine": "vllm", "vllm": vllm.__version__, "engine_env": ENGINE_ENV}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    serve_bench.add_run_arguments(parser)
    parser.add_argument("--chains", type=lambda text: [int(k) for k in text.split(",")], default=list(CHAINS),
                        help="num_speculative_tokens of the EAGLE-3 arms")
    parser.add_argument("--attention-backend", help="e.g. FLASH_ATTN or TRITON_ATTN (default: vLLM's choice)")
    parser.add_argument("--memory", type=float, default=MEMORY, help="gpu_memory_utilization")
    parser.add_argument("--kv-cache-bytes", type=int, help="the KV cache's size (kv_cache_memory_bytes; default: "
                        "what vLLM's memory profile leaves), where another engine shares the GPU (turns.py)")
    parser.add_argument("--compilation", type=json.loads,
                        help="compilation_config as JSON (default: vLLM's, torch.compile + CUDA graphs); e.g. "
                             "'{\"mode\": 0, \"cudagraph_mode\": \"FULL_DECODE_ONLY\"}' skips torch.compile")
    parser.add_argument("--dry-run", action="store_true", help="print each arm's engine keywords and the cells")
    args = parser.parse_args(argv)
    if args.batches[0] != 1:
        parser.error("--batches must start with 1 (the agreement floor compares batched cells with batch 1)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    drafters = dict(item.split("=", 1) for item in args.drafter)
    names = args.arms.split(",") if args.arms else arm_names(list(drafters), args.chains)
    for name in names:
        drafter_name, _ = parse_arm(name)
        if drafter_name is not None and drafter_name not in drafters:
            sys.exit(f"vllm_bench.py: arm {name} names drafter {drafter_name!r}, not given by --drafter")
    if args.dry_run:
        count = 80
        if os.path.exists(args.prompts):
            with open(args.prompts, encoding="utf-8") as handle:
                count = sum(1 for line in handle if line.strip())
        print(f"engine environment: {json.dumps(ENGINE_ENV)}")
        for batch, waves in plan(count, args.batches, args.single).items():
            print(f"batch {batch}: {len(waves)} wave(s) of {waves[0]} request(s), {args.rounds} timed round(s) "
                  "per mode")
        for mode in serve_bench.MODES:
            print(f"{mode}: SamplingParams({json.dumps(sampling_kwargs(mode, args.new_tokens))})")
        for name in names:
            drafter_name, k = parse_arm(name)
            kwargs = engine_kwargs(args.target, drafters.get(drafter_name), k, args.batches, args.context_length,
                                   args.attention_backend, args.memory, args.compilation, args.tokenizer is not None,
                                   args.kv_cache_bytes)
            print(f"{name}: {json.dumps(kwargs)}")
        return 0
    os.makedirs(args.out, exist_ok=True)
    ids = serve_bench.prompt_ids(args)
    path = os.path.join(args.out, "vllm_bench.json")
    results = serve_bench.run_record(path, args, drafters, environment(), chains=args.chains)
    refused = {}  # drafter -> why its other chain lengths are not tried
    clock = serve_bench.ArmClock(args.deadline, args.arm_seconds)
    for name in names:
        if name in results["arms"] and "failed" not in results["arms"][name]:
            continue
        drafter_name, _ = parse_arm(name)
        if drafter_name in refused:
            results["arms"][name] = {"arm": name, "failed": "not tried: " + refused[drafter_name]}
            continue
        if serve_bench.skip_or_note(results, name, clock):  # before plain's check: a refused arm is always noted
            save_json(path, results)
            continue
        plain = results["arms"].get("plain")
        if name != "plain" and (plain is None or "failed" in plain):
            print(f"# {name}: after plain decoding only (its ratios and agreement need it)", flush=True)
            continue
        print(f"# {time.strftime('%H:%M:%S')} {name}", flush=True)
        with clock.timing():
            record = measure_arm(name, args, ids, drafters, None if name == "plain" else plain)
        if "failed" in record and drafter_name is not None:
            refused[drafter_name] = f"vLLM failed to serve this drafter with {record.get('shape')}"
        results["arms"][name] = record
        save_json(path, results)
        summary = {k: (v.get("tok_s_median"), v.get("accept_length"), v.get("ttft_ms_median"))
                   for k, v in record.get("cells", {}).items()}
        print(f"  {record.get('failed') or summary}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
