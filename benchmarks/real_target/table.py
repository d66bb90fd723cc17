"""Tables of the real-target serving runs (``serve_bench.py``), and the committed copy of a run.

``import RAW [RAW ...] OUT`` writes a run's results without the generated token ids (kept as a digest per
cell: enough to see two runs agree, not megabytes of ids), the halves of a run taken side by side merged first
(``serve_bench.merged``); ``markdown RESULTS`` prints the full
table; :func:`headline` is the README's short table (``scripts/readme_numbers.py``).

usage::

    python3 benchmarks/real_target/table.py import /tmp/rt/serve/serve_bench.json \
        benchmarks/results/real_target/serve_h100_sglang-0.5.23.json
    python3 benchmarks/real_target/table.py markdown benchmarks/results/real_target/serve_h100_sglang-0.5.23.json \
        benchmarks/results/real_target/serve_wide_stock-edit_h100_sglang-0.5.23.json   # serve.md
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

DRAFTER_NAMES = {"specforge": "SpecForge 0.2.0, 1 layer", "speculators": "speculators 0.9.0, 2 layers",
                 "zipf": "zipf drafter, 1 layer"}
SIDES = {"plugin": "this plugin", "stock": "stock SGLang",
         "stock-edit": "stock SGLang, config.json rewritten as SGLang's flat format"}


def attention_backend(results: dict) -> str:
    """An SGLang run's attention backend as recorded (runs from before serve_bench recorded it ran Triton)."""
    return results.get("attention_backend", "triton")


def committed(raw: dict) -> dict:
    """``raw`` without token ids and log-probs; each greedy cell's outputs as a digest; each cell's
    best round (``tok_s_best``) and its speedup over plain decoding's best round."""
    result = {key: value for key, value in raw.items() if key != "arms"}
    result["arms"] = {}
    plain = raw["arms"].get("plain", {}).get("cells", {})
    for name, arm in raw["arms"].items():
        arm = dict(arm)
        cells = {}
        for key, cell in arm.get("cells", {}).items():
            kept = {k: v for k, v in cell.items() if k not in ("outputs", "top2")}
            if "outputs" in cell:
                kept["outputs_digest"] = hashlib.sha1(json.dumps(cell["outputs"]).encode()).hexdigest()[:12]
            kept["tok_s_best"] = max(cell["tok_s"])
            if name != "plain" and key in plain:
                kept["speedup_best"] = round(kept["tok_s_best"] / max(plain[key]["tok_s"]), 3)
            cells[key] = kept
        if cells:
            arm["cells"] = cells
        result["arms"][name] = arm
    return result


def _arm(results: dict, drafter: str, shape: str, side: str) -> dict | None:
    return results["arms"].get(f"{drafter}/{shape}/{side}")


def lossless(cell: dict) -> str:
    agreement = cell.get("vs_plain")
    if not agreement:
        return ""
    mismatches = len(agreement["mismatch"])
    text = f"{agreement['exact']}+{agreement['near_tie']}/{agreement['requests']}"
    return text + (f", {mismatches} MISMATCH" if mismatches else "")


def _cell(arm: dict | None, key: str) -> str:
    if arm is None:
        return "not run"
    if "failed" in arm:
        return "cannot serve" if arm["failed"].startswith("not tried") or "Error" in arm["failed"] else "failed"
    cell = arm.get("cells", {}).get(key)
    if cell is None:
        return "-"
    return f"{cell.get('speedup_best', 0):.2f}x ({cell.get('accept_length', 0):.2f})"


def markdown(results: dict) -> str:
    batches = results.get("batches", [1, 16, 64])
    shapes = sorted({arm["arm"].split("/")[1] for arm in results["arms"].values() if arm["arm"] != "plain"},
                    key=["chain1", "chain", "tree", "wide"].index)
    drafters = list(results["drafters"])
    plain = results["arms"]["plain"]["cells"]
    lines = [f"{results['device']}, SGLang {results['sglang']}, torch {results['torch']}, commit {results['commit']}, "
             f"{results['date']}; MT-bench first turns (chat template), {results['new_tokens']} new tokens each "
             f"(ignore_eos), batch 1: {results['single']} prompts one at a time, batch 16 and 64: 64 requests "
             f"in waves of that size; the fastest of {results['rounds']} timed rounds (every round is in the file).",
             "",
             "Plain decoding, output tokens/s: " + "; ".join(
                 f"batch {b} {mode} {plain[f'batch{b}/{mode}']['tok_s_best']:,.0f}"
                 for b in batches for mode in ("greedy", "sampled")), ""]
    for mode in ("greedy", "sampled"):
        header = "| drafter | shape | served by | " + " | ".join(f"batch {b}" for b in batches)
        if mode == "greedy":
            header += " | greedy output = plain (exact + near-tie / requests), batch " + "/".join(map(str, batches))
        header += " |"
        lines += [f"**{'Greedy' if mode == 'greedy' else 'Temperature 0.7, top-p 0.9'}**: speedup over plain "
                  "decoding (acceptance length)", "", header,
                  "|" + "---|" * (3 + len(batches) + (1 if mode == "greedy" else 0))]
        for drafter in drafters:
            for shape in shapes:
                for side, label in SIDES.items():
                    arm = _arm(results, drafter, shape, side)
                    if arm is None:
                        continue
                    row = [DRAFTER_NAMES.get(drafter, drafter), arm.get("shape") or shape, label]
                    row += [_cell(arm, f"batch{b}/{mode}") for b in batches]
                    if mode == "greedy":
                        row.append(" / ".join(lossless(arm.get("cells", {}).get(f"batch{b}/greedy", {}))
                                              for b in batches) if "cells" in arm else "")
                    lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    floor = [plain[f"batch{b}/greedy"].get("plain_batched_vs_single") for b in batches[1:]]
    lines.append("Plain decoding's own agreement, batched against one request at a time (the engine's bf16 floor): "
                 + "; ".join(f"batch {b}: {f['exact']} of {f['requests']} equal, {f['near_tie']} near-tie"
                             for b, f in zip(batches[1:], floor) if f))
    lines.append("")
    lines += [f"Note: {note}" for note in results.get("notes", [])] + [""]
    lines.append("A/A spread, plain decoding's rounds (one engine, same cell, timed again): (fastest - slowest) / "
                 "median: " + "; ".join(f"batch {b} {mode} {spread(plain[f'batch{b}/{mode}']['tok_s']):.1%}"
                                        for b in batches for mode in ("greedy", "sampled")))
    return "\n".join(lines) + "\n"


# the least run-to-run noise assumed in a cell: two or three rounds can agree by chance within a percent
NOISE_FLOOR = 0.05


def spread(values: list[float]) -> float:
    """(largest - smallest) / median of repeated measurements of one cell."""
    ordered = sorted(values)
    middle = ordered[len(ordered) // 2] if len(ordered) % 2 else sum(ordered[len(ordered) // 2 - 1:][:2]) / 2
    return (ordered[-1] - ordered[0]) / middle


def best_shape(results: dict, drafter: str, side: str, key: str) -> tuple[str, dict] | None:
    """The shape with the highest speedup (best rounds) in cell ``key``."""
    best = None
    for name, arm in results["arms"].items():
        parts = name.split("/")
        if len(parts) != 3 or parts[0] != drafter or parts[2] != side or key not in arm.get("cells", {}):
            continue
        cell = arm["cells"][key]
        if best is None or cell.get("speedup_best", 0) > best[1].get("speedup_best", 0):
            best = (arm.get("shape") or parts[1], cell)
    return best


def headline(results: dict, source: str, later: tuple[tuple[dict, str], ...] = ()) -> str:
    """Per drafter and mode: this plugin's best shape per batch size, and stock SGLang's. A drafter stock
    was not run on in ``results`` takes its stock cell from a ``later`` (run, source) that ran stock on
    its config rewritten as SGLang's flat format (``stock-edit``), so labelled."""
    batches = results.get("batches", [1, 16, 64])
    lines = ["| drafter (trained by its producer on ShareGPT) | mode | " + " | ".join(
        f"batch {b}: this plugin" for b in batches) + " | stock SGLang, best shape |",
             "|" + "---|" * (3 + len(batches))]
    for drafter in results["drafters"]:
        for mode in ("greedy", "sampled"):
            cells = []
            for b in batches:
                best = best_shape(results, drafter, "plugin", f"batch{b}/{mode}")
                cells.append("-" if best is None else
                             f"{best[1]['speedup_best']:.2f}x, {best[1].get('accept_length', 0):.2f} ({best[0]})")
            stock = [best_shape(results, drafter, "stock", f"batch{b}/{mode}") for b in batches]
            tried = [arm for name, arm in results["arms"].items() if name.startswith(f"{drafter}/")
                     and name.endswith("/stock")]
            edited = [(run, where) for run, where in later if any(
                name.startswith(f"{drafter}/") and name.endswith("/stock-edit") and "cells" in arm
                for name, arm in run["arms"].items())]
            if not tried and edited:
                run, where = edited[0]
                best = [best_shape(run, drafter, "stock-edit", f"batch{b}/{mode}") for b in batches]
                stock_cell = ("refuses its config; rewritten as SGLang's flat format: " + " / ".join(
                    "-" if s is None else f"{s[1]['speedup_best']:.2f}x, {s[1].get('accept_length', 0):.2f}"
                    for s in best) + f" ({best[0][0] if best[0] else '-'}, `{where}`)")
            elif not tried:
                stock_cell = "not run"
            elif all(s is None for s in stock):
                stock_cell = "cannot serve it"
            else:
                stock_cell = " / ".join("-" if s is None else f"{s[1]['speedup_best']:.2f}x, "
                                        f"{s[1].get('accept_length', 0):.2f}" for s in stock)
            lines.append(f"| {DRAFTER_NAMES.get(drafter, drafter)} | {'greedy' if mode == 'greedy' else 'T 0.7'} | "
                         + " | ".join(cells) + f" | {stock_cell} |")
    lines += ["", f"Speedup in output tokens/s over plain decoding in the same run, acceptance length (tokens per "
              f"verify step), the shape (steps/top-k/draft tokens) that did best; stock: batch "
              f"{'/'.join(map(str, batches))}. SmolLM2-135M-Instruct, MT-bench first turns, {results['device']}, "
              f"SGLang {results['sglang']}, {results['date']}, `{source}`."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "import":
        raws = []
        for path in argv[1:-1]:
            with open(path, encoding="utf-8") as handle:
                raws.append(json.load(handle))
        if len(raws) > 1:  # halves of one run taken side by side
            from serve_bench import merged

            raws = [merged(raws)]
        out = argv[-1]
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(committed(raws[0]), handle, indent=1)
            handle.write("\n")
        os.replace(out + ".tmp", out)
        return 0
    if len(argv) >= 2 and argv[0] == "markdown":  # one section per run, in the order given
        sections = []
        for path in argv[1:]:
            with open(path, encoding="utf-8") as handle:
                sections.append(f"## `{os.path.basename(path)}`\n\n" + markdown(json.load(handle)))
        print("\n".join(sections), end="")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
