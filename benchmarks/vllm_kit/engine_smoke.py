"""One vLLM engine on the GPU machine after `install_vllm.sh`: the real target's geometry with dummy
weights (its config and tokenizer only, a few MB to carry), eager mode, plain greedy decoding of a
few chat prompts. Shows the offline kit runs a whole engine (scheduler, worker, FA3 attention,
sampler), not only its imports. Prints the engine's start time and output tokens/s.

usage (GPU machine, `source /tmp/site_vllm/env_vllm.sh` first):
    python3 benchmarks/vllm_kit/engine_smoke.py MODEL_DIR
"""

from __future__ import annotations

import sys
import time


def main(model_dir: str) -> int:
    from vllm import LLM, SamplingParams

    started = time.perf_counter()
    llm = LLM(model=model_dir, load_format="dummy", dtype="bfloat16", enforce_eager=True, max_model_len=1024,
              gpu_memory_utilization=0.3, seed=0)
    print(f"engine started in {time.perf_counter() - started:.1f} s", flush=True)
    prompts = [[{"role": "user", "content": f"Question {i}: what is {i} plus {i}?"}] for i in range(16)]
    params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    started = time.perf_counter()
    outputs = llm.chat(prompts, params)
    seconds = time.perf_counter() - started
    tokens = sum(len(output.outputs[0].token_ids) for output in outputs)
    print(f"{len(outputs)} requests, {tokens} tokens in {seconds:.2f} s: {tokens / seconds:.0f} tok/s (eager, "
          "dummy weights)", flush=True)
    return 0 if tokens == 16 * 64 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
