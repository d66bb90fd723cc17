"""SGLang with this plugin against vLLM on the same GPU, target, drafters and cells (issue 38).

Reads one ``serve_bench.py`` run and one ``vllm_bench.py`` run made on the same machine, one after the
other, side by side on two GPUs, or on one GPU taking turns (``turns.py``) (both committed by ``table.py import``:
token ids dropped, each cell's best round kept). Every
figure compares like with like: each engine's EAGLE-3 arms against its own plain decoding, and the
engines against each other at the same cell.

``markdown SGLANG VLLM`` prints the full comparison (``benchmarks/results/real_target/vs_vllm.md``);
:func:`headline` is the README's table (``scripts/readme_numbers.py``).

Definitions, per cell (MT-bench first turns, ``new_tokens`` each, batch 1 / 16 / 64, greedy or T 0.7):

* output tok/s: the median of the timed rounds (every round is in the files);
* acceptance length: tokens per verify step of a request. SGLang's is completion tokens / verify steps
  (``meta_info``), vLLM's 1 + accepted / drafts (its spec-decode counters); SGLang's counts the prefill's
  token too, so it reads about 1 / (verify steps per request) higher, under 0.02 at 128 tokens;
* time to first token: each wave sent alone with one new token, wall time (``serve_bench.first_token_requests``,
  the same in both engines);
* speedup: output tok/s over the same engine's plain decoding in the same cell;
* SGLang / vLLM: the ratio of the two engines' output tok/s, each at its own best shape for that cell.

usage::

    cd benchmarks/results/real_target && python3 ../../real_target/vs_vllm.py markdown \
        serve_vs-vllm_h100_fa3_sglang-0.5.23.json vllm_h100_fa3-run_vllm-0.33.0.json > vs_vllm.md
    cd benchmarks/results/real_target && python3 ../../real_target/vs_vllm.py markdown \
        serve_vs-vllm_8b-geometry_h100_fa3_sglang-0.5.23.json vllm_8b-geometry_h100_fa3-run_vllm-0.33.0.json \
        > vs_vllm_8b.md

(``vs_vllm_triton.md`` and ``vs_vllm_8b_triton.md``: the earlier pair of runs each, where SGLang ran Triton
attention, from ``serve_vs-vllm_h100_sglang-0.5.23.json`` / ``vllm_h100_vllm-0.33.0.json`` and the
``_8b-geometry`` pair.)
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Callable

from table import DRAFTER_NAMES, NOISE_FLOOR, attention_backend, lossless, spread

MODES = {"greedy": "greedy", "sampled": "T 0.7, top-p 0.9"}
POLICY_NOTE = (" `adaptive` and `stock-adaptive` choose the chain depth per step under SGLang's "
               "`--speculative-adaptive` (this package's cost policy over off / 1 / 3 / 5, stock's over its "
               "defaults), launched at the shape shown; they count as shapes of SGLang's where the best is taken.")
def engine_label(results: dict) -> str:
    return f"vLLM {results['vllm']}" if results.get("engine") == "vllm" else f"SGLang {results['sglang']} + this plugin"


def arms_of(results: dict, drafter: str) -> dict:
    """The EAGLE-3 arms of ``drafter`` that measured cells: name -> arm (stock SGLang's arms left out)."""
    return {name: arm for name, arm in results["arms"].items()
            if name.startswith(f"{drafter}/") and name.split("/")[-1] in ("plugin", "vllm") and "cells" in arm}


def shape_of(name: str, arm: dict) -> str:
    """Arm ``name``'s shape as both engines' rows write it, its kind and steps/top-k/draft tokens ("chain
    1/1/2"): serve_bench's shape names carry a depth to keep arm names apart ("chain1"), which the numbers say."""
    label = arm.get("shape") or name
    kind, _, numbers = label.partition(" ")
    return f"{kind.rstrip('0123456789')} {numbers}" if numbers else label


def best_arm(results: dict, drafter: str, key: str) -> tuple[str, dict] | None:
    """The arm with the highest median output tok/s in cell ``key``: (its shape, the cell)."""
    measured = [(shape_of(name, arm), arm["cells"][key]) for name, arm in arms_of(results, drafter).items()
                if key in arm["cells"]]
    return max(measured, key=lambda pair: pair[1]["tok_s_median"], default=None)


def head_to_head(sglang: dict, vllm: dict, key: str) -> list[tuple[str, tuple | None, tuple | None]]:
    """Cell ``key`` in both engines, row by row: plain decoding, then each drafter both served, each engine
    at its best shape: (row label, SGLang's (shape, cell), vLLM's (shape, cell)); None where not measured."""
    def plain(results: dict) -> tuple[str, dict] | None:
        cell = results["arms"]["plain"]["cells"].get(key)
        return None if cell is None else ("-", cell)

    return [("plain decoding", plain(sglang), plain(vllm))] + [
        (DRAFTER_NAMES.get(drafter, drafter), best_arm(sglang, drafter, key), best_arm(vllm, drafter, key))
        for drafter in shared_drafters(sglang, vllm)]


def chain_length(shape: str | None) -> int | None:
    """Draft tokens of a chain shape label ("chain 3/1/4" or "chain1 1/1/2": steps/top-k/tokens), else None (a
    tree's, or an arm that recorded no shape)."""
    if not shape:
        return None
    name, numbers = shape.split(" ", 1)
    steps, topk, _ = (int(n) for n in numbers.split("/"))
    return steps if name.startswith("chain") and topk == 1 else None


def _cell_text(cell: dict | None, plain: dict | None) -> str:
    if cell is None:
        return "-"
    text = f"{cell['tok_s_median']:,.0f}"
    if plain is not None:
        text += f" ({cell['tok_s_median'] / plain['tok_s_median']:.2f}x"
        text += f", {cell['accept_length']:.2f})" if "accept_length" in cell else ")"
    return text


def _ttft(cell: dict | None) -> str:
    return "-" if cell is None or "ttft_ms_median" not in cell else f"{cell['ttft_ms_median']:.1f}"


def same_world(sglang: dict, vllm: dict) -> list[str]:
    """What differs between the two runs' worlds that must not (device, target, prompts, cells)."""
    problems = [f"workload: not recorded in the {engine_label(run)} run (serve_bench's and vllm_bench's --workload)"
                for run in (sglang, vllm) if "workload" not in run]
    for key in ("device", "target", "tokenizer", "prompts", "new_tokens", "single", "near_tie_nats", "workload"):
        if sglang.get(key) != vllm.get(key):
            problems.append(f"{key}: SGLang run {sglang.get(key)!r}, vLLM run {vllm.get(key)!r}")
    theirs = vllm.get("drafter_files", {})
    for name, ours in sglang.get("drafter_files", {}).items():
        if name in theirs and ours != theirs[name]:
            differ = sorted(entry for entry in set(ours) | set(theirs[name])
                            if ours.get(entry) != theirs[name].get(entry))
            problems.append(f"drafter {name}: its files differ between the runs ({', '.join(differ)}; drafter_files)")
    if "host" in sglang and "host" in vllm and sglang["host"] != vllm["host"]:
        problems.append(f"host: SGLang run {sglang['host']!r}, vLLM run {vllm['host']!r}")
    if not shared_batches(sglang, vllm):
        problems.append(f"batches: none in both (SGLang run {sglang['batches']}, vLLM run {vllm['batches']})")
    return problems


def placement(sglang: dict, vllm: dict) -> str:
    """Where the two runs ran, as ``engines.run_environment`` recorded it; runs from before it recorded their
    GPUs ran one after the other. Two GPUs say nothing of the time: whether the engines ran at once, sharing
    the host's CPU, is the runs' notes' to say. Runs whose arms record the turns they waited for (``--turns``,
    ``turns.py``) shared their GPU, each measuring alone."""
    if "gpus" in sglang and "gpus" in vllm and sglang["gpus"] != vllm["gpus"]:
        return f"on two GPUs of one machine (SGLang on GPU {sglang['gpus']}, vLLM on GPU {vllm['gpus']})"
    if all(any("turn_waits_s" in arm for arm in run["arms"].values()) for run in (sglang, vllm)):
        return "both engines on one GPU taking turns (an engine starts beside the other's start and measures alone)"
    return "one after the other on the same machine"


def shared_drafters(sglang: dict, vllm: dict) -> list[str]:
    """The drafters both runs served, in the SGLang run's order: the only ones compared."""
    return [drafter for drafter in sglang["drafters"] if drafter in vllm["drafters"]]


def shared_batches(sglang: dict, vllm: dict) -> list[int]:
    """The batch sizes both runs measured, the only ones compared (one run may also serve another page:
    ``serve_bench.py`` measures batch 4 and 32 as well for the adaptive-shape pages)."""
    return [batch for batch in sglang["batches"] if batch in vllm["batches"]]


def markdown(sglang: dict, vllm: dict) -> str:
    problems = same_world(sglang, vllm)
    if problems:
        raise ValueError("the two runs are not side by side: " + "; ".join(problems))
    batches = shared_batches(sglang, vllm)
    drafters = shared_drafters(sglang, vllm)
    larger = [str(b) for b in batches if b > 1]
    cells = [f"batch 1: {sglang['single']} prompts one at a time"] if 1 in batches else []
    if larger:
        named = f"{', '.join(larger[:-1])} and {larger[-1]}" if len(larger) > 1 else larger[0]
        cells.append(f"batch {named}: 64 requests in waves of that size")
    lines = [f"{sglang['device']}, {placement(sglang, vllm)}: {engine_label(sglang)} "
             f"({attention_backend(sglang)} attention, torch {sglang['torch']}, commit {sglang['commit']}) and "
             f"{engine_label(vllm)} (torch {vllm['torch']}), {sglang['date']}. {sglang['workload']}, "
             f"{sglang['new_tokens']} new tokens each (ignore_eos); {', '.join(cells)}; the median of "
             f"{sglang['rounds']} (SGLang) and {vllm['rounds']} (vLLM) timed rounds after a warm-up."
             + POLICY_NOTE * any("adaptive" in (arm.get("shape") or "") for arm in sglang["arms"].values()), ""]
    runs = (sglang, vllm)
    for mode, mode_label in MODES.items():
        lines += [f"### {mode_label}", "",
                  "Output tok/s (speedup over the same engine's plain decoding, acceptance length)", ""]
        lines += _arm_table(runs, drafters, batches, mode, _cell_text, plain_text=lambda cell: _cell_text(cell, None))
        lines += ["", "SGLang + this plugin / vLLM, output tok/s, each engine at its best shape for the cell:", "",
                  "| drafter | " + " | ".join(f"batch {b}" for b in batches) + " |", "|" + "---|" * (1 + len(batches))]
        columns = [head_to_head(sglang, vllm, f"batch{b}/{mode}") for b in batches]
        for row in zip(*columns):
            lines.append(f"| {row[0][0]} | " + " | ".join(
                "-" if ours is None or theirs is None else _ratio(ours[1], theirs[1])
                + ("" if ours[0] == "-" else f" ({ours[0]} / {theirs[0]})") for _, ours, theirs in row) + " |")
        lines.append("")
    lines += ["### Time to first token, ms (each wave alone, one new token; greedy)", ""]
    lines += _arm_table(runs, drafters, batches, "greedy", lambda cell, _: _ttft(cell), plain_text=_ttft)
    lines += ["", "### Acceptance parity (the same drafter and chain length in both engines)", "",
              "| drafter | mode | chain | " + " | ".join(f"batch {b}: SGLang / vLLM" for b in batches) + " |",
              "|" + "---|" * (3 + len(batches))]
    for drafter in drafters:
        for mode in MODES:
            for k, ours, theirs in parity_pairs(sglang, vllm, drafter):
                lines.append(f"| {DRAFTER_NAMES.get(drafter, drafter)} | {mode} | {k} | " + " | ".join(
                    _parity(ours["cells"].get(f"batch{b}/{mode}"), theirs["cells"].get(f"batch{b}/{mode}"))
                    for b in batches) + " |")
    lines += ["", "### Cost of a speculative step, in plain decoding steps (plain tok/s x acceptance / EAGLE-3 tok/s; "
              "greedy)", ""]
    lines += _arm_table(runs, drafters, batches, "greedy", _step_cost)
    lines += ["", "### Greedy outputs against the same engine's plain decoding (exact + near-tie / requests)", ""]
    lines += _arm_table(runs, drafters, batches, "greedy", lambda cell, _: lossless(cell or {}) or "-")
    lines += ["", "A/A spread, plain decoding's timed rounds in one engine, (fastest - slowest) / median:", ""]
    for results in (sglang, vllm):
        plain = results["arms"]["plain"]["cells"]
        lines.append(f"- {engine_label(results)}: " + "; ".join(
            f"batch {b} {mode} {spread(plain[f'batch{b}/{mode}']['tok_s']):.0%}" for b in batches for mode in MODES
            if f"batch{b}/{mode}" in plain))
    lines.append("")
    notes = [note for results in (sglang, vllm) for note in results.get("notes", [])]
    lines += [f"Note: {note}" for note in dict.fromkeys(notes)]  # a note both runs carry, once
    return "\n".join(lines) + "\n"


def _arm_table(runs: tuple[dict, dict], drafters: list[str], batches: list[int], mode: str,
               text: Callable[[dict | None, dict | None], str],
               plain_text: Callable[[dict | None], str] | None = None) -> list[str]:
    """A table with a row per engine and EAGLE-3 arm (after the engine's plain decoding, given
    ``plain_text``): each batch size's column is ``text(the arm's cell, plain decoding's cell)`` of ``mode``."""
    lines = ["| engine | drafter | shape | " + " | ".join(f"batch {b}" for b in batches) + " |",
             "|" + "---|" * (3 + len(batches))]
    for results in runs:
        plain = results["arms"]["plain"]["cells"]
        if plain_text is not None:
            lines.append(f"| {engine_label(results)} | plain decoding | - | " + " | ".join(
                plain_text(plain.get(f"batch{b}/{mode}")) for b in batches) + " |")
        for drafter in drafters:
            for name, arm in arms_of(results, drafter).items():
                lines.append(f"| {engine_label(results)} | {DRAFTER_NAMES.get(drafter, drafter)} | "
                             f"{shape_of(name, arm)} | " + " | ".join(
                                 text(arm["cells"].get(f"batch{b}/{mode}"), plain.get(f"batch{b}/{mode}"))
                                 for b in batches) + " |")
    return lines


def parity_pairs(sglang: dict, vllm: dict, drafter: str) -> list[tuple[int, dict, dict]]:
    """(chain length, SGLang arm, vLLM arm) for each chain length both engines ran with ``drafter``."""
    theirs = {chain_length(arm.get("shape")): arm for arm in arms_of(vllm, drafter).values()}
    pairs = []
    for arm in arms_of(sglang, drafter).values():
        k = chain_length(arm.get("shape"))
        if k is not None and k in theirs:
            pairs.append((k, arm, theirs[k]))
    return sorted(pairs, key=lambda pair: pair[0])


def step_cost(cell: dict | None, plain: dict | None) -> float | None:
    """A speculative step's time in plain decoding steps: it yields ``accept_length`` tokens per request in
    the time plain decoding yields (plain tok/s / speculative tok/s) x ``accept_length``."""
    if cell is None or plain is None or "accept_length" not in cell:
        return None
    return plain["tok_s_median"] * cell["accept_length"] / cell["tok_s_median"]


def _step_cost(cell: dict | None, plain: dict | None) -> str:
    cost = step_cost(cell, plain)
    return "-" if cost is None else f"{cost:.2f}"


def _ratio(ours: dict | None, theirs: dict | None) -> str:
    if ours is None or theirs is None:
        return "-"
    return f"{ours['tok_s_median'] / theirs['tok_s_median']:.2f}"


def accept_pair(ours: dict | None, theirs: dict | None) -> tuple[float, float] | None:
    """Both engines' acceptance length in one cell, where both measured one."""
    if ours is None or theirs is None or "accept_length" not in ours or "accept_length" not in theirs:
        return None
    return ours["accept_length"], theirs["accept_length"]


def _parity(ours: dict | None, theirs: dict | None) -> str:
    pair = accept_pair(ours, theirs)
    return "-" if pair is None else f"{pair[0]:.2f} / {pair[1]:.2f}"


def headline(sglang: dict, vllm: dict, sources: tuple[str, str]) -> str:
    """Per drafter and mode, per batch size: each engine's best output tok/s (its shape) and SGLang / vLLM;
    plain decoding's the same way."""
    batches = shared_batches(sglang, vllm)
    lines = ["| drafter | mode | " + " | ".join(f"batch {b}: SGLang+plugin / vLLM tok/s (ratio)" for b in batches)
             + " |", "|" + "---|" * (2 + len(batches))]
    for mode, mode_label in (("greedy", "greedy"), ("sampled", "T 0.7")):
        columns = [head_to_head(sglang, vllm, f"batch{b}/{mode}") for b in batches]
        for row in zip(*columns):
            lines.append(f"| {row[0][0]} | {mode_label} | " + " | ".join(
                "-" if ours is None or theirs is None else
                f"{ours[1]['tok_s_median']:,.0f} / {theirs[1]['tok_s_median']:,.0f} ({_ratio(ours[1], theirs[1])}"
                + (")" if ours[0] == "-" else f"; {ours[0]} / {theirs[0]})") for _, ours, theirs in row) + " |")
    spreads = [spread(results["arms"]["plain"]["cells"][f"batch{b}/{mode}"]["tok_s"])
               for results in (sglang, vllm) for b in batches for mode in MODES]
    lines += ["", f"Median output tok/s of {sglang['rounds']} timed rounds; each engine's best EAGLE-3 shape per cell "
              f"(steps/top-k/draft tokens; vLLM drafts chains only). A/A spread of plain decoding's rounds: median "
              f"{statistics.median(spreads):.0%}, up to {max(spreads):.0%}. {sglang['workload']}; "
              f"{sglang['device']}, {engine_label(sglang)} ({attention_backend(sglang)} attention, "
              f"commit {sglang['commit']}) and "
              f"{engine_label(vllm)}, "
              f"torch {sglang['torch']}, {sglang['date']}, `{sources[0]}`, `{sources[1]}`."]
    return "\n".join(lines)


def where_faster(sglang: dict, vllm: dict, page: str = "benchmarks/results/real_target/vs_vllm.md") -> str:
    """Which engine is ahead where, in words, over :func:`headline`'s cells; a lead counts as beyond noise only
    past the larger A/A spread of the two engines' plain decoding in that cell (one engine timed again), and
    never under ``NOISE_FLOOR``."""
    ahead = {"vLLM": [], "SGLang + this plugin": []}
    gains = {"SGLang + this plugin": [], "vLLM": []}  # best shape's speedup over the engine's own plain decoding
    cells = 0
    for mode, mode_label in (("greedy", "greedy"), ("sampled", "T 0.7")):
        for b in shared_batches(sglang, vllm):
            key = f"batch{b}/{mode}"
            rows = head_to_head(sglang, vllm, key)
            (_, (_, our_plain), (_, their_plain)), drafted = rows[0], rows[1:]
            noise = max([NOISE_FLOOR] + [spread(plain["tok_s"]) for plain in (our_plain, their_plain)])
            for label, ours, theirs in rows:
                if ours is None or theirs is None:
                    continue
                cells += 1
                ratio = ours[1]["tok_s_median"] / theirs[1]["tok_s_median"]
                if ratio != 1:  # a tie leads nowhere
                    ahead["vLLM" if ratio < 1 else "SGLang + this plugin"].append(
                        (f"{label.split(',')[0]} {mode_label} batch {b} ({ratio:.2f})", abs(ratio - 1) > noise))
            for _, ours, theirs in drafted:
                if ours is not None and theirs is not None:
                    gains["SGLang + this plugin"].append(ours[1]["tok_s_median"] / our_plain["tok_s_median"])
                    gains["vLLM"].append(theirs[1]["tok_s_median"] / their_plain["tok_s_median"])
    parts = []
    for side, won in ahead.items():  # every cell where vLLM leads; where this plugin leads, those past the noise
        beyond = [text for text, past in won if past]
        listed = won if side == "vLLM" else [(text, True) for text in beyond]
        parts.append(f"**{side} ahead in {len(won)} of {cells}**, {len(beyond) or 'none'} beyond the spread"
                     + (": " + "; ".join(text for text, _ in listed) if listed else ""))
    speedups = "; ".join(f"{side} {min(values):.2f}-{max(values):.2f}x" for side, values in gains.items())
    return ("SGLang + this plugin / vLLM in the cells above, a lead beyond noise only past the larger A/A spread "
            f"of the two engines in that cell (at least {NOISE_FLOOR:.0%}): " + ". ".join(parts) + ". Over its own "
            f"plain decoding, each engine's best EAGLE-3 shape: {speedups} (`{page}`: a speculative step's cost in "
            "plain steps, time to first token, acceptance parity).")


def parity_and_step_cost(sglang: dict, vllm: dict) -> str:
    """In words, over the page's cells: how far apart the two engines' acceptance lengths lie at equal chain
    length (greedy and sampled), and what a chain-1 step costs in plain decoding steps in each (greedy): the
    first says whether they read the drafters alike, the second why one engine's speculation pays where the
    other's does not."""
    batches = shared_batches(sglang, vllm)
    drafters = shared_drafters(sglang, vllm)
    gaps = []
    for drafter in drafters:
        for _, our_arm, their_arm in parity_pairs(sglang, vllm, drafter):
            for key in (f"batch{b}/{mode}" for b in batches for mode in MODES):
                pair = accept_pair(our_arm["cells"].get(key), their_arm["cells"].get(key))
                if pair is not None:
                    gaps.append(abs(pair[0] - pair[1]))
    words = []
    if gaps:
        words.append(f"At equal chain length the two engines' acceptance lengths lie within {max(gaps):.2f} of each "
                     f"other in all {len(gaps)} cells (every drafter, greedy and T 0.7)")
    costs = {}
    for results in (sglang, vllm):
        plain = results["arms"]["plain"]["cells"]
        chain1 = [arm for drafter in drafters for arm in arms_of(results, drafter).values()
                  if chain_length(arm.get("shape")) == 1]
        found = [step_cost(arm["cells"].get(f"batch{b}/greedy"), plain.get(f"batch{b}/greedy"))
                 for arm in chain1 for b in batches]
        costs[engine_label(results)] = [cost for cost in found if cost is not None]
    if all(costs.values()):
        words.append("a chain-1 step costs " + " and ".join(
            f"{label} {min(values):.2f}-{max(values):.2f}" for label, values in costs.items())
            + " plain decoding steps (greedy)")
    return "; ".join(words) + "." if words else ""


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "markdown":
        runs = []
        for path in argv[1:]:
            with open(path, encoding="utf-8") as handle:
                runs.append(json.load(handle))
        print(markdown(*runs), end="")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
