"""Tables and plot of ``benchmarks/results/step_profile/`` (GPU runs of ``benchmarks/gpu/step_profile.py``):
where an EAGLE-3 decode step's time goes, as ``benchmarks/results/step_profile.md`` and
``step_profile.png``.

usage: python benchmarks/step_profile_table.py [--check]   (the plot needs matplotlib: the `bench` extra)
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "step_profile")
OUTPUT = os.path.join(HERE, "results", "step_profile.md")
PLOT = os.path.join(HERE, "results", "step_profile.png")
STAGE = "SITE=/tmp/site source benchmarks/gpu/stage_package.sh && "
RUNS = {  # file -> (commit, command); the commit is the checkout the device ran
    "h200_sglang-0.5.23.json": ("5f28eb9", STAGE + "SGL_KERNEL_USE_FLASHINFER=1 SGLANG_KERNEL_USE_FLASHINFER=1 "
                                "E2E_COMMIT=5f28eb9 timeout 540 python3 benchmarks/gpu/step_profile.py /tmp/sp"),
    "h100_sglang-0.5.23_smollm2.json.gz": (
        "3b09fdc+rt36", "RT_PHASES=\"setup demo profile serve\" bash benchmarks/real_target/run_gpu.sh start "
        "/tmp/rt (its profile phase: python3 benchmarks/gpu/step_profile.py /tmp/rt/profile --target /tmp/rt/target "
        "--drafter /tmp/rt/drafters/specforge --trees 0,1 --classes plugin,stock --rounds 2)"),
}
# row -> (what it is, which code of this package serves it today, or could)
ROWS = {
    "draft steps": ("the drafter's forward passes and top-k, CUDA-graph replays",
                    "the model class (`sglang/model.py`) builds the layers; the graph is SGLang's"),
    "tree build": ("`build_eagle_verify_input`: the tree's tokens, positions and mask",
                   "`SGLANG_EAGLE_EXT_TREE_KERNELS=triton` (our build-tree kernel)"),
    "draft other": ("the rest of `draft`: inputs for the draft graph", "none"),
    "verify prepare": ("`eagle_prepare_for_verify`: the target's verify batch", "none"),
    "target forward": ("the target's verify forward over the draft tokens", "none (SGLang's, the model's cost)"),
    "verify sampling": ("`eagle_sample`: greedy argmax or sampled acceptance walk",
                        "fused verify (sampled); our greedy verify kernel (`triton`)"),
    "after verify": ("accept lengths, bonus tokens, KV slot moves, tree path compaction",
                     "none today"),
    "draft extend": ("the drafter's pass over the accepted tokens", "the model class"),
    "step other": ("the rest of the worker's step, outside draft, verify and draft extend", "none"),
    "between steps": ("GPU idle between steps: the scheduler's host work", "none"),
}


def step_rows(step: dict) -> dict:
    """The rows of one recorded step, in ms on the GPU timeline."""
    gpu = step["gpu_ms"]
    draft_steps = gpu.get("draft_forward_graph", 0.0) + gpu.get("draft_forward_eager", 0.0)
    verify_parts = gpu.get("verify_prepare", 0.0) + gpu.get("target_forward", 0.0) + gpu.get("sample", 0.0)
    rows = {"draft steps": draft_steps, "tree build": gpu.get("tree_build", 0.0),
            "draft other": gpu.get("draft", 0.0) - draft_steps - gpu.get("tree_build", 0.0),
            "verify prepare": gpu.get("verify_prepare", 0.0), "target forward": gpu.get("target_forward", 0.0),
            "verify sampling": gpu.get("sample", 0.0), "after verify": gpu.get("verify", 0.0) - verify_parts,
            "draft extend": gpu.get("draft_extend", 0.0),
            "step other": gpu.get("step", 0.0) - gpu.get("draft", 0.0) - gpu.get("verify", 0.0)
            - gpu.get("draft_extend", 0.0)}
    if "gpu_period_ms" in step:
        rows["between steps"] = step["gpu_period_ms"] - gpu.get("step", 0.0)
    return rows


def cell_rows(cell: dict) -> tuple[dict, float, float]:
    """Median per row over the cell's full-batch steps, the median GPU period and host time per step."""
    steps = [s for s in cell["every_step"] if s["batch"] == cell["batch"] and "gpu_period_ms" in s]
    per_step = [step_rows(s) for s in steps]
    rows = {row: statistics.median(r[row] for r in per_step) for row in ROWS}
    return rows, statistics.median(s["gpu_period_ms"] for s in steps), statistics.median(
        s["host_ms"]["step"] for s in steps)


def drafter_label(config: dict) -> str:
    """The table's drafter column: the zipf workload's depth, or a real target's draft class."""
    if config["layers"] is None:
        return f"trained, {config.get('class', 'plugin')} class"
    return f"{config['layers']} layer{'s' if config['layers'] > 1 else ''}"


def workload(run: dict) -> str:
    if isinstance(run["target"], str):  # a real target (step_profile.py --target)
        return ("* **Workload** SmolLM2-135M-Instruct (real weights, 30 layers, H 576, vocabulary 49152, bf16) with "
                f"the SpecForge 0.2.0 drafter trained for it (`{os.path.basename(run['drafter'])}`, 1 layer, draft "
                "vocabulary 16384), served by this plugin's draft class and by stock SGLang's (plugin off); "
                f"random-token prompts, {run['rounds']} requests of {run['new_tokens']} new tokens per cell; "
                "medians over the steps that decoded the whole batch.")
    return (f"* **Workload** target with Llama-3.1-8B's geometry ({run['target']['num_hidden_layers']} layers, H "
            f"{run['target']['hidden_size']}, I {run['target']['intermediate_size']}, vocabulary "
            f"{run['target']['vocab_size']}, bf16), `zipf_target`'s realistic "
            f"next-token distributions; `zipf_drafter` (SpecForge layout, 3 aux states, draft vocabulary "
            f"{run['draft_vocab']}), {run['rounds']} requests of {run['new_tokens']} new tokens per cell; "
            "medians over the steps that decoded the whole batch.")


def run_table(name: str, run: dict) -> list[str]:
    commit, command = RUNS[name]
    configs = run["configs"]
    dates = sorted({c["date"] for c in configs.values()})
    lines = [f"## {run['device']}, SGLang {run['sglang']}", "",
             f"* **Run** {dates[0]} to {dates[-1]}, commit `{commit}`, torch {run['torch']}, driver {run['driver']}, "
             f"flashinfer's renorm {'on' if run['flashinfer_renorm'] else 'off'} (stock verify). Command: `{command}`. "
             f"Raw: `benchmarks/results/step_profile/{name}`.",
             workload(run),
             "* **How** CUDA events on the current stream at the entry and exit of each function of the v2 worker's "
             "decode step (`benchmarks/gpu/step_timer.py`): a row is the span it occupies on the GPU's timeline, "
             "launch gaps included; `between steps` is the GPU period (first event to the next step's) less the "
             "step's span; host ms is the wall time of the worker's Python call for the step.", ""]
    header = ["drafter", "tree", "batch", "mode", "accept", "period ms", "host ms", *ROWS]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for config in configs.values():
        for cell in config["cells"]:
            rows, period, host = cell_rows(cell)
            shares = [f"{rows[row]:.2f} ({100 * rows[row] / period:.0f}%)" for row in ROWS]
            lines.append("| " + " | ".join([drafter_label(config),
                                            "/".join(map(str, config["tree"])), str(cell["batch"]), cell["mode"],
                                            f"{cell['accept_length']:.2f}", f"{period:.2f}", f"{host:.2f}",
                                            *shares]) + " |")
    lines += [""] + levers(configs) + class_comparison(configs)
    lines += ["", "What each row is, and which code of this package serves it:", "",
              "| row | what | this package |", "|---|---|---|"]
    lines += [f"| {row} | {what} | {ours} |" for row, (what, ours) in ROWS.items()]
    return lines


def levers(configs: dict) -> list[str]:
    """The largest share of each row over the cells, and tokens per ms of each tree shape: what
    removing a row, or choosing another shape, could give at most."""
    largest = {}
    rates = {}  # (layers, batch, mode) -> {tree: accepted tokens per ms of GPU period}
    for config in configs.values():
        tree = "/".join(map(str, config["tree"]))
        for cell in config["cells"]:
            rows, period, _ = cell_rows(cell)
            for row, ms in rows.items():
                where = f"{drafter_label(config)} {tree} batch {cell['batch']} {cell['mode']}"
                if ms / period > largest.get(row, (0.0, ""))[0]:
                    largest[row] = (ms / period, where)
            rates.setdefault((drafter_label(config), cell["batch"], cell["mode"]), {})[tree] = (
                cell["accept_length"] / period)
    lines = ["**Ceilings.** Largest share of the step per row (removing the row entirely would give at most "
             "1 / (1 - share) there): " + "; ".join(f"{row} {share:.0%} ({where})" for row, (share, where) in
                                                     largest.items()) + ".", "",
             "Tokens per step over the step's period, by tree shape (accepted tokens per ms of GPU time per request; "
             "the best shape over the configured one is what choosing the shape per batch could give):", "",
             "| drafter | batch | mode | " + " | ".join(sorted({t for r in rates.values() for t in r}))
             + " | best / worst |",
             "|---|---|---|" + "---|" * (len({t for r in rates.values() for t in r}) + 1)]
    for (drafter, batch, mode), by_tree in sorted(rates.items()):
        cells = " | ".join(f"{by_tree[t]:.3f}" if t in by_tree else "-" for t in sorted({t for r in rates.values()
                                                                                            for t in r}))
        lines.append(f"| {drafter} | {batch} | {mode} | {cells} | "
                     f"{max(by_tree.values()) / min(by_tree.values()):.2f}x |")
    return lines


def class_comparison(configs: dict) -> list[str]:
    """Where this plugin's draft class and stock's serve the same drafter and shape: the step's GPU
    period of each, and the rows that differ most (what the plugin adds, or saves, per step)."""
    by_class = {}
    for config in configs.values():
        for cell in config["cells"]:
            key = ("/".join(map(str, config["tree"])), cell["batch"], cell["mode"])
            by_class.setdefault(key, {})[config.get("class")] = cell_rows(cell)
    pairs = {key: sides for key, sides in by_class.items() if {"plugin", "stock"} <= set(sides)}
    if not pairs:
        return []
    lines = ["", "**This plugin's draft class against stock's**, same drafter, shape and requests (GPU period per "
             "step, ms; the rows that differ by more than 0.1 ms):", "",
             "| tree | batch | mode | plugin | stock | plugin / stock | rows: plugin - stock, ms |",
             "|---|---|---|---|---|---|---|"]
    for (tree, batch, mode), sides in sorted(pairs.items()):
        (ours, ours_period, _), (stock, stock_period, _) = sides["plugin"], sides["stock"]
        differing = ", ".join(f"{row} {ours[row] - stock[row]:+.2f}" for row in ROWS
                              if abs(ours[row] - stock[row]) > 0.1) or "none"
        lines.append(f"| {tree} | {batch} | {mode} | {ours_period:.2f} | {stock_period:.2f} | "
                     f"{ours_period / stock_period:.2f}x | {differing} |")
    return lines


def plot(runs: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    name, run = next(iter(runs.items()))
    labels, stacks = [], []
    for config in run["configs"].values():
        for cell in config["cells"]:
            rows, period, _ = cell_rows(cell)
            labels.append(f"{drafter_label(config)} {'/'.join(map(str, config['tree']))} bs{cell['batch']} "
                          f"{'greedy' if cell['mode'] == 'greedy' else 'sampled'}")
            stacks.append([100 * rows[row] / period for row in ROWS])
    figure, axis = plt.subplots(figsize=(10, 0.32 * len(labels) + 1.5))
    left = [0.0] * len(labels)
    for index, row in enumerate(ROWS):
        widths = [stack[index] for stack in stacks]
        axis.barh(labels, widths, left=left, label=row)
        left = [a + b for a, b in zip(left, widths)]
    axis.invert_yaxis()
    axis.set_xlabel("% of the step's GPU period")
    axis.set_title(f"Where an EAGLE-3 step goes: {run['device']}, SGLang {run['sglang']}")
    axis.legend(ncol=3, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    figure.tight_layout()
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".png")
    os.close(fd)
    figure.savefig(tmp, dpi=110)
    os.replace(tmp, path)


def render(runs: dict) -> str:
    lines = ["# Where an EAGLE-3 decode step's time goes (GPU)", "",
             "Generated by `benchmarks/step_profile_table.py` from `benchmarks/results/step_profile/`. Each cell: ms "
             "on the GPU timeline and its share of the step's period. Plot: `step_profile.png`.", ""]
    for name, run in runs.items():
        lines += run_table(name, run) + [""]
    return "\n".join(lines)


def load(path: str) -> dict:
    """A raw run; the larger ones are committed gzipped (every step of every cell)."""
    with (gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")) as handle:
        return json.load(handle)


def main() -> int:
    runs = {name: load(os.path.join(RESULTS, name)) for name in RUNS}
    text = render(runs)
    if "--check" in sys.argv:
        return 0 if open(OUTPUT, encoding="utf-8").read() == text else "benchmarks/results/step_profile.md is stale"
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(OUTPUT), suffix=".md")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, OUTPUT)
    plot(runs, PLOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
