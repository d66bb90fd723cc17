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

``serve_bench.py``'s diagnostic arms (:data:`DIAGNOSTICS`: each policy pinned to chain 3/1/4, this package's
without its trace, this package's held at 3/1/4 among four depths; each off at batch 1 by one path) are no fixed
shape and no policy under test: the verdict leaves them out, ``overhead`` sets the first kind, with the two
policies, beside the fixed ``chain`` 3/1/4 (:func:`overhead`): what the adaptive path costs a step where the shape
does not change, and ``off`` sets the second beside plain decoding (:func:`off`): where an off step's time goes.

usage::

    python3 benchmarks/real_target/adaptive_table.py markdown RUN.json DRAFTER [POLICY]  # the page (POLICY: the
                                                                      # arm under test, default adaptive)
    python3 benchmarks/real_target/adaptive_table.py plot RUN.json DRAFTER OUT.png [ARM,...]  # needs matplotlib;
                                                           # ARM: diagnostic arms drawn too
    python3 benchmarks/real_target/adaptive_table.py overhead RUN.json DRAFTER   # the diagnostics' table
    python3 benchmarks/real_target/adaptive_table.py off RUN.json DRAFTER   # where speculation off's step goes
"""

from __future__ import annotations

import json
import os
import sys

from table import NOISE_FLOOR, spread

MODES = {"greedy": "greedy", "sampled": "T 0.7, top-p 0.9"}
POLICIES = {"adaptive": "adaptive (this package)", "stock-adaptive": "stock's adaptive"}
DEFAULT_SHAPE = "tree"  # SGLang's own choice for a Llama target when no shape is given (5/4/8)
# serve_bench.DIAGNOSTICS' arms as the overhead table heads them (the fixed shape they run: OVERHEAD_REFERENCE) and
# as the off table does (each off at batch 1)
OVERHEAD_ARMS = {"pin3-stock": "stock's pinned", "pin3-cost": "ours pinned",
                 "pin3-cost-untraced": "ours pinned, no trace", "adaptive-untraced": "adaptive, no trace",
                 "hold3": "ours held at 3 of 4 depths"}
OFF_ARMS = {"off-verify": "stock's width-1 verify + draft extend", "off-skip": "stock's width-1 verify",
            "off-eager": "plain step, eager + draft extend", "off-graph": "plain step, graphed + draft extend",
            "off-graph-skip": "plain step, graphed",
            "off16-graph": "plain step, graphed + draft extend (off to batch 16)",
            "off16-deferred": "plain step, graphed + deferred draft extend (off to batch 16)",
            "off16-deferred32": "plain step, graphed + deferred draft extend, K 32 (off to batch 16)",
            "off16-skip": "plain step, graphed (off to batch 16)",
            "off16-two-tokens": "2 plain tokens a step, graphed + deferred draft extend (off to batch 16)",
            "off16-four-tokens": "4 plain tokens a step, graphed + deferred draft extend (off to batch 16)",
            "off16-eight-tokens": "8 plain tokens a step, graphed + deferred draft extend, K 32 (off to batch 16)"}
OFF_UP_TO = {shape: 16 for shape in OFF_ARMS if shape.startswith("off16-")}  # the largest batch each is off at (else 1)
# the cost policy with the deferred drafter extend (K 8, K 32), that audited, over depths to 7, and with off of 2, 4
# or 8 tokens (serve_bench.DIAGNOSTICS says why)
DEFERRED_ARMS = {"adaptive-deferred": "adaptive, deferred extend",
                 "adaptive-deferred32": "adaptive, deferred extend K 32",
                 "adaptive-deferred-audit": "adaptive, deferred extend, audited",
                 "adaptive7-deferred": "adaptive to depth 7, deferred extend",
                 "adaptive-two-tokens": "adaptive, off of 2 tokens, deferred extend",
                 "adaptive-four-tokens": "adaptive, off of 4 tokens, deferred extend",
                 "adaptive7-eight-tokens": "adaptive to depth 7, off of 8 tokens, deferred extend K 32"}
DIAGNOSTICS = {**OVERHEAD_ARMS, **OFF_ARMS, **DEFERRED_ARMS}
OVERHEAD_REFERENCE = "chain"


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


def verdict(results: dict, drafter: str, key: str, policy: str = "adaptive") -> dict | None:
    """Cell ``key``: every arm's median tok/s, the best fixed shape, the ratios of ``policy`` (the arm under
    test) and whether the goal holds; None when plain decoding or that arm did not measure it."""
    plain = results["arms"]["plain"]["cells"].get(key)
    arms = arms_by_shape(results, drafter)
    adaptive = arms.get(policy, {}).get("cells", {}).get(key)
    if plain is None or adaptive is None:
        return None
    fixed = {shape: arm["cells"][key]["tok_s_median"] for shape, arm in arms.items()
             if shape not in POLICIES and shape not in DIAGNOSTICS and key in arm["cells"]}
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


def markdown(results: dict, drafter: str, policy: str = "adaptive") -> str:
    rows = {mode: [(key, row) for key in cell_keys(results, mode)
                   if (row := verdict(results, drafter, key, policy)) is not None] for mode in MODES}
    shapes = sorted({shape for cells in rows.values() for _, row in cells for shape in row["fixed"]})
    lines = [f"{results['device']}, SGLang {results['sglang']} (torch {results['torch']}, commit "
             f"{results['commit']}), {results['date']}; drafter {drafter}; {results['new_tokens']} new tokens a "
             f"request; the median of {results['rounds']} timed rounds. `{DEFAULT_SHAPE}` is SGLang's default shape "
             "for a Llama target." + ("" if policy == "adaptive" else f" The adaptive arm is `{policy}`.")
             + " Goal (issue 39): adaptive at least the best fixed shape and plain decoding "
             "at every batch size, ahead of every fixed shape and of stock's adaptive on the drift cell, judged "
             "against the A/A spread of plain decoding's rounds in the cell.", ""]
    for mode, mode_label in MODES.items():
        lines += [f"### {mode_label}", "", "| cell | plain | " + "".join(f"{s} | " for s in shapes)
                  + "stock's adaptive | adaptive | adaptive / best fixed | adaptive / plain | adaptive / stock's | "
                  "A/A spread | goal |", "|" + "---|" * (9 + len(shapes))]
        for key, row in rows[mode]:
            fixed = "".join((f"{row['fixed'][s]:,.0f}" if s in row["fixed"] else "-") + " | " for s in shapes)
            stock = "-" if row["stock_adaptive"] is None else f"{row['stock_adaptive']:,.0f}"
            lines.append(f"| {_label(results, key)} | {row['plain']:,.0f} | {fixed}{stock} | "
                         f"{row['adaptive']:,.0f} | "
                         f"{_ratio(row['vs_best'])} ({row['best_fixed'] or '-'}) | {_ratio(row['vs_plain'])} | "
                         f"{_ratio(row['vs_stock'])} | {row['spread']:.0%} | {'met' if row['goal'] else 'NOT met'} |")
        lines.append("")
    return "\n".join(lines)


def overhead(results: dict, drafter: str) -> str:
    """Per cell and mode, the fixed chain 3/1/4's tok/s and, for each policy and diagnostic arm measured, its tok/s,
    its ratio to the chain's and its acceptance length: the pinned arms run the chain's shape at every step (their
    acceptance lengths should match the chain's), so a ratio below 1 beyond the spread of the chain's own rounds
    is what the adaptive path costs (``pin3-stock``: stock's path; ``pin3-cost``: this package's policy and
    wrappers; ``pin3-cost-untraced``: without the trace file), and ``adaptive`` against ``pin3-cost`` is what its
    choice of depths gains or loses."""
    arms = arms_by_shape(results, drafter)
    reference = arms.get(OVERHEAD_REFERENCE)
    if reference is None:
        return f"no {OVERHEAD_REFERENCE} arm of drafter {drafter}: nothing to set the diagnostics beside"
    columns = [shape for shape in (*OVERHEAD_ARMS, *POLICIES) if shape in arms]
    heads = {**OVERHEAD_ARMS, **POLICIES}
    lines = [f"{results['device']}, SGLang {results['sglang']} (commit {results['commit']}), {results['date']}; "
             f"drafter {drafter}; output tok/s (the median of {results['rounds']} rounds), then x {OVERHEAD_REFERENCE} "
             f"3/1/4's and the acceptance length. Spread: the {OVERHEAD_REFERENCE} arm's own rounds.", "",
             "| cell | chain 3/1/4 | spread | " + " | ".join(heads[shape] for shape in columns) + " |",
             "|" + "---|" * (3 + len(columns))]
    for key, base in reference["cells"].items():
        lines.append(f"| {key} | {base['tok_s_median']:,.0f} ({base.get('accept_length', 0):.2f}) | "
                     f"{spread(base['tok_s']):.0%} | " + " | ".join(_beside(arms, columns, key, base)) + " |")
    return "\n".join(lines) + "\n"


def _beside(arms: dict, columns: list[str], key: str, base: dict, batch: int | None = None) -> list[str]:
    """Each column's cell ``key`` beside ``base``: its tok/s, x base's, (with ``batch``, its ms a step: batch x
    tokens a request a step (the acceptance length) x 1000 / tok/s,) its acceptance length; "-" where it was not
    measured."""
    values = []
    for shape in columns:
        cell = arms[shape]["cells"].get(key)
        if cell is None:
            values.append("-")
            continue
        per = ("" if batch is None
               else f"{batch * (cell.get('accept_length') or 1) * 1e3 / cell['tok_s_median']:.2f} ms, ")
        values.append(f"{cell['tok_s_median']:,.0f} (x{cell['tok_s_median'] / base['tok_s_median']:.2f}, {per}"
                      f"{cell.get('accept_length', 0):.2f})")
    return values


def off(results: dict, drafter: str) -> str:
    """Per cell of a batch size some off arm is off at (:data:`OFF_ARMS`, each off by one path up to its
    :data:`OFF_UP_TO` batch, 1 unless named), plain decoding's tok/s and ms a step, then each off arm's: its tok/s,
    its ratio to plain decoding's, its ms a step (batch x acceptance length x 1000 / tok/s: an off step makes
    that many tokens a request, one unless several are asked; prefill and scheduling included) and its acceptance
    length, which is 1 (or the tokens an off step makes) where the arm ran off throughout; "-" where it is not off
    at that batch size. Spread: plain decoding's own rounds."""
    arms = arms_by_shape(results, drafter)
    columns = [shape for shape in OFF_ARMS if shape in arms]
    if not columns:
        return f"no off arm of drafter {drafter} ({', '.join(OFF_ARMS)})"
    lines = [f"{results['device']}, SGLang {results['sglang']} (commit {results['commit']}), {results['date']}; "
             f"drafter {drafter}, speculation off; output tok/s (the median of {results['rounds']} rounds), then x "
             "plain decoding's, ms a step and the acceptance length. Spread: plain decoding's own rounds.", "",
             "| cell | plain decoding | spread | " + " | ".join(OFF_ARMS[shape] for shape in columns) + " |",
             "|" + "---|" * (3 + len(columns))]
    for batch in results["batches"]:
        off_here = {shape: arms[shape] if batch <= OFF_UP_TO.get(shape, 1) else {"cells": {}} for shape in columns}
        if not any(off_here[shape]["cells"] for shape in columns):
            continue
        for key in (f"batch{batch}/{mode}" for mode in MODES):
            base = results["arms"]["plain"]["cells"].get(key)
            if base is None:
                continue
            lines.append(f"| {key} | {base['tok_s_median']:,.0f} ({batch * 1e3 / base['tok_s_median']:.2f} ms) | "
                         f"{spread(base['tok_s']):.0%} | " + " | ".join(_beside(off_here, columns, key, base, batch))
                         + " |")
    return "\n".join(lines) + "\n"


def plot(results: dict, drafter: str, path: str, extra: tuple[str, ...] = ()) -> None:
    """Output tok/s over plain decoding's per batch size, a line per arm (the diagnostic arms left out but those
    named in ``extra``), one panel per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(MODES), figsize=(11, 4), sharey=True)
    for axis, (mode, mode_label) in zip(axes, MODES.items()):
        keys = [key for key in cell_keys(results, mode) if not key.startswith("drift/")]
        batches = [int(key.split("/")[0][len("batch"):]) for key in keys]
        for shape, arm in arms_by_shape(results, drafter).items():
            if shape in DIAGNOSTICS and shape not in extra:
                continue
            points = [(b, arm["cells"][k]["tok_s_median"] / results["arms"]["plain"]["cells"][k]["tok_s_median"])
                      for b, k in zip(batches, keys) if k in arm["cells"]]
            axis.plot([b for b, _ in points], [r for _, r in points], marker="o",
                      label=POLICIES.get(shape) or DIAGNOSTICS.get(shape) or arm.get("shape") or shape,
                      linewidth=2.5 if shape in POLICIES or shape in extra else 1.2)
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
    tables = {"markdown": markdown, "overhead": overhead, "off": off}
    if len(argv) in (3, 4, 5) and argv[0] in (*tables, "plot"):
        with open(argv[1], encoding="utf-8") as handle:
            results = json.load(handle)
        if argv[0] in tables and len(argv) == 3:
            print(tables[argv[0]](results, argv[2]), end="")
            return 0
        if argv[0] == "markdown" and len(argv) == 4:
            print(markdown(results, argv[2], argv[3]), end="")
            return 0
        if argv[0] == "plot" and len(argv) in (4, 5):
            plot(results, argv[2], argv[3], tuple(argv[4].split(",")) if len(argv) == 5 else ())
            return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
