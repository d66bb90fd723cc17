"""Demonstrate EAGLE-3 in stock SGLang end to end, on any machine (CPU or GPU).

Builds (or reuses) a tiny target (trained for seconds on a token process, see
:mod:`sglang_eagle_ext.demo.tiny_target`) with its own tokenizer and a 2-layer drafter distilled from
it, under a cache directory (nothing is downloaded), starts SGLang with this package's plugin,
generates greedily, and prints the output, the acceptance length and whether the output equals
plain greedy decoding of the target (speculative decoding must be lossless). A GPU is used when
there is one; on CPU, SGLang runs its Triton kernels in Triton's interpreter.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

from sglang_eagle_ext.cli.serve_cmd import INSTALL_HINT, cache_dir

PROMPTS = ["The old sailor counts", "A curious child waits for"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", default=None,
                        help="where the tiny models are built (default: <user cache>/demo)")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--num-steps", type=int, default=3)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--timeout", type=int, default=900, help="seconds for the SGLang run")


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def engine_child() -> None:
    """Runs in the SGLang subprocess: one engine, greedy generation, one RESULT line."""
    import sglang

    target, drafter, device, steps, new_tokens = sys.argv[1:6]
    options = dict(disable_cuda_graph=True, dtype="float32", max_total_tokens=4096,
                   context_length=512, log_level="error")
    if device == "cpu":
        options.update(device="cpu", attention_backend="triton", sampling_backend="pytorch")
    engine = sglang.Engine(model_path=target, speculative_algorithm="EAGLE3",
                           speculative_draft_model_path=drafter,
                           speculative_num_steps=int(steps), speculative_eagle_topk=1,
                           speculative_num_draft_tokens=int(steps) + 1, **options)
    try:
        outputs = engine.generate(prompt=PROMPTS, sampling_params={
            "temperature": 0, "max_new_tokens": int(new_tokens), "ignore_eos": True})
    finally:
        engine.shutdown()
    print("RESULT " + json.dumps([{"text": o["text"], "output_ids": o["output_ids"],
                                   "completion_tokens": o["meta_info"]["completion_tokens"],
                                   "spec_verify_ct": o["meta_info"].get("spec_verify_ct")}
                                  for o in outputs]), flush=True)


def plain_greedy(target: str, new_tokens: int) -> list[list[int]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    outputs = []
    for prompt in PROMPTS:
        ids = torch.tensor([tokenizer(prompt).input_ids])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 do_sample=False, pad_token_id=tokenizer.pad_token_id)
        outputs.append(out[0, ids.shape[1]:].tolist())
    return outputs


def run(args) -> int:
    from sglang_eagle_ext.sglang.compat import cpu as cpu_shims

    cpu_shims.install()
    import torch

    from sglang_eagle_ext.demo.distill import DistillSettings, build_tiny_drafter
    from sglang_eagle_ext.demo.tiny_target import build_tiny_target

    if importlib.util.find_spec("sglang") is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    workdir = os.path.abspath(args.workdir or os.path.join(cache_dir(), "demo"))
    say(f"device: {device}; models under {workdir}")
    say("building (or reusing) the tiny target: 8-layer Llama, 512-token BPE tokenizer, "
        "trained on a token process that looks two tokens back (first run only, about 15 s "
        "on CPU) ...")
    target = build_tiny_target(os.path.join(workdir, "target"))
    say(f"target ready: {target}")
    say("distilling (or reusing) a 2-layer EAGLE-3 drafter from the target's own greedy text "
        "(first run only, about 40 s on CPU) ...")
    last_report = [0.0]

    def progress(step, total, loss):
        if time.monotonic() - last_report[0] > 10 or step == total:
            last_report[0] = time.monotonic()
            say(f"  training step {step}/{total}, loss {loss:.3f}")

    drafter = build_tiny_drafter(os.path.join(workdir, "drafter-2layer"), target,
                                 DistillSettings(num_layers=2), progress)
    say(f"drafter ready: {drafter}")
    env = dict(os.environ)
    if device == "cpu":
        site = cpu_shims.SITE_DIR
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [site, env.get("PYTHONPATH")]))
        env["TRITON_INTERPRET"] = "1"
        say("starting SGLang on CPU (Triton interpreter; about a minute) ...")
    else:
        say("starting SGLang on the GPU ...")
    child = [sys.executable, "-c", "from sglang_eagle_ext.demo.run import engine_child; "
             "engine_child()", target, drafter, device, str(args.num_steps), str(args.max_new_tokens)]
    try:
        done = subprocess.run(child, capture_output=True, text=True, env=env, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        say(f"SGLang did not finish within {args.timeout} s")
        return 1
    lines = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stderr[-4000:])
        say(f"SGLang failed (exit code {done.returncode}); its log tail is above")
        return 1
    results = json.loads(lines[0][len("RESULT "):])
    say("plain greedy decoding of the target with HF transformers, for the check ...")
    expected = plain_greedy(target, args.max_new_tokens)
    tokens = sum(r["completion_tokens"] for r in results)
    verifies = sum(r["spec_verify_ct"] or 0 for r in results)
    same = [r["output_ids"] == e for r, e in zip(results, expected)]
    for prompt, result in zip(PROMPTS, results):
        print(f"\nprompt: {prompt!r}\noutput: {result['text']!r}")
    print(f"\nacceptance length: {tokens / max(verifies, 1):.2f} tokens per verify step "
          f"({tokens} tokens, {verifies} verify steps, {args.num_steps} draft steps, chain)")
    print(f"output equals plain greedy decoding: {'yes' if all(same) else 'NO'}")
    return 0 if all(same) else 1
