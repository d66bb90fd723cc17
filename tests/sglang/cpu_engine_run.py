"""Child process of the CPU server test: one SGLang engine on CPU, greedy outputs as JSON.

    python cpu_engine_run.py TARGET [DRAFTER]   (prints one line: RESULT <json>)

Run with ``sglang_eagle_ext/cpu_site`` on PYTHONPATH and ``TRITON_INTERPRET=1``: the EAGLE
worker's kernels then run in Triton's interpreter (SGLang's XPU path), attention on SGLang's
Triton backend.
"""

import json
import sys

PROMPTS = ["the quick brown fox", "once upon a time there"]
NEW_TOKENS = 12


def main() -> None:
    import sglang

    target = sys.argv[1]
    spec = {}
    if len(sys.argv) > 2:
        spec = dict(speculative_algorithm="EAGLE3", speculative_draft_model_path=sys.argv[2],
                    speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    engine = sglang.Engine(model_path=target, device="cpu", attention_backend="triton",
                           sampling_backend="pytorch", disable_cuda_graph=True, dtype="float32",
                           max_total_tokens=2048, context_length=256, log_level="error", **spec)
    outputs = engine.generate(prompt=PROMPTS, sampling_params={
        "temperature": 0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True})
    engine.shutdown()
    print("RESULT " + json.dumps([{"output_ids": o["output_ids"], "meta_info": {
        k: o["meta_info"].get(k) for k in ("completion_tokens", "spec_verify_ct")}} for o in outputs]))


if __name__ == "__main__":
    main()
