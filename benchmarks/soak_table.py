"""The table of ``benchmarks/results/soak/`` (runs of ``benchmarks/soak.py``) as
``benchmarks/results/soak/soak.md``.

usage: python benchmarks/soak_table.py [--check]
"""

from __future__ import annotations

import glob
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "soak")
OUTPUT = os.path.join(RESULTS, "soak.md")
NOTES = {  # what a run's own record does not show
    "cpu_sglang-0.5.23.json":
        "It ran the code of commit `b273e5b`; the record names `30e63bd`, the checkout's HEAD when the run ended "
        "(the soak then read the commit at the end), whose changes touch only error paths this run never took. "
        "The CPU server runs SGLang's attention in Triton's interpreter (a py-spy profile of the scheduler: 94 % "
        "of its samples there), seconds per decode step on this 2-core machine shared with other jobs, so the CPU "
        "run keeps outputs short. A JSON-schema request accepts almost no drafts (acceptance 1.03: the grammar "
        "rejects what the drafter proposes) and needs one verify step per token of its 38: a first run with "
        "max_tokens up to 32 and the default 300 s request timeout (commit `768be30`) served every other kind with "
        "no traceback or restart, but 4 of its 7 JSON-schema requests timed out on the client side.",
}
NOTES["h200_sglang-0.5.23_6915903.json"] = (
    "The first GPU soak. Run with "
    "`START_HOLD_S=5 SOAK_DURATION_S=600 SOAK_COMMIT=6915903 bash benchmarks/gpu/run_soak.sh start`, then "
    "`WAIT_LIMIT_S=560 bash benchmarks/gpu/run_soak.sh wait` (SGLang 0.5.23 kit install, flashinfer's renorm on). "
    "Two checks failed. (1) \"No server restart\": its 16 events are 16 plain `python3` children of the server "
    "(consecutive pids, as many as the machine's CPU cores: a worker pool's size) that ended while the server "
    "answered every client to the "
    "end with the same listener and no traceback; the watch then counted any child. Since then a restart is the "
    "server, one of the processes SGLang titles `sglang::...` or the port's listener ending "
    "(`tests/test_soak.py::test_a_restart_is_an_sglang_component_ending_not_a_worker_pool`); this record keeps "
    "the old verdict. (2) Stop strings: 4 of 3712 outputs contained the stop string `.`; stock SGLang's stop "
    "handling with several tokens accepted per verify step was the cause: it ends a request at the stop string "
    "listed first (`\" river\"`) when a step accepts an earlier `.` too; patch `first-stop-string` fixes it "
    "(`tests/sglang/test_compat.py::test_a_verify_step_ends_at_the_stop_string_reached_first`). "
    "Also: the server ran the checkpoint's dtype (float32; `--dtype bfloat16` was added after), and during its "
    "first minutes other GPU checks (bf16_ties.py, fused_verify_server.py, stock_vs_plugin_acceptance.py) ran on "
    "the same GPU, so its tokens/s are a floor.")
NOTES["h200_sglang-0.5.23.json"] = (
    "Run with `START_HOLD_S=560 SOAK_DURATION_S=600 SOAK_COMMIT=bb1b2fc bash benchmarks/gpu/run_soak.sh start`, "
    "then `WAIT_LIMIT_S=560 bash benchmarks/gpu/run_soak.sh wait` (SGLang 0.5.23 kit install, flashinfer's renorm "
    "on), alone on the GPU after `fused_verify_server.py` in the previous call; the rerun of the first soak with "
    "the `first-stop-string` patch, the restart watch that counts SGLang's components and `--dtype bfloat16`. "
    "The 16 helper processes that ended are the same worker pool as in the first run.")
ACCEPTANCE_KINDS = ("greedy", "sampled", "json")
COLUMNS = ["run", "device", "SGLang", "tree (topk/steps/tokens)", "clients x s (to the last answer)", "requests",
           "errors", "restarts", "output tok/s", "acceptance: all / greedy / sampled / JSON", "greedy vs sequential",
           "JSON valid", "tracebacks", "memory growth", "verdict"]


def growth(check: dict | None) -> str:
    if check is None:
        return "-"
    if "growth_mib" not in check:
        return f"not judged ({check.get('reason', '')})"
    return (f"{check['what']}: {check['growth_mib']:+.0f} MiB of {check['first_quarter_mib']:.0f} "
            f"(allowed {check['tolerance_mib']:.0f})")


def errors_cell(errors: dict) -> str:
    parts = [f"{kind} {label}: {count}" for kind, labels in sorted(errors.items())
             for label, count in sorted(labels.items())]
    return "; ".join(parts) or "0"


def row(name: str, run: dict) -> list[str]:
    counts, checks, server = run["counts"], run["checks"], run["config"]["server"]
    greedy = checks["greedy equals sequential"]
    json_check = checks["constrained outputs valid"]
    memory = [growth(checks.get("server memory flat")), growth(checks.get("GPU memory flat"))]
    kinds = counts["by_kind"]
    acceptance = " / ".join("-" if value is None else f"{value:.2f}" for value in (
        counts["acceptance_length"], *(kinds.get(kind, {}).get("acceptance_length") for kind in ACCEPTANCE_KINDS)))
    failed = [label for label, check in checks.items() if not check["pass"]]
    return [f"`{name}`", run["device"], run["sglang"], f"{server['speculative_eagle_topk']}/"
            f"{server['speculative_num_steps']}/{server['speculative_num_draft_tokens']}",
            f"{run['config']['clients']} x {counts['load_seconds']:.0f}", str(counts["requests"]),
            errors_cell(counts["errors"]), str(counts["server_restarts"]), f"{counts['output_tokens_per_s']:.1f}",
            acceptance, f"{greedy['exact']} exact, {greedy['near-tie']} near-tie, {greedy['mismatch']} other "
            f"(rule: {greedy['rule']})", f"{json_check['checked'] - json_check['failed']}/{json_check['checked']}",
            str(checks["no traceback in the server log"]["tracebacks"]), "; ".join(m for m in memory if m != "-"),
            "pass" if run["passed"] else "FAIL: " + ", ".join(failed)]


def details(name: str, run: dict) -> list[str]:
    served = ", ".join(f"{kind} {count}" for kind, count in sorted(run["counts"]["served"].items()))
    fused = "sampled verify served by the fused sampler" if run.get("fused_sampler_served") else "stock sampled verify"
    lines = [f"* `{name}`: {run['date']}, commit `{run['commit']}`; {fused}; served: {served}.",
             f"  Command: `{run['command']}`."]
    kinds = run["counts"].get("by_kind") or {}
    if kinds:
        lines.append("  Per kind, seconds per served request at the median / 95th percentile, mean tokens, acceptance: "
                     + "; ".join(f"{kind} {cell['p50_s']:.1f} / {cell['p95_s']:.1f}, {cell['mean_tokens']:.0f}, "
                                 + ("-" if cell["acceptance_length"] is None else f"{cell['acceptance_length']:.2f}")
                                 for kind, cell in kinds.items()) + ".")
    if run.get("plugin_log"):
        verify = [line for line in run["plugin_log"] if "verify" in line]
        if verify:
            lines.append(f"  Server log: `{verify[-1]}`")
    if name in NOTES:
        lines.append(f"  Note: {NOTES[name]}")
    return lines


def render(runs: dict) -> str:
    lines = ["# Soak runs", "",
             "Generated by `benchmarks/soak_table.py` from `benchmarks/results/soak/*.json` (runs of "
             "`benchmarks/soak.py`: concurrent `openai` clients sending greedy, sampled, stop-string, JSON-schema, "
             "logprobs, aborted-stream and malformed requests). A greedy output under load is compared with the "
             "same request's output in a sequential pass made first; under the near-tie rule a difference must "
             "start where the sequential run's top-1 / top-2 margin is at most 1 nat. Memory growth: the median of "
             "the last quarter of the samples after warm-up (the first tenth of the load) against the first "
             "quarter's.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(name, run)) + " |" for name, run in runs.items()]
    lines.append("")
    for name, run in runs.items():
        lines += details(name, run)
    return "\n".join(lines) + "\n"


def load_runs() -> dict:
    return {os.path.basename(path): json.load(open(path, encoding="utf-8"))
            for path in sorted(glob.glob(os.path.join(RESULTS, "*.json")))}


def main() -> int | str:
    text = render(load_runs())
    if "--check" in sys.argv:
        return 0 if open(OUTPUT, encoding="utf-8").read() == text else "benchmarks/results/soak/soak.md is stale"
    fd, tmp = tempfile.mkstemp(dir=RESULTS, suffix=".md")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, OUTPUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
