"""The target answers ShareGPT's first turns itself: the drafters' training data (EAGLE-3's recipe).

A drafter learns to predict the target's own next tokens, so the EAGLE-3 recipes (SpecForge's
``regenerate_train_data``, speculators' data generation) replace the dataset's answers with the
target's. Here SGLang serves the target (plain decoding), each prompt formatted by its chat template;
answers are sampled at temperature 0.7, top-p 0.9 (both modes the benchmarks measure stay in the
training distribution) and cut at ``--max-new-tokens``. Output: JSON lines ``{"id", "conversations":
[{"role": "user", ...}, {"role": "assistant", ...}], "finish_reason"}``, the format both trainers'
recipes read (``train_specforge.py``, ``train_speculators.py``); a record is written for each prompt
that got a non-empty answer.

usage (repository root; SGLang and this package installed)::

    python3 benchmarks/real_target/regenerate.py --target DIR --prompts sharegpt.jsonl --out data.jsonl \
        [--count 3000] [--max-new-tokens 512]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engines  # noqa: E402

SAMPLING = {"temperature": 0.7, "top_p": 0.9}
SEED = 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--prompts", required=True, help="JSON lines {id, prompt} (data.py sharegpt)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--max-running", type=int, default=256, help="requests decoded at once")
    args = parser.parse_args()

    where = engines.prepare_process()
    from transformers import AutoTokenizer

    with open(args.prompts, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()][:args.count]
    tokenizer = AutoTokenizer.from_pretrained(args.target)
    ids = engines.chat_ids(tokenizer, [row["prompt"] for row in rows])
    started = time.perf_counter()
    engine = engines.start(args.target, where, graph_bs=(args.max_running,), max_running=args.max_running,
                           context_length=max(len(i) for i in ids) + args.max_new_tokens + 8,
                           random_seed=SEED)
    loaded = time.perf_counter()
    outputs = engine.generate(input_ids=ids, sampling_params={**SAMPLING, "max_new_tokens": args.max_new_tokens})
    finished = time.perf_counter()
    engine.shutdown()
    kept, tokens = 0, 0
    with open(args.out + ".tmp", "w", encoding="utf-8") as handle:
        for row, output in zip(rows, outputs):
            answer = output["text"].strip()
            if not answer:
                continue
            kept += 1
            tokens += output["meta_info"]["completion_tokens"]
            handle.write(json.dumps({"id": row["id"], "conversations": [
                {"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": answer}],
                "finish_reason": (output["meta_info"].get("finish_reason") or {}).get("type")},
                ensure_ascii=False) + "\n")
    os.replace(args.out + ".tmp", args.out)
    summary = {"prompts": len(rows), "kept": kept, "answer_tokens": tokens, "max_new_tokens": args.max_new_tokens,
               "sampling": SAMPLING, "engine_start_s": round(loaded - started, 1),
               "generate_s": round(finished - loaded, 1), "device": where}
    with open(args.out + ".summary.json", "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=1)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
