"""Issue 39's verdict on one ``serve_bench.py`` run: the drafting depth chosen per step against every fixed shape.

The run holds, for one drafter, plain decoding, fixed shapes with this plugin (``chain1``, ``chain``, SGLang's
default tree for Llama ``tree`` and any other), ``adaptive`` (this package's cost policy under SGLang's
``--speculative-adaptive``) and ``stock-adaptive`` (stock's policy over this plugin's class), at several batch
sizes and, with ``--drift``, in a cell whose batch falls from 64 to 1. Per cell and mode:

* output tok/s (the median of the timed rounds) of every arm, and the best fixed shape;
* adaptive / best fixed, adaptive / plain decoding, adaptive / stock's adaptive;
* the A/A spread: plain decoding's rounds in that cell, (fastest - slowest) / median, never under
  ``table.NOISE_FLOOR``;
* the goal (issue 39 point 3): at every batch size at least the best fixed shape and never below plain
  decoding, beyond the spread; in the drift cell ahead of every fixed shape and of stock's adaptive. A
  ratio counts as below only past ``1 - spread`` and as ahead only past ``1 + spread``.

usage::

    python3 benchmarks/real_target/adaptive_table.py markdown RUN.json DRAFTER   # the page
    python3 benchmarks/real_target/adaptive_table.py plot RUN.json DRAFTER OUT.png   # needs matplotlib
"""

from __future__ import annotations

import json
import os
import sys

from table import NOISE_FLOOR, spread

MODES = {"greedy": "greedy", "sampled": "T 0.7, top-p 0.9"}
POLICIES = {"adaptive": "adaptive (this package)", "stock-adaptive": "stock's adaptive"}
DEFAULT_SHAPE = "tree"  # SGLang's own choice for a Llama target when no shape is given (5/4/8)


def cell_keys(results: dict, mode: str) -> list[str]:
    """The run's cells of ``mode`` in order: each batch size, then the drift cell if measured."""
    keys = [f"batch{b}/{mode}" for b in results["batches"]]
    return keys + ([f"drift/{mode}"] if f"drift/{mode}" in results["arms"]["plain"].get("cells", {}) else [])


def arms_by_shape(results: dict, drafter: str) -> dict[str, dict]:
    """``drafter``'s measured arms with this plugin, by shape name (``chain``, ``adaptive``, ...)."""
    out = {}
    for name, arm in results["arms"].items():
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == drafter and parts[2] == "plugin" and "cells" in arm:
            out[parts[1]] = arm
    return out


def verdict(results: dict, drafter: str, key: str) -> dict | None:
    """Cell ``key``: every arm's median tok/s, the best fixed shape, the ratios and whether the goal holds;
    None when plain decoding or the adaptive arm did not measure it."""
    plain = results["arms"]["plain"]["cells"].get(key)
    arms = arms_by_shape(results, drafter)
    adaptive = arms.get("adaptive", {}).get("cells", {}).get(key)
    if plain is None or adaptive is None:
        return None
    fixed = {shape: arm["cells"][key]["tok_s_median"] for shape, arm in arms.items()
             if shape not in POLICIES and key in arm["cells"]}
    stock = arms.get("stock-adaptive", {}).get("cells", {}).get(key)
    noise = max(NOISE_FLOOR, spread(plain["tok_s"]))
    ours = adaptive["tok_s_median"]
    best = max(fixed, key=fixed.get) if fixed else None
    row = {"plain": plain["tok_s_median"], "fixed": fixed, "best_fixed": best, "adaptive": ours,
           "stock_adaptive": None if stock is None else stock["tok_s_median"], "spread": noise,
           "vs_best": None if best is None else ours / fixed[best], "vs_plain": ours / plain["tok_s_median"],
           "vs_stock": None if stock is None else ours / stock["tok_s_median"]}
    if key.startswith("drift/"):  # ahead of every fixed shape and of stock's adaptive, beyond the spread
        rivals = list(fixed.values()) + ([stock["tok_s_median"]] if stock else [])
        row["goal"] = bool(rivals) and all(ours > rival * (1 + noise) for rival in rivals)
    else:  # at least the best fixed shape and plain decoding, within the spread
        row["goal"] = (row["vs_best"] is None or row["vs_best"] >= 1 - noise) and row["vs_plain"] >= 1 - noise
    return row


def _label(results: dict, key: str) -> str:
    if key.startswith("drift/"):
        return f"drift {len(results['drift_new_tokens'])} -> 1"
    return f"batch {key.split('/')[0][len('batch'):]}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(results: dict, drafter: str) -> str:
    rows = {mode: [(key, row) for key in cell_keys(results, mode)
                   if (row := verdict(results, drafter, key)) is not None] for mode in MODES}
    shapes = sorted({shape for cells in rows.values() for _, row in cells for shape in row["fixed"]})
    lines = [f"{results['device']}, SGLang {results['sglang']} (torch {results['torch']}, commit "
             f"{results['commit']}), {results['date']}; drafter {drafter}; {results['new_tokens']} new tokens a "
             f"request; the median of {results['rounds']} timed rounds. `{DEFAULT_SHAPE}` is SGLang's default shape "
             "for a Llama target. Goal (issue 39): adaptive at least the best fixed shape and plain decoding "
             "at every batch size, ahead of every fixed shape and of stock's adaptive on the drift cell, judged "
             "against the A/A spread of plain decoding's rounds in the cell.", ""]
    for mode, mode_label in MODES.items():
        lines += [f"### {mode_label}", "", "| cell | plain | " + " | ".join(shapes) + " | stock's adaptive | "
                  "adaptive | adaptive / best fixed | adaptive / plain | adaptive / stock's | A/A spread | goal |",
                  "|" + "---|" * (9 + len(shapes))]
        for key, row in rows[mode]:
            fixed = " | ".join(f"{row['fixed'][s]:,.0f}" if s in row["fixed"] else "-" for s in shapes)
            stock = "-" if row["stock_adaptive"] is None else f"{row['stock_adaptive']:,.0f}"
            lines.append(f"| {_label(results, key)} | {row['plain']:,.0f} | {fixed} | {stock} | "
                         f"{row['adaptive']:,.0f} | "
                         f"{_ratio(row['vs_best'])} ({row['best_fixed'] or '-'}) | {_ratio(row['vs_plain'])} | "
                         f"{_ratio(row['vs_stock'])} | {row['spread']:.0%} | {'met' if row['goal'] else 'NOT met'} |")
        lines.append("")
    return "\n".join(lines)


def plot(results: dict, drafter: str, path: str) -> None:
    """Output tok/s over plain decoding's per batch size, a line per arm, one panel per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(MODES), figsize=(11, 4), sharey=True)
    for axis, (mode, mode_label) in zip(axes, MODES.items()):
        keys = [key for key in cell_keys(results, mode) if not key.startswith("drift/")]
        batches = [int(key.split("/")[0][len("batch"):]) for key in keys]
        for shape, arm in arms_by_shape(results, drafter).items():
            points = [(b, arm["cells"][k]["tok_s_median"] / results["arms"]["plain"]["cells"][k]["tok_s_median"])
                      for b, k in zip(batches, keys) if k in arm["cells"]]
            axis.plot([b for b, _ in points], [r for _, r in points], marker="o",
                      label=POLICIES.get(shape, arm.get("shape") or shape),
                      linewidth=2.5 if shape in POLICIES else 1.2)
        axis.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        axis.set_xscale("log", base=2)
        axis.set_title(mode_label)
        axis.set_xlabel("batch size")
    axes[0].set_ylabel("output tok/s / plain decoding's")
    axes[-1].legend(fontsize=8)
    figure.suptitle(f"{results['device']}, SGLang {results['sglang']}, drafter {drafter}")
    figure.tight_layout()
    staging = path + ".partial.png"
    figure.savefig(staging, dpi=110)
    os.replace(staging, path)


def main(argv: list[str]) -> int:
    if len(argv) in (3, 4) and argv[0] in ("markdown", "plot"):
        with open(argv[1], encoding="utf-8") as handle:
            results = json.load(handle)
        if argv[0] == "markdown" and len(argv) == 3:
            print(markdown(results, argv[2]), end="")
            return 0
        if argv[0] == "plot" and len(argv) == 4:
            plot(results, argv[2], argv[3])
            return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
