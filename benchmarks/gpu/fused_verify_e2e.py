"""End to end: EAGLE-3 decoding in SGLang's engine, stock verify vs the fused sampler (GPU).

Two engines share the GPU, with the same target, drafter, tree and ``random_seed``: ``stock``
(``SGLANG_EAGLE_EXT_FUSED_VERIFY=0``: SGLang's own verify, with flashinfer's renorm when the run sets
``SGL_KERNEL_USE_FLASHINFER=1``, as a normal install has it) and ``fused`` (``=1``). For each batch
size and sampling mode (greedy; T 0.7 with top-p 0.9; T 0.7 with top-k 50) both engines decode the
same requests, arms alternating round by round (the first arm swaps each round); per round the
ratio fused / stock of output tokens per second, and its median.

* Target: Llama-3.1-8B's geometry (32 layers, H 4096, 32 heads and 8 KV heads of 128, I 14336,
  vocabulary 128256), bf16, weights drawn by SGLang's ``dummy`` loader; ``zipf_target`` (a plugin
  this script registers) then rewrites the embeddings, final norm and lm_head so that the next-token
  distributions are ``verify_workload.realistic_logits`` profiles: their entropy is in the results.
* Drafter: ``zipf_drafter`` (1 layer, 3 aux states, SpecForge layout, draft vocabulary 32000 with a
  ``d2t`` map), whose weights draft the target's own profiles: its drafts are accepted as a trained
  drafter's are, so verify walks go deep into the trees (accept lengths are in the results).
* ms per step: a request batch's wall time over its verify steps (prefill included). Each timed
  request batch follows an untimed one of ``LEAD_IN_TOKENS`` on the same engine, so that the arm
  taking the GPU over from the other does not pay its wake-up in the timing.
* ``--control``: a third engine, stock again (``stock-again``), decodes every cell in the same
  rotation; its ratio to ``stock`` (an A/A pair) goes to ``OUTDIR/control.json`` in the same format
  (its ``fused`` arm is the second stock engine): the engine-to-engine and order bias alone, measured
  in the same rounds as the real ratios, the floor under which a ratio says nothing about the arms.

usage (repository root; SGLang and this package installed, see ``stage_package.sh``):
  python3 benchmarks/gpu/fused_verify_e2e.py OUTDIR [--trees 0,1,2] [--batches 1,16,64] [--rounds 8]
                                             [--new-tokens 64] [--control] [--tp 2]
  python3 benchmarks/gpu/fused_verify_e2e.py OUTDIR --smoke   # CPU, a tiny target: the plumbing only
Results accumulate in ``OUTDIR/results.json`` (one entry per tree), logs in ``OUTDIR/logs``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time

from e2e_sglang import digest, engine_kwargs
from results_file import save_json
from verify_workload import BATCHES, FILTERS, TREES, VOCAB, flashinfer_renorm_requested
import zipf_drafter
from zipf_target import SEED_ENV, profile_stats

from sglang_eagle_ext.sglang.compat.fused_verify import ENV_SWITCH

HERE = os.path.dirname(os.path.abspath(__file__))
ARMS = {"stock": "0", "fused": "1"}  # values of ENV_SWITCH
CONTROL_ARM = "stock-again"  # --control's third engine, ENV_SWITCH 0
SEED = 1234
PROMPT_TOKENS = 16
LEAD_IN_TOKENS = 4  # an untimed request before each timed one
MODES = {"greedy": {"temperature": 0.0},
         **{label: {"temperature": t, "top_p": p, **({"top_k": k} if k < VOCAB else {})}
            for label, (t, k, p) in FILTERS.items()}}
LLAMA_31_8B = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=4096,
                   intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                   head_dim=128, vocab_size=VOCAB, max_position_embeddings=131072, rms_norm_eps=1e-5,
                   rope_theta=500000.0, hidden_act="silu", tie_word_embeddings=False, attention_bias=False,
                   torch_dtype="bfloat16", bos_token_id=128000, eos_token_id=128001)
DRAFT_VOCAB = 32000
# --smoke: the same plumbing on a CPU (chain drafting only, and greedy: sampled verify needs sgl_kernel)
SMOKE = dict(target=dict(LLAMA_31_8B, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=4096,
                         max_position_embeddings=2048, torch_dtype="float32", bos_token_id=1, eos_token_id=2),
             draft_vocab=1024, trees=[TREES[0]], batches=[1, 4], modes=["greedy"], rounds=1, new_tokens=8)
READY_TIMEOUT_S = 480
TP_SIZE = 1  # --tp: every engine over this many GPUs


def build_models(out: str, target_config: dict, draft_vocab: int, device: str, layers: int = 1) -> tuple[str, str]:
    """The target's config (no weights: the dummy loader draws them) and a ``layers``-deep drafter,
    once; the drafter's profiles are drawn on ``device``, as the target's engine draws them."""
    from tests.kit.matched_drafter import build_matched_drafter

    target = os.path.join(out, "models", "target")
    drafter = os.path.join(out, "models", "drafter" if layers == 1 else f"drafter-{layers}-layers")
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(target_config, handle, indent=1)
    if not os.path.exists(os.path.join(drafter, "matched_drafter.json")):
        build_matched_drafter(drafter, target, layers=layers, num_aux=3, fc_norm=False, dialect="specforge",
                              seed=7, draft_vocab=draft_vocab, shape=zipf_drafter.shaper(SEED, device))
    return target, drafter


def register_plugin(out: str, entries: tuple[str, ...] = ("zipf_target",)) -> None:
    """Benchmark-only ``sglang.srt.plugins`` entry points (modules of this folder with a ``load``,
    ``zipf_target`` by default), importable (with ``verify_workload``) by every process the engines
    start."""
    dist = os.path.join(out, "plugin", "sglang_eagle_ext_benchmarks-0.dist-info")
    os.makedirs(dist, exist_ok=True)
    with open(os.path.join(dist, "METADATA"), "w") as handle:
        handle.write("Metadata-Version: 2.1\nName: sglang-eagle-ext-benchmarks\nVersion: 0\n")
    with open(os.path.join(dist, "entry_points.txt"), "w") as handle:
        handle.write("[sglang.srt.plugins]\n" + "".join(f"{name} = {name}:load\n" for name in entries))
    # multiprocessing's spawn hands its children this process's sys.path; other children read PYTHONPATH
    sys.path[:0] = [os.path.join(out, "plugin"), HERE]
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [*sys.path[:2], os.environ.get("PYTHONPATH")]))
    os.environ[SEED_ENV] = str(SEED)


def prompts(count: int, vocab: int) -> list[list[int]]:
    import torch

    gen = torch.Generator().manual_seed(SEED)
    return torch.randint(0, vocab, (count, PROMPT_TOKENS), generator=gen).tolist()


def engine_options(tree: tuple, batches: list[int], smoke: bool) -> dict:
    from sglang_eagle_ext.demo.run import gpu_attention_backend
    from sglang_eagle_ext.sglang.compat import cpu, installed_release

    topk, steps, draft_tokens = tree
    if smoke:
        device = cpu.engine_options(installed_release())
    else:
        # two engines share the GPU: a high static fraction keeps SGLang's KV sizing positive while the
        # other engine loads, and max_total_tokens keeps each pool small
        device = dict(dtype="bfloat16", attention_backend=gpu_attention_backend(), sampling_backend="pytorch",
                      mem_fraction_static=0.7, graph_bs=batches)
    return engine_kwargs(speculative_algorithm="EAGLE3", speculative_num_steps=steps, speculative_eagle_topk=topk,
                         speculative_num_draft_tokens=draft_tokens, load_format="dummy",
                         speculative_draft_load_format="auto", skip_tokenizer_init=True, random_seed=SEED,
                         max_total_tokens=16384, max_running_requests=max(batches), context_length=1024,
                         disable_radix_cache=True, log_level="error", **device,
                         **({"tp_size": TP_SIZE} if TP_SIZE > 1 else {}))


def host(connection, target: str, drafter: str, options: dict, batches: list[int], modes: list[str], switch: str,
         log_path: str) -> None:
    """Child process hosting one engine (``switch``: its ENV_SWITCH value): answers (batch, mode, new
    tokens) with one measurement."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)  # inherited by the engine's scheduler: this arm's plugin lines land here
    os.environ[ENV_SWITCH] = switch
    import sglang

    engine = sglang.Engine(model_path=target, speculative_draft_model_path=drafter, **options)
    with open(os.path.join(target, "config.json"), encoding="utf-8") as handle:
        vocab = json.load(handle)["vocab_size"]
    requests = prompts(options["max_running_requests"], vocab)

    def measure(batch: int, mode: str, new_tokens: int) -> dict:
        params = {**MODES[mode], "max_new_tokens": new_tokens, "ignore_eos": True}
        # untimed, as the arms take turns: the engine taking the GPU over pays its wake-up here
        engine.generate(input_ids=requests[:batch], sampling_params={**params, "max_new_tokens": LEAD_IN_TOKENS})
        start = time.perf_counter()
        outputs = engine.generate(input_ids=requests[:batch], sampling_params=params)
        seconds = time.perf_counter() - start
        tokens = sum(o["meta_info"]["completion_tokens"] for o in outputs)
        verify = [o["meta_info"]["spec_verify_ct"] for o in outputs]  # a KeyError: speculation did not run
        return {"tokens": tokens, "seconds": seconds, "steps": max(verify), "verify": sum(verify),
                "digest": digest([o["output_ids"] for o in outputs])}

    for batch in batches:  # warm-up of every measured shape: Triton compiles and first calls are not timed
        for mode in modes:
            measure(batch, mode, 8)
    connection.send("ready")
    while (request := connection.recv()) is not None:
        connection.send(measure(*request))
    engine.shutdown()


def cell_record(batch: int, mode: str, new_tokens: int, stock: list[dict], fused: list[dict]) -> dict:
    """One cell: the two arms' rounds (``fused`` is the second stock engine in an A/A cell)."""
    runs = {"stock": stock, "fused": fused}
    rates = {arm: [r["tokens"] / r["seconds"] for r in runs[arm]] for arm in runs}
    ratios = [f / s for f, s in zip(rates["fused"], rates["stock"])]
    return {"batch": batch, "mode": mode, "new_tokens": new_tokens,
            "tok_s": {arm: [round(r, 1) for r in rates[arm]] for arm in runs},
            "tok_s_median": {arm: round(statistics.median(rates[arm]), 1) for arm in runs},
            "ms_per_step_median": {arm: round(statistics.median(
                1000 * r["seconds"] / r["steps"] for r in runs[arm]), 3) for arm in runs},
            "accept_length": {arm: round(sum(r["tokens"] for r in runs[arm]) /
                                         sum(r["verify"] for r in runs[arm]), 3) for arm in runs},
            # a request's first token comes from prefill; the rest are verify steps' bonus tokens
            # and accepted drafts
            "drafts_accepted": {arm: sum(r["tokens"] - batch - r["verify"] for r in runs[arm]) for arm in runs},
            "ratio_median": round(statistics.median(ratios), 4), "ratios": [round(r, 4) for r in ratios],
            "same_outputs_rounds": sum(s["digest"] == f["digest"] for s, f in zip(stock, fused))}


def run_tree(out: str, tree: tuple, target: str, drafter: str, batches: list[int], modes: list[str],
             rounds: int, new_tokens: int, smoke: bool, switches: dict, records: dict, saved) -> None:
    """Fills ``records`` (``results``, and ``control`` when ``switches`` has the third arm) cell by
    cell, calling ``saved()`` after each (a run cut short keeps its cells); ``switches``: each arm's
    ENV_SWITCH value."""
    context = multiprocessing.get_context("spawn")
    options = engine_options(tree, batches, smoke)
    name = "-".join(map(str, tree))
    engines = {}
    for arm, switch in switches.items():
        parent, child = context.Pipe()
        log_path = os.path.join(out, "logs", f"{name}-{arm}.log")
        process = context.Process(target=host, args=(child, target, drafter, options, batches, modes,
                                                     switch, log_path))
        process.start()
        engines[arm] = (parent, process, log_path)
    started = time.monotonic()
    for arm, (parent, process, log_path) in engines.items():
        if not parent.poll(max(1.0, READY_TIMEOUT_S - (time.monotonic() - started))):
            for _, other, _ in engines.values():
                other.kill()
            raise SystemExit(f"tree {name}: the {arm} engine did not start; see {log_path}")
        assert parent.recv() == "ready"
    header = dict(tree=list(tree), engine_options=options, start_s=round(time.monotonic() - started, 1),
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    for record in records.values():
        record.update(header, cells=[])
    print(f"tree {name}: engines ready in {header['start_s']} s", flush=True)
    arms = list(switches)
    for batch in batches:
        for mode in modes:
            runs = {arm: [] for arm in arms}
            for round_ in range(rounds):
                shift = round_ % len(arms)  # each arm goes first equally often over len(arms) rounds
                for arm in arms[shift:] + arms[:shift]:
                    engines[arm][0].send((batch, mode, new_tokens))
                    runs[arm].append(engines[arm][0].recv())
            cell = cell_record(batch, mode, new_tokens, runs["stock"], runs["fused"])
            records["results"]["cells"].append(cell)
            line = f"ratio {cell['ratio_median']}"
            if "control" in records:
                control = cell_record(batch, mode, new_tokens, runs["stock"], runs[CONTROL_ARM])
                records["control"]["cells"].append(control)
                line += f", A/A {control['ratio_median']}"
            saved()
            print(f"tree {name} batch {batch} {mode}: {cell['tok_s_median']} tok/s, {line}, "
                  f"ms/step {cell['ms_per_step_median']}, accept {cell['accept_length']}", flush=True)
    for arm, (parent, process, log_path) in engines.items():
        parent.send(None)
        process.join(timeout=60)
        if process.is_alive():
            process.kill()
        with open(log_path, errors="replace") as handle:
            shown = list(dict.fromkeys(line.strip() for line in handle
                                       if ("sglang-eagle-ext:" in line and "verif" in line)
                                       or line.startswith("zipf_target:")))
        if arm != CONTROL_ARM:
            records["results"].setdefault("plugin_log", {})[arm] = shown
        if "control" in records and arm != "fused":
            records["control"].setdefault("plugin_log", {})["fused" if arm == CONTROL_ARM else arm] = shown
    saved()


def driver(device: str) -> str | None:
    if device != "cuda":
        return None
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    return subprocess.run(query, capture_output=True, text=True, check=True).stdout.split()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--trees", default=",".join(str(i) for i in range(len(TREES))),
                        help="indices into verify_workload.TREES")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--rounds", type=int, default=8,
                        help="a multiple of the arm count: each arm goes first equally often")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny target: check the plumbing")
    parser.add_argument("--control", action="store_true",
                        help="A/A: a third engine, stock again, in the same rounds; its ratios into control.json")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size of every engine")
    args = parser.parse_args()
    global TP_SIZE
    TP_SIZE = args.tp
    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    if args.smoke:
        from sglang_eagle_ext.sglang.compat import cpu

        cpu.install()
        os.environ.update(cpu.process_environment(dict(os.environ)))
        target_config, draft_vocab = SMOKE["target"], SMOKE["draft_vocab"]
        trees, batches, modes = SMOKE["trees"], SMOKE["batches"], SMOKE["modes"]
        rounds, new_tokens = SMOKE["rounds"], SMOKE["new_tokens"]
    else:
        target_config, draft_vocab = LLAMA_31_8B, DRAFT_VOCAB
        trees = [TREES[int(i)] for i in args.trees.split(",")]
        batches = [int(b) for b in args.batches.split(",")]
        modes, rounds, new_tokens = list(MODES), args.rounds, args.new_tokens
    register_plugin(out)
    device = "cpu" if args.smoke else "cuda"
    target, drafter = build_models(out, target_config, draft_vocab, device)

    import sglang
    import torch

    switches = {**ARMS, CONTROL_ARM: ARMS["stock"]} if args.control else ARMS
    # the filters share a temperature: their profiles' statistics are computed once per temperature
    stats = {temperature: profile_stats(target_config["hidden_size"], target_config["vocab_size"], SEED, temperature,
                                        device) for temperature in {t for t, _, _ in FILTERS.values()}}
    paths = {"results": os.path.join(out, "results.json")}
    if args.control:
        paths["control"] = os.path.join(out, "control.json")
    files = {kind: json.load(open(path)) if os.path.exists(path) else {"trees": {}} for kind, path in paths.items()}
    for kind, data in files.items():
        data.update(sglang=sglang.__version__, torch=torch.__version__, commit=os.environ.get("E2E_COMMIT", "unknown"),
                    tp_size=TP_SIZE,
                    device=torch.cuda.get_device_name(0) if device == "cuda" else "cpu", driver=driver(device),
                    flashinfer_renorm=flashinfer_renorm_requested(),
                    switches=switches if kind == "results" else {"stock": "0", "fused": "0"},
                    target={k: target_config[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size",
                                                           "vocab_size")},
                    draft_vocab=draft_vocab, prompt_tokens=PROMPT_TOKENS,
                    distributions={label: stats[temperature] for label, (temperature, _, _) in FILTERS.items()})

    def saved() -> None:
        for kind, path in paths.items():
            save_json(path, files[kind])

    for tree in trees:
        key = "/".join(map(str, tree))
        records = {kind: data["trees"].setdefault(key, {}) for kind, data in files.items()}
        run_tree(out, tree, target, drafter, batches, modes, rounds, new_tokens, args.smoke, switches, records, saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
