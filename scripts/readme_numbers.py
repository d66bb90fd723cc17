"""Fill the generated blocks of README.md and docs/*.md from the committed result files in
``benchmarks/results/`` and from the package itself (the command-line options in docs/cli.md).

Every measured figure the README and the docs pages quote lies between markers
``<!-- generated:NAME:begin -->`` and ``<!-- generated:NAME:end -->`` and is rendered here from one
result file, which records the machine, date and commit it came from::

    python scripts/readme_numbers.py                # rewrite the generated blocks of every page
    python scripts/readme_numbers.py --check        # exit 1 when a page is not what it would write
    python scripts/readme_numbers.py --measure-cpu  # rerun the demo and eval on this CPU machine
                                                    # (two fresh builds) into cpu/demo_eval*.json
    python scripts/readme_numbers.py --check-demo   # one fresh build here: exit 1 when a figure
                                                    # falls outside the range the CPUs measured
    python scripts/readme_numbers.py --record-tests suite.log  # append a full-suite run (its pytest
                                                    # output) to cpu/test_runs.json

``--check`` also fails when the suite collects another number of tests than the newest full-suite
record counts, so the README's test count cannot outlive the suite it describes.

``tests/test_readme_numbers.py`` runs the check, so a page that drifts from its results fails.
Run it with the package's environment (``.venv/bin/python``): the layouts table is rendered from
``tests.kit.producer_layouts`` and the option tables from the ``sglang-eagle`` parsers.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the tables render this checkout's package (its release table, its layouts), not an installed copy
sys.path.insert(0, str(ROOT))
README = ROOT / "README.md"
DOCS = ROOT / "docs"  # every page here may hold generated blocks too
RESULTS = ROOT / "benchmarks" / "results"
CPU_TEST_RUNS = RESULTS / "cpu" / "test_runs.json"
CPU_RECORDS = RESULTS / "cpu"  # demo_eval*.json: one record of fresh demo builds per CPU model (--measure-cpu)
E2E_RAW = RESULTS / "sglang_e2e_raw"
GPU_DEMOS = RESULTS / "demo"
TREE_KERNELS = RESULTS / "tree_kernels.json"
FUSED_VERIFY = RESULTS / "fused_verify"
FUSED_VERIFY_E2E = FUSED_VERIFY / "e2e_h200_sglang-0.5.23.json"
FUSED_VERIFY_CONTROL = FUSED_VERIFY / "e2e_h200_sglang-0.5.23_control.json"
STEP_PROFILE = RESULTS / "step_profile" / "h200_sglang-0.5.23.json"
SPEED_RUN = E2E_RAW / "v0.5.16-speed-8b.json"
PRODUCER_FILES = RESULTS / "cpu" / "producer_files.json"  # from scripts/producer_files.py
TP_RESULTS = RESULTS / "tp"  # run_tp2.sh's other files: server_*, acceptance_*, speed_*, fused_e2e_* (two GPUs)
STOCK_VS_PLUGIN = RESULTS / "cpu"  # stock_vs_plugin_sglang-<release>.json, from scripts/stock_vs_plugin.py
STOCK_VS_PLUGIN_GPU = RESULTS / "gpu"  # stock_vs_plugin_acceptance_sglang-<release>_<target>.json (tree drafting)
REAL_TARGET = RESULTS / "real_target"  # serve_<device>_sglang-<release>.json, from benchmarks/real_target/
# the headline's run: every drafter with chain and tree, this plugin and stock, against one plain decoding;
# later runs add arms (the wide tree, stock on an edited config) with their own plain decoding, in serve.md
REAL_TARGET_HEADLINE = REAL_TARGET / "serve_h100_sglang-0.5.23.json"
# the side-by-side run (issue 38) with every arm: SGLang's (FlashAttention 3) and vLLM's on one GPU, taking turns
VS_VLLM = (REAL_TARGET / "serve_vs-vllm_h200-e_fa3_sglang-0.5.23.json",
           REAL_TARGET / "vllm_h200-e_fa3-run_vllm-0.33.0.json")
# the same on the Llama-3.1-8B-geometry workload (zipf target and drafter as files, benchmarks/gpu/zipf_checkpoint.py)
VS_VLLM_8B = (REAL_TARGET / "serve_vs-vllm_8b-geometry_h100_fa3_sglang-0.5.23.json",
              REAL_TARGET / "vllm_8b-geometry_h100_fa3-run_vllm-0.33.0.json")

from sglang_eagle_ext.cli import COMMANDS  # noqa: E402  (this checkout's, by the path set above)
from sglang_eagle_ext.errors import counted  # noqa: E402

MARKER = re.compile(r"<!-- generated:(?P<name>[a-z0-9-]+):begin -->(?P<body>.*?)"
                    r"<!-- generated:(?P=name):end -->", re.DOTALL)


# ---------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------

def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` in one step, so a reader (or a crash) never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); a committed file gets the usual umask mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(staging, path)
    except BaseException:
        os.unlink(staging)
        raise


@functools.cache  # the tables read the same results files many times; none is written meanwhile
def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def value_or_range(values, digits: int, unit: str = "") -> str:
    """One value when every measurement rounds to the same figure, else "low-high"."""
    shown = sorted({f"{value:.{digits}f}" for value in values}, key=float)
    return (shown[0] if len(shown) == 1 else f"{shown[0]}-{shown[-1]}") + unit


# ---------------------------------------------------------------------------------------------
# --measure-cpu / --check-demo: the demo and eval on this machine, fresh builds
# ---------------------------------------------------------------------------------------------

BUILD_LABELS = ("a", "b")
EVAL_COMPARE_TAPS = "1,3,4"


def git(*args: str) -> str:
    # --no-optional-locks: status must not take the index lock from someone committing meanwhile.
    return subprocess.run(["git", "--no-optional-locks", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def machine_facts() -> dict:
    """What a reader needs to judge whether their machine should give the same numbers."""
    return {"nproc": len(os.sched_getaffinity(0)), "arch": platform.machine(),
            "cpu_model": cpu_model()}


def installed_versions(python: Path) -> dict:
    """sglang / torch / transformers versions of the environment the CLI runs in."""
    probe = ("import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
             "('sglang', 'torch', 'transformers')}))")
    return json.loads(subprocess.run([str(python), "-c", probe], check=True, capture_output=True,
                                     text=True).stdout)


def run_timed(command: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    """Run ``command``; its wall time, the CPU time it and its reaped descendants used, and the
    machine's load around it (other work on a 2-core machine stretches the wall time; the load
    and the CPU time let a reader tell a busy machine from a slow build)."""
    print(f"[readme_numbers] $ {' '.join(command)}", file=sys.stderr, flush=True)
    load_before, used_before = os.getloadavg()[0], resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - started
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (used.ru_utime - used_before.ru_utime) + (used.ru_stime - used_before.ru_stime)
    return done, {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                  "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def parse_demo(stdout: str) -> dict:
    """The demo's result lines: acceptance length and the lossless check."""
    acceptance = re.search(r"^acceptance length: ([0-9.]+) tokens per verify step", stdout, re.M)
    lossless = re.search(r"^output equals plain greedy decoding: (yes|NO)$", stdout, re.M)
    if not acceptance or not lossless:
        raise RuntimeError("the demo printed no acceptance / lossless line:\n" + stdout[-2000:])
    return {"acceptance_length": float(acceptance.group(1)),
            "equals_plain_greedy": lossless.group(1) == "yes"}


def measure_build(cli: Path, label: str) -> dict:
    """One fresh build: the demo in a new workdir, then eval on the models it built."""
    with tempfile.TemporaryDirectory(prefix=f"demo-{label}-") as workdir:
        return _measure_in(cli, label, workdir)


def _measure_in(cli: Path, label: str, workdir: str) -> dict:
    demo_command = [str(cli), "demo", "--workdir", workdir]
    demo, demo_timing = run_timed(demo_command)
    if demo.returncode != 0:
        raise RuntimeError(f"demo exited {demo.returncode}:\n{demo.stdout[-2000:]}\n{demo.stderr[-2000:]}")
    eval_command = [str(cli), "eval", "--target", f"{workdir}/target",
                    "--draft", f"{workdir}/drafter-2layer",
                    "--compare-aux-layers", EVAL_COMPARE_TAPS, "--json"]
    evaluated, eval_timing = run_timed(eval_command)
    if evaluated.returncode != 0:
        raise RuntimeError(f"eval exited {evaluated.returncode}:\n{evaluated.stderr[-2000:]}")

    def portable(text: str) -> str:
        """``text`` without this machine's paths (the committed record must name none)."""
        return text.replace(str(cli), relative_cli(cli)).replace(workdir, f"<fresh {label} workdir>")

    return {"label": label,
            "demo": {"command": portable(" ".join(demo_command)), **demo_timing,
                     **parse_demo(demo.stdout), "stdout": portable(demo.stdout)},
            "eval": {"command": portable(" ".join(eval_command)), **eval_timing,
                     "report": json.loads(portable(evaluated.stdout))}}


def measure_cpu(cli: Path) -> dict:
    """Both fresh builds with the facts of the machine and the code they ran."""
    started = datetime.datetime.now(datetime.timezone.utc)
    record = {"date": started.strftime("%Y-%m-%d %H:%M UTC"), "machine": machine_facts(),
              "commit": git("rev-parse", "--short", "HEAD"),
              # Uncommitted edits change what ran; say so rather than pretend the commit is all.
              "uncommitted_paths": len(git("status", "--porcelain").splitlines()),
              "versions": installed_versions(cli.parent / "python"),
              "command": f"python scripts/readme_numbers.py --measure-cpu --cli {relative_cli(cli)}"}
    record["builds"] = [measure_build(cli, label) for label in BUILD_LABELS]
    return record


def record_path(model: str) -> Path:
    """Where ``--measure-cpu`` writes the record of a CPU ``model``: the record already kept for that
    model, else a new file named after it (another vendor's record is never overwritten)."""
    for path in cpu_record_paths():
        if read_json(path)["machine"]["cpu_model"] == model:
            return path
    words = re.findall(r"[a-z0-9]+", re.sub(r"\((r|tm)\)|\b(processor|cpu)\b", " ", model.lower()))
    return CPU_RECORDS / f"demo_eval_{'-'.join(words) or 'unknown'}.json"


def check_demo(cli: Path) -> int:
    """One fresh build on this CPU, judged against the range every CPU measured gave: 0 when each
    figure lies inside it (at the digits the pages show), 1 naming each one outside."""
    build, ranges = measure_build(cli, "fresh"), measured_ranges()
    for name, (value, digits) in build_figures(build).items():
        low, high, _ = ranges.get(name, (value, value, digits))
        print(f"{name}: {value:.{digits}f} (measured: {value_or_range([low, high], digits)})")
    outside = judge(build, ranges)
    for problem in outside:
        print(f"OUTSIDE: {problem}", file=sys.stderr)
    if outside:
        print(f"This CPU ({cpu_model()}) built other models than the CPUs measured ({cpu_models()}); if that is "
              "its vendor's arithmetic, not a fault, record it with python scripts/readme_numbers.py --measure-cpu "
              "and regenerate the pages", file=sys.stderr)
    return 1 if outside else 0


def relative_cli(cli: Path) -> str:
    """``cli`` as a reader of the record can run it: relative to this checkout, else by its name (on
    ``PATH``): a record must not name this machine's paths."""
    try:
        return cli.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return cli.name


# ---------------------------------------------------------------------------------------------
# Supported-versions table
# ---------------------------------------------------------------------------------------------

COMPAT = ROOT / "sglang_eagle_ext" / "sglang" / "compat" / "releases.py"
NOT_RUN = RESULTS / "not_run.json"


def supported_releases() -> list[str]:
    """Every 0.X.Y release inside the package's ``SUPPORTED`` range, read from its source."""
    declared = re.search(r'SUPPORTED = SpecifierSet\(">=(\d+)\.(\d+)\.(\d+),<(\d+)\.(\d+)\.(\d+)"\)',
                         COMPAT.read_text(encoding="utf-8"))
    if declared is None:
        raise ValueError(f"{relative(COMPAT)}: no SUPPORTED = SpecifierSet(\">=a.b.c,<a.b.d\") to read")
    major, minor, first, end_major, end_minor, end = map(int, declared.groups())
    if (major, minor) != (end_major, end_minor):
        raise ValueError(f"{relative(COMPAT)}: SUPPORTED spans minor releases; list them here")
    return [f"{major}.{minor}.{patch}" for patch in range(first, end)]


def release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def e2e_runs() -> list[dict]:
    """Every end-to-end raw file that holds rows, with its path (speed-only files hold none)."""
    runs = []
    for path in sorted(E2E_RAW.glob("*.json")):
        run = read_json(path)
        if run.get("rows"):
            runs.append({**run, "path": path})
    return runs


def row_is_lossless(row: dict) -> bool:
    """Every prompt equal to the non-speculative engine, exactly or up to a near-tie."""
    return not row["mismatch"] and row["exact"] + row["near_tie"] == row["prompts"]


def newest(runs: list[dict]) -> dict:
    """The run with the latest date; of runs on the same date, the one recorded last."""
    return max(reversed(runs), key=lambda run: run["date"])


def where(run: dict) -> str:
    return f"{run['device']}, {run['date'][:10]}, `{run['commit']}`"


def gpu_rows_cell(runs: list[dict]) -> str:
    run = newest(runs)
    lossless = sum(row_is_lossless(row) for row in run["rows"])
    digests = ", ".join(sorted({row["output_digest"] for row in run["rows"]}))
    earlier = f" ({len(runs)} runs, newest shown)" if len(runs) > 1 else ""
    return f"{lossless}/{len(run['rows'])} rows lossless, digest {digests}; {where(run)}{earlier}"


def tp2_cell(runs: list[dict], release: str) -> str:
    """The TP=2 column: the rows at TP 2 (lossless against the TP-2 baseline), how the TP-2 baseline's
    outputs compare with TP 1's (``baseline_vs_tp1``), and, from ``benchmarks/results/tp/``, the
    fused-verify server check and the demo drafter's acceptance at TP 1 and TP 2 of the same release."""
    run = newest(runs)
    lossless = sum(row_is_lossless(row) for row in run["rows"])
    digests = ", ".join(sorted({row["output_digest"] for row in run["rows"]}))
    text = f"{lossless}/{len(run['rows'])} rows lossless, digest {digests}"
    versus = run.get("baseline_vs_tp1")
    if versus:
        elsewhere = f", {len(versus['mismatch'])} elsewhere" if versus["mismatch"] else ""
        text += (f" (against TP 1's baseline: {versus['exact']}/{versus['prompts']} prompts equal, "
                 f"{versus['near_tie']} first differ at a bf16 near-tie{elsewhere})")
    for path in sorted(TP_RESULTS.glob(f"server_*_sglang-{release}.json")):
        server = read_json(path)
        text += f"; fused-verify server {sum(server['identical'].values())}/{8 * len(server['identical'])} identical"
    for path in sorted(TP_RESULTS.glob(f"acceptance_*_sglang-{release}.json")):
        accepted = read_json(path)["long"]
        text += (f"; demo drafter acceptance {accepted['tp1']['accept_length']:.2f} at TP 1, "
                 f"{accepted['tp2']['accept_length']:.2f} at TP 2")
    earlier = f" ({len(runs)} runs, newest shown)" if len(runs) > 1 else ""
    return f"{text}; {run['device']} x{run['tp_size']}, {run['date'][:10]}, `{run['commit']}`{earlier}"


def gpu_demo_runs() -> list[dict]:
    """The committed GPU demo transcripts: header line (date, device, release, commit) and results."""
    header = re.compile(r"^# (?P<date>\d{4}-\d\d-\d\d)T\S*, (?P<device>[^,]+), [^,]+, sglang (?P<sglang>[\d.]+), "
                        r".*commit (?P<commit>\w+)$", re.M)
    runs = []
    for path in sorted(GPU_DEMOS.glob("*.txt")):
        transcript = path.read_text(encoding="utf-8")
        found = header.search(transcript)
        if found is None:
            raise ValueError(f"{relative(path)}: no '# DATE, DEVICE, DRIVER, sglang X, ..., commit C' header")
        runs.append({**found.groupdict(), "path": path, **parse_demo(transcript)})
    return runs


def gpu_demo_cell(runs: list[dict]) -> str:
    run = newest(runs)
    lossless = "yes" if run["equals_plain_greedy"] else "NO"
    return (f"acceptance {run['acceptance_length']:.2f}, output equals plain greedy decoding: {lossless}; "
            f"{where(run)}")


def cpu_test_runs() -> list[dict]:
    return read_json(CPU_TEST_RUNS)["runs"]


SUITE_COMMAND = ".venv/bin/python -m pytest -q -p no:cacheprovider"
# The suite's own check of this record would fail while the record is being renewed.
RECORD_CHECK_TEST = "tests/test_readme_numbers.py::test_readme_figures_are_the_generated_ones"
RECORD_SUITE_COMMAND = f"{SUITE_COMMAND} --deselect {RECORD_CHECK_TEST}"
SUMMARY = re.compile(r"^=* ?(?P<counts>\d+ \w+(?:, \d+ \w+)*) in (?P<seconds>[0-9.]+)s\b", re.M)
OUTCOMES = ("passed", "failed", "skipped", "deselected", "error")


def suite_summary(log: str) -> dict:
    """The outcome counts and seconds of the last pytest summary line in ``log``."""
    lines = list(SUMMARY.finditer(log))
    if not lines:
        raise ValueError("no pytest summary line ('N passed, M skipped in S s') in the log")
    counts = {outcome: 0 for outcome in OUTCOMES}
    for number, outcome in re.findall(r"(\d+) (\w+)", lines[-1].group("counts")):
        singular = "error" if outcome == "errors" else outcome
        if singular in counts:
            counts[singular] = int(number)
    return {**counts, "seconds": round(float(lines[-1].group("seconds")))}


def suite_record(log: str, sglang: str) -> dict:
    """One ``test_runs.json`` record of the full-suite run whose output is ``log``."""
    summary = suite_summary(log)
    machine = machine_facts()
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "machine": f"{machine['nproc']}-core CPU ({machine['cpu_model']}), CPU only",
            "commit": git("rev-parse", "--short", "HEAD"), "sglang": sglang, "scope": "full suite",
            "passed": summary["passed"], "failed": summary["failed"] + summary["error"],
            "skipped": summary["skipped"], "collected": sum(summary[outcome] for outcome in OUTCOMES),
            "note": f"{RECORD_SUITE_COMMAND}, {summary['seconds']} s"}


def collected_tests() -> int:
    """How many tests the suite collects now (pytest's own count, without running any)."""
    listed = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only"],
                            cwd=ROOT, capture_output=True, text=True)
    found = re.search(r"^(\d+) tests? collected", listed.stdout, re.M)
    if found is None:
        raise ValueError(f"pytest --collect-only printed no count (exit {listed.returncode}):\n{listed.stdout[-2000:]}")
    return int(found.group(1))


def stale_test_count(runs: list[dict], collected: int) -> str | None:
    """Why the newest full-suite record no longer describes the suite, or None when it does."""
    run = newest([run for run in runs if run.get("collected")] or runs)
    recorded = run.get("collected", run["passed"] + run["failed"] + run["skipped"])
    if recorded == collected:
        return None
    return (f"{relative(CPU_TEST_RUNS)}: the newest full-suite record (commit {run['commit']}) counts {recorded} "
            f"tests, the suite now collects {collected}; run `{RECORD_SUITE_COMMAND} | tee suite.log`, then "
            "`python scripts/readme_numbers.py --record-tests suite.log` and `python scripts/readme_numbers.py`")


def cpu_tests_cell(runs: list[dict]) -> str:
    run = newest(runs)
    counts = ", ".join(f"{run[outcome]} {outcome}" for outcome in ("passed", "failed", "skipped"))
    note = f" ({run['note']})" if run.get("note") else ""
    return f"{counts}{note}; {run['machine']}, {run['date']}, `{run['commit']}`"


def not_run_reason(release: str, column: str) -> str:
    """Why a cell has no result, from ``not_run.json`` (a blocked run says why; others 'untested')."""
    reason = read_json(NOT_RUN)["releases"].get(release, {}).get(column)
    return f"untested ({reason})" if reason else "untested"


def fused_verify_cell(release: str) -> str:
    """What the fused-verify GPU runs of ``release`` showed (``benchmarks/results/fused_verify/``), and
    whether the sampler is on by default there."""
    from packaging.version import Version

    from sglang_eagle_ext.sglang.compat.fused_verify import DEFAULT_ON

    parts = []
    for path in sorted(FUSED_VERIFY.glob(f"*_sglang-{release}.json")):
        run, kind = read_json(path), path.name.split("_")[0]
        if kind == "step":
            checks = run["identical"]
            parts.append(f"step {sum(c['identical'] for c in checks)}/{sum(c['requests'] for c in checks)} identical"
                         + ("" if "distribution" in run else " (no timing)"))
        elif kind == "server":
            parts.append(f"server {sum(run['identical'].values())}/{8 * len(run['identical'])} identical")
        elif kind == "draws":
            cells = run["cells"]
            differ = [d for c in cells for d in c["differences"]]
            requests = sum(c["requests"] for c in cells)
            parts.append(f"draws {requests - len(differ)}/{requests} "
                         f"identical, the other {len(differ)} on a CDF boundary "
                         f"({sum(d['on_boundary'] for d in differ)}/{len(differ)})")
        elif kind == "bf16":
            checks = run["identical_bf16"]
            parts.append(f"bf16 logits {sum(c['identical'] for c in checks)}/{sum(c['requests'] for c in checks)} "
                         "identical")
        else:
            sampled = [c for tree in run["trees"].values() for c in tree["cells"] if c["mode"] != "greedy"]
            at_64 = [c["ratio_median"] for c in sampled if c["batch"] == 64]
            parts.append(f"e2e sampled batch 64 {value_or_range(at_64, 2)}x stock, outputs "
                         f"{sum(c['same_outputs_rounds'] for c in sampled)}/{sum(len(c['ratios']) for c in sampled)} "
                         f"identical ({run['device']}, `{run['commit']}`)")
    if not parts:
        return "untested"
    return "; ".join(parts) + ("; **default on**" if Version(release) in DEFAULT_ON else "; opt-in")


def versions_table() -> str:
    e2e = e2e_runs()
    gpu_rows = [run for run in e2e if run.get("tp_size", 1) == 1]
    tp2 = [run for run in e2e if run.get("tp_size", 1) == 2]
    demos, tests = gpu_demo_runs(), cpu_test_runs()
    lines = ["| SGLang | CPU tests | GPU rows (end to end) | TP=2 | GPU demo | fused verify (GPU) |",
             "|---|---|---|---|---|---|"]
    for release in supported_releases():
        def of(runs, key="sglang"):
            return [run for run in runs if run[key] == release]
        cells = [
            cpu_tests_cell(of(tests)) if of(tests) else not_run_reason(release, "cpu"),
            gpu_rows_cell(of(gpu_rows)) if of(gpu_rows) else not_run_reason(release, "gpu"),
            tp2_cell(of(tp2), release) if of(tp2) else "not run",
            gpu_demo_cell(of(demos)) if of(demos) else not_run_reason(release, "gpu"),
            fused_verify_cell(release),
        ]
        lines.append(f"| {release} | " + " | ".join(cells) + " |")
    near_tie = {run["near_tie_nats"] for run in e2e}
    return ("\n\n" + "\n".join(lines) + "\n\n"
            f"Generated by `python scripts/readme_numbers.py` from `{relative(CPU_TEST_RUNS)}` (full-suite runs, "
            "recorded with `--record-tests`), "
            f"`{relative(E2E_RAW)}/*.json`, `{relative(GPU_DEMOS)}/*.txt` and `{relative(FUSED_VERIFY)}/*.json` "
            "(tables: `benchmarks/results/fused_verify.md`). A row is lossless when "
            "each prompt's greedy output equals the non-speculative engine's token by token, or first "
            "differs where that engine's top-1/top-2 log-probability margin is at most "
            f"{value_or_range(near_tie, 1)} nats (a bf16 near-tie); the digest is the rows' output "
            "digest. TP=2 lists raw files with `\"tp_size\": 2` (rows and baseline over two GPUs, judged against "
            "the TP-2 baseline) and, from `benchmarks/results/tp/`, the fused-verify server check and the demo "
            "drafter's acceptance (10 prompts, 64 tokens) at TP 1 and TP 2.\n\n")


# ---------------------------------------------------------------------------------------------
# GPU speed and kernel figures
# ---------------------------------------------------------------------------------------------

def gpu_row_releases() -> str:
    releases = sorted({run["sglang"] for run in e2e_runs()}, key=release_key)
    return " and ".join([", ".join(releases[:-1]), releases[-1]] if len(releases) > 1 else releases)


def builtin_speed() -> str:
    """Our class against SGLang's built-in one: median ratio of paired rounds per batch size."""
    run = read_json(SPEED_RUN)
    ratios = [f"{run['speed'][batch]['ours_vs_builtin']['ratio_median']:.3f}x at batch {batch[len('batch'):]}"
              for batch in ("batch1", "batch32")]
    return (f"{' and '.join(ratios)} on a GPU-bound target ({run['device']}, {run['date'][:10]}, "
            f"`{run['commit']}`, `{relative(SPEED_RUN)}`)")


SAMPLER_ROWS_FROM = 256  # verify rows (bs * tree size) where the logits, not launches, dominate


def tree_kernel_figures() -> str:
    """The fused sampler's speed-up and distance from the logits-read floor at large shapes, the
    tree build's speed-up, and whether any op is slower, all from the eager (as SGLang calls
    them) medians of ``tree_kernels.json``."""
    results = read_json(TREE_KERNELS)
    rows, meta = results["rows"], results["meta"]
    large = [row for row in rows if row["rows"] >= SAMPLER_ROWS_FROM]
    sampler = value_or_range([row["pipeline_x"] for row in large], 0)
    floor = value_or_range([row["pipeline_ours_us"] / row["floor_us"] for row in large], 2)
    build = value_or_range([row["build_x"] for row in rows], 1)
    slowest = min(row[key] for row in rows for key in row if key.endswith("_x"))
    slower = "no op slower at any shape" if slowest >= 1 else f"the slowest op at {slowest:.2f}x"
    return (f"softmax / top-k / top-p / tree-sampling pipeline {sampler}x faster at {SAMPLER_ROWS_FROM}+ "
            f"verify rows, within {floor}x of one read of the logits there; the tree build {build}x "
            f"faster; {slower}; {meta['device']}, {meta['date']}, `{meta['commit']}`, "
            f"`{relative(TREE_KERNELS)}`")


def fused_verify_e2e() -> str:
    """The fused sampler in the server, end to end: tokens/s ratios (medians of alternating rounds)
    for sampled decoding at batch 16 and up and at batch 1, the batch-64 figures per filter, how far
    two engines running the same code drift apart (greedy cells, the A/A run), and how often the
    arms' sampled outputs agreed."""
    run = read_json(FUSED_VERIFY_E2E)
    control = read_json(FUSED_VERIFY_CONTROL)
    cells = [cell for tree in run["trees"].values() for cell in tree["cells"]]
    sampled = [cell for cell in cells if cell["mode"] != "greedy"]
    same_code = [cell["ratio_median"] for cell in cells if cell["mode"] == "greedy"]
    same_code += [cell["ratio_median"] for tree in control["trees"].values() for cell in tree["cells"]]
    at_64 = ", ".join(
        f"{name}: " + " / ".join(f"{cell['ratio_median']:.2f}x" for cell in tree["cells"]
                                 if cell["batch"] == 64 and cell["mode"] != "greedy")
        for name, tree in run["trees"].items())
    filters = " / ".join(dict.fromkeys(cell["mode"] for cell in sampled))
    dates = sorted(tree["date"][:10] for tree in run["trees"].values())
    return (f"sampled decoding at batch 16 and 64 "
            f"{value_or_range([c['ratio_median'] for c in sampled if c['batch'] > 1], 3)}x the tokens/s of stock "
            f"SGLang with flashinfer's renorm (at batch 64, {filters} by tree: {at_64}), at batch 1 "
            f"{value_or_range([c['ratio_median'] for c in sampled if c['batch'] == 1], 3)}x; two engines running "
            f"the same code (greedy cells, whose path is stock in both arms, and a third, stock engine in the same "
            f"rounds) "
            f"gave {value_or_range(same_code, 3)}x; sampled outputs identical to stock in "
            f"{sum(cell['same_outputs_rounds'] for cell in sampled)} of {sum(len(cell['ratios']) for cell in sampled)} "
            f"runs, with a drafter whose drafts the target accepts (accept length "
            f"{value_or_range([cell['accept_length']['fused'] for cell in cells], 2)}); Llama-3.1-8B geometry with "
            f"next-token entropy "
            f"{run['distributions']['T0.7 top-p0.9']['entropy_nats']['mean']:.1f} nats at T 0.7, {run['device']}, "
            f"SGLang {run['sglang']}, {dates[-1]}, `{run['commit']}`, `{relative(FUSED_VERIFY_E2E)}`")


def step_profile() -> str:
    """Where a decode step's GPU time goes (the step-profile run's cell medians): the target's verify
    forward, the drafting, sampled verify; and the best tree shape's tokens per ms over the worst's."""
    run = read_json(STEP_PROFILE)
    cells = [(config, cell) for config in run["configs"].values() for cell in config["cells"]]

    def share(phases, chosen):
        return value_or_range([100 * sum(cell["gpu_ms"].get(p, 0.0) for p in phases) / cell["gpu_period_ms"]
                               for config, cell in chosen], 0)

    sampled = [(config, cell) for config, cell in cells if cell["mode"] != "greedy"]
    rates = {}
    for config, cell in cells:
        key = (config["layers"], cell["batch"], cell["mode"])
        rates.setdefault(key, []).append(cell["accept_length"] / cell["gpu_period_ms"])
    best_over_worst = {batch: max(max(r) / min(r) for (_, b, _), r in rates.items() if b == batch)
                       for batch in sorted({b for _, b, _ in rates})}
    gaps = [100 * (c["gpu_period_ms"] - c["gpu_ms"]["step"]) / c["gpu_period_ms"] for _, c in cells]
    return (f"the target's verify forward takes {share(['target_forward'], cells)}% of a step's GPU time, "
            f"drafting (the draft phase, tree build included, and draft extend) "
            f"{share(['draft', 'draft_extend'], cells)}%, sampled verify "
            f"{share(['sample'], sampled)}% of a sampled step, the scheduler's gaps between steps "
            f"{value_or_range(gaps, 0)}%; "
            f"the better of chain 1/3/4 and tree 8/5/32 gives "
            + ", ".join(f"{ratio:.2f}x" for ratio in best_over_worst.values())
            + f" the other's tokens per ms at batch {', '.join(map(str, best_over_worst))} (drafters of "
            f"{' and '.join(sorted({str(c['layers']) for c, _ in cells}))} layers, greedy and T 0.7 top-p 0.9; "
            f"{run['device']}, SGLang {run['sglang']}, {run['configs'][next(iter(run['configs']))]['date'][:10]}, "
            f"`{run['commit']}`, `{relative(STEP_PROFILE)}`)")


# ---------------------------------------------------------------------------------------------
# CPU demo and eval figures: fresh builds on each CPU measured, shown as the range over them
# ---------------------------------------------------------------------------------------------

# The digits each figure is shown with; a fresh build passes --check-demo where its figure, so
# rounded, lies in the range measured.
ACCEPTANCE_DIGITS, LOSS_DIGITS, EVAL_DIGITS = 2, 3, 3


def cpu_record_paths() -> list[Path]:
    return sorted(CPU_RECORDS.glob("demo_eval*.json"))


def cpu_records() -> list[dict]:
    return [read_json(path) for path in cpu_record_paths()]


def cpu_builds() -> list[dict]:
    return [build for record in cpu_records() for build in record["builds"]]


def cpu_models() -> str:
    return ", ".join(record["machine"]["cpu_model"] for record in cpu_records())


def cpu_machine(record: dict) -> str:
    machine = record["machine"]
    return f"{machine['nproc']}-core CPU ({machine['cpu_model']}, {machine['arch']})"


def first_loss(build: dict) -> float:
    """The distillation loss at step 1, as the demo printed it: the first figure training reaches."""
    return float(re.search(r"training step 1/\d+, loss ([0-9.]+)", build["demo"]["stdout"]).group(1))


def build_figures(build: dict) -> dict[str, tuple[float, int]]:
    """Every figure the pages show of one build, by name, with the digits it is shown with."""
    report = build["eval"]["report"]
    figures = {"demo acceptance length": (build["demo"]["acceptance_length"], ACCEPTANCE_DIGITS),
               "distillation loss at step 1": (first_loss(build), LOSS_DIGITS)}
    for taps, rows in ((report["aux_indices"], report["rows"]),
                       (report["compared"]["aux_indices"], report["compared"]["rows"])):
        for name, row in rows.items():
            figures[f"eval {name}, taps {taps}"] = (row["accept_length"], EVAL_DIGITS)
    return figures


def measured_ranges() -> dict[str, tuple[float, float, int]]:
    """Each figure's lowest and highest value over every build of every CPU measured."""
    ranges = {}
    for build in cpu_builds():
        for name, (value, digits) in build_figures(build).items():
            low, high, _ = ranges.get(name, (value, value, digits))
            ranges[name] = (min(low, value), max(high, value), digits)
    return ranges


def judge(build: dict, ranges: dict) -> list[str]:
    """Why ``build`` is not what the CPUs measured gave: each figure outside its range (compared as
    shown, so a build equal to a record passes), and an output that differs from plain decoding."""
    def shown(value: float, digits: int) -> float:
        return float(f"{value:.{digits}f}")

    problems = [] if build["demo"]["equals_plain_greedy"] else ["the demo's output differs from plain greedy decoding"]
    for name, (value, digits) in build_figures(build).items():
        if name not in ranges:
            problems.append(f"{name}: {value:.{digits}f}, a figure no CPU measured")
            continue
        low, high, _ = ranges[name]
        if not shown(low, digits) <= shown(value, digits) <= shown(high, digits):
            problems.append(f"{name}: {value:.{digits}f}, outside {value_or_range([low, high], digits)}")
    return problems


def demo_cpu_range() -> str:
    """The demo's acceptance length over every CPU measured (the README's figure)."""
    return (f"{value_or_range([build['demo']['acceptance_length'] for build in cpu_builds()], ACCEPTANCE_DIGITS)} "
            f"on the CPUs measured ({cpu_models()})")


def demo_cpu_time() -> str:
    """The first run's wall time: fresh workdir, so building the models is included."""
    seconds = value_or_range([build["demo"]["wall_s"] for build in cpu_builds()], 0, " s")
    cores = "/".join(sorted({str(record["machine"]["nproc"]) for record in cpu_records()}))
    return f"{seconds} on {cores}-core CPUs"


def demo_cpu_vendors() -> str:
    """What each CPU measured: the demo's builds agree on one CPU and differ between CPU vendors,
    so the pages must not promise one figure for every x86-64 CPU."""
    parts = []
    for path, record in zip(cpu_record_paths(), cpu_records()):
        builds = record["builds"]
        parts.append(f"{record['machine']['cpu_model']}: acceptance "
                     f"{value_or_range([b['demo']['acceptance_length'] for b in builds], ACCEPTANCE_DIGITS)}, "
                     f"distillation loss at step 1 {value_or_range(map(first_loss, builds), LOSS_DIGITS)} "
                     f"({len(builds)} fresh builds, {record['date'][:10]}, `{relative(path)}`)")
    return "; ".join(parts)


def demo_cpu_source() -> str:
    parts = []
    for path, record in zip(cpu_record_paths(), cpu_records()):
        loads = [load for build in record["builds"] for load in build["demo"]["load_average_1m"]]
        # A demo timed while other jobs share the cores takes longer than on an idle machine: say so.
        busy = (f", while other jobs shared the machine (1-minute load {value_or_range(loads, 1)} around the "
                "demo runs, so its times are upper bounds)" if max(loads) > record["machine"]["nproc"] else "")
        parts.append(f"{len(record['builds'])} fresh builds on a {cpu_machine(record)}, {record['date'][:10]}, "
                     f"commit `{record['commit']}`{busy} (`{relative(path)}`)")
    return "CPU figures: " + "; ".join(parts) + "; a range where the builds differ."


def eval_reports() -> list[dict]:
    return [build["eval"]["report"] for build in cpu_builds()]


def eval_setup() -> str:
    """The eval's settings: tokens per prompt from its recorded command (else the eval's default), not
    from the tokens counted, which a last verify step may take past the limit."""
    build = cpu_builds()[0]
    report = build["eval"]["report"]
    given = re.search(r"--max-new-tokens (\d+)", build["eval"]["command"])
    tokens = int(given.group(1)) if given else cli_parsers()["eval"].get_default("max_new_tokens")
    tree = report["rows"]["tree greedy"]
    return (f"{report['prompts']} prompts x {tokens} tokens, {tree['num_steps']} steps, tree top-{tree['topk']}, "
            f"{len(cpu_builds())} fresh builds on the CPUs measured ({cpu_models()}), a cell showing the range "
            "where they differ")


def gain(rows: dict) -> float:
    """Mean tokens per verify step beyond plain decoding's one (as ``sglang-eagle eval`` prints)."""
    return sum(row["accept_length"] - 1 for row in rows.values()) / len(rows)


def eval_table() -> str:
    """``sglang-eagle eval``'s table, each cell one value or the range over the fresh builds of every CPU."""
    reports = eval_reports()
    tap_sets = [("rows", reports[0]["aux_indices"]), ("compared", reports[0]["compared"]["aux_indices"])]

    def rows_of(report, key):
        return report["rows"] if key == "rows" else report["compared"]["rows"]

    def cell(name, key):
        return value_or_range([rows_of(report, key)[name]["accept_length"] for report in reports], EVAL_DIGITS)

    names = [str(indices) for _, indices in tap_sets]
    cells = {name: [cell(name, key) for key, _ in tap_sets] for name in reports[0]["rows"]}
    width = max(12, *(len(text) + 2 for text in names + [c for row in cells.values() for c in row]))
    lines = ["accept length (tokens per verify step) by aux hidden-state indices",
             f"{'drafting':<15}{'steps':>6}{'topk':>6}{'tokens':>8}{'temp':>6}"
             + "".join(f"{name:>{width}}" for name in names)]
    for name, row in reports[0]["rows"].items():
        lines.append(f"{name:<15}{row['num_steps']:>6}{row['topk']:>6}{row['draft_tokens']:>8}"
                     f"{row['temperature']:>6.1f}" + "".join(f"{text:>{width}}" for text in cells[name]))
    own = [gain(report["rows"]) for report in reports]
    other = [gain(report["compared"]["rows"]) for report in reports]
    share = [100 * o / g for o, g in zip(other, own)]
    lines.append(f"tokens gained per verify step (mean over rows): {value_or_range(own, 2)} with {names[0]}, "
                 f"{value_or_range(other, 2)} with {names[1]} ({value_or_range(share, 0)}%)")
    return "\n\n```\n" + "\n".join(lines) + "\n```\n\n"


def _diff(value: float | None) -> str:
    return "-" if value is None else f"{value:.0e}".replace("e-0", "e-")


def producer_files_table() -> str:
    """The README's table of the drafters the producers' own code wrote, per variant: the producer
    package and version, how this package reads it, how far its forwards are from the producer's
    module, and stock SGLang's verdict (``scripts/producer_files.py``)."""
    result = json.loads(PRODUCER_FILES.read_text())
    lines = ["| producer (its code wrote the files) | variant | read as | taps (hidden states) | max abs diff of "
             "logits vs the producer's module: reference / SGLang class | stock SGLang |",
             "|---|---|---|---|---|---|"]
    for row in result["rows"]:
        name = row["variant"].split("/", 1)[1]
        if "refused" in row:
            lines.append(f"| `{row['package']}` | `{name}` | refused: {row['refused']} | - | - | - |")
            continue
        read = f"{row['dialect']}, {counted(row['layers'], 'layer')}"
        if row["warnings"]:
            read += "; warns: trained otherwise than its config serves"
        diffs = f"{_diff(row['reference_max_abs_diff'])} / {_diff(row.get('sglang_max_abs_diff'))}"
        if "as_served_max_abs_diff" in row:
            diffs += f" (as its config serves: {_diff(row['as_served_max_abs_diff'])})"
        lines.append(f"| `{row['package']}` | `{name}` | {read} | {row['taps_read']} | {diffs} | "
                     f"{row['stock_verdict']} |")
    return ("\n\n" + "\n".join(lines) + f"\n\n{result['machine']}, {result['date']}, commit `{result['commit']}`, "
            f"`{relative(PRODUCER_FILES)}` (`{result['command']}`).\n\n")


def real_target_headline() -> str:
    """The README's opening table: SmolLM2 served with drafters its producers' trainers made, per
    batch size, against plain decoding and stock SGLang (``benchmarks/real_target/table.py``)."""
    table, _ = real_target_modules()
    later = tuple((read_json(path), relative(path)) for path in sorted(REAL_TARGET.glob("serve_*.json"))
                  if path != REAL_TARGET_HEADLINE)
    return "\n\n" + table.headline(read_json(REAL_TARGET_HEADLINE), relative(REAL_TARGET_HEADLINE), later) + "\n\n"


def real_target_modules() -> tuple:
    """``benchmarks/real_target``'s ``table`` and ``vs_vllm`` scripts (the second imports the first by name)."""
    from tests.script_module import load_siblings

    return tuple(load_siblings("benchmarks/real_target", "table", "vs_vllm"))


def vs_vllm_table(runs: tuple[Path, Path] = VS_VLLM, page: str = "vs_vllm_h200e.md") -> str:
    """The README's table of this package on SGLang against vLLM, same GPU, target, drafters and cells
    (``benchmarks/real_target/vs_vllm.py``), with where vLLM is faster, whether both read the drafters alike and
    what a speculative step costs in each, said in words from the same files."""
    _, vs_vllm = real_target_modules()
    sglang, vllm = (read_json(path) for path in runs)
    table = vs_vllm.headline(sglang, vllm, tuple(relative(path) for path in runs))
    words = vs_vllm.where_faster(sglang, vllm, relative(REAL_TARGET / page))
    return "\n\n" + table + "\n\n" + words + "\n\n" + vs_vllm.parity_and_step_cost(sglang, vllm) + "\n\n"


def vs_vllm_8b_table() -> str:
    """:func:`vs_vllm_table` on the 8B-geometry workload."""
    return vs_vllm_table(VS_VLLM_8B, "vs_vllm_8b.md")


def real_target_summary() -> str:
    """The headline table in words, from the same run: this plugin's acceptance lengths and speedups,
    how far plain decoding's own rounds spread (the noise a speedup must clear), and how its greedy
    outputs compare with plain decoding's."""
    run = read_json(REAL_TARGET_HEADLINE)
    cells = [cell for name, arm in run["arms"].items() if name.endswith("/plugin") for cell in arm["cells"].values()]
    spread = [100 * (max(cell["tok_s"]) - min(cell["tok_s"])) / statistics.median(cell["tok_s"])
              for cell in run["arms"]["plain"]["cells"].values()]
    greedy = [cell["vs_plain"] for cell in cells if "vs_plain" in cell]
    elsewhere = sum(len(verdict["mismatch"]) for verdict in greedy)
    return (f"this plugin's drafters accept {value_or_range([c['accept_length'] for c in cells], 2)} tokens per "
            f"verify step and run at {value_or_range([c['speedup_best'] for c in cells], 2)}x plain decoding's "
            f"tokens/s, while plain decoding's own rounds spread by {value_or_range(spread, 0)}%; of "
            f"{sum(v['requests'] for v in greedy)} greedy outputs, {sum(v['exact'] for v in greedy)} equal plain "
            f"decoding's and {sum(v['near_tie'] for v in greedy)} first depart from it at a bf16 near-tie"
            + (f", {elsewhere} elsewhere" if elsewhere else ""))


def layouts_table() -> str:
    """The README's "Drafter layouts" table, from the declared producer layouts."""
    from tests.kit.producer_layouts import markdown_table

    return "\n\n" + markdown_table() + "\n"


# ---------------------------------------------------------------------------------------------
# docs/cli.md: each subcommand's synopsis and options, from the parser it runs with
# ---------------------------------------------------------------------------------------------

# What an option takes, by the argparse type that parses it; a type missing here stops the script
# rather than leave an option's value undescribed.
CLI_VALUE_KINDS = {None: "text", "int": "integer", "Path": "path", "positive_int": "integer >= 1",
                   "non_negative_float": "number >= 0", "layer_indices": "indices, e.g. 2,4,5",
                   "torch_device": "torch device (cpu, cuda, cuda:1)", "existing_file": "file"}
SYNOPSIS_WIDTH = 100


@functools.cache  # building them imports every subcommand's module, torch included
def cli_parsers() -> dict:
    from sglang_eagle_ext.cli import subcommand_parsers

    return subcommand_parsers()


def cli_arguments(command: str) -> list:
    """The arguments ``sglang-eagle COMMAND`` takes, in its parser's order, without ``--help``.
    (argparse keeps a parser's actions in ``_actions`` only; it has no public list.)"""
    return [action for action in cli_parsers()[command]._actions if action.default != argparse.SUPPRESS]


def _cli_word(action) -> str:
    """How the synopsis writes one argument."""
    if action.nargs == argparse.REMAINDER:
        return f"[-- {action.metavar or action.dest.upper()} ...]"
    if not action.option_strings:  # its choices are in the table
        return action.metavar or action.dest.upper()
    value = ("{" + ",".join(map(str, action.choices)) + "}" if action.choices
             else action.metavar or action.dest.upper())
    word = action.option_strings[-1] + ("" if action.nargs == 0 else f" {value}")
    return word if action.required else f"[{word}]"


def _cli_help(action, prog: str) -> str:
    """The option's help as ``--help`` prints it (argparse expands ``%(name)s`` from the action)."""
    return (action.help or "") % {**vars(action), "prog": prog}


def cli_options(command: str) -> str:
    """``sglang-eagle COMMAND``'s synopsis and a table of every argument: what it takes, its default
    and its help, so that an option added to the parser is documented once this script runs (and
    ``--check`` fails until it does)."""
    words, line, lines = [f"sglang-eagle {command}"] + [_cli_word(a) for a in cli_arguments(command)], "", []
    for word in words:
        if line and len(line) + 1 + len(word) > SYNOPSIS_WIDTH:
            lines.append(line)
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    rows = ["| argument | takes | default | what it does |", "|---|---|---|---|"]
    for action in cli_arguments(command):
        name = (", ".join(f"`{option}`" for option in action.option_strings) if action.option_strings
                else f"`{_cli_word(action)}`")
        kind = getattr(action.type, "__name__", action.type)
        takes = ("flag" if action.nargs == 0 else "the rest of the line" if action.nargs == argparse.REMAINDER
                 else "one of " + ", ".join(f"`{choice}`" for choice in action.choices) if action.choices
                 else CLI_VALUE_KINDS[kind])
        default = ("required" if action.required and action.option_strings
                   else "-" if action.default is None or action.default is False or not action.option_strings
                   else f"`{action.default}`")
        help_text = _cli_help(action, cli_parsers()[command].prog).replace("|", "\\|")
        rows.append(f"| {name} | {takes} | {default} | {help_text} |")
    return "\n\n```\n" + "\n".join(lines + [line]) + "\n```\n\n" + "\n".join(rows) + "\n\n"


def _stock_loads(stock: dict) -> str:
    if not stock.get("checked"):
        return f"not checked: {stock.get('reason')}"
    if stock.get("loads") is False and "refusal" in stock:
        return f"no: \"{stock['refusal']}\""
    parts = []
    if stock.get("built_with"):
        parts.append(f"only with `{stock['built_with']}` written into its config.json (`{stock['architectures'][0]}` "
                     "resolves to the Transformers fallback)")
    else:
        parts.append("yes")
    parts.append(f"builds {counted(stock['depth'], 'layer')}")
    if stock.get("never_loaded"):
        parts.append(f"{counted(len(stock['never_loaded']), 'parameter')} never loaded "
                     f"(`{stock['never_loaded'][0]}`, ...)")
    if stock.get("dropped"):
        parts.append(f"{counted(len(stock['dropped']), 'checkpoint tensor')} dropped (`{stock['dropped'][0]}`, ...)")
    if stock.get("load_errors"):
        parts.append(f"load_weights fails: {stock['load_errors'][0]}")
    return "; ".join(parts)


def _stock_forward(stock: dict) -> str:
    forward = stock.get("forward")
    if not forward:
        return "-"
    if not forward["compared"]:
        return f"not compared: {forward['reason']}"
    if forward.get("error"):
        return f"no: the forward fails ({forward['error']})"
    if forward["equal"]:
        return "yes"
    diff = forward["max_abs_diff"]
    def largest(a, b):
        return "NaN" if "NaN" in (a, b) else f"{max(a, b):.2g}"
    return (f"no: logits differ up to {largest(diff['prefill_logits'], diff['decode_logits'])}, carried state up to "
            f"{largest(diff['prefill_carried'], diff['decode_carried'])}; decode argmax "
            f"{'equal' if forward['decode_argmax_equal'] else 'differs'}")


def _ours(ours: dict) -> str:
    if "not_checked" in ours:
        return f"not checked: {ours['not_checked']}"
    if ours["equal"]:
        return "yes"
    return f"refused: {ours['refused']}" if "refused" in ours else f"no: {ours['difference']}"


def stock_vs_plugin_table() -> str:
    """Producer layouts x SGLang release: what stock SGLang (plugin off) and this plugin do."""
    files = sorted(STOCK_VS_PLUGIN.glob("stock_vs_plugin_sglang-*.json"))
    lines = ["| layout | SGLang | stock loads it? | stock's forward equals the reference? "
             "| ours equals the reference? |",
             "|---|---|---|---|---|"]
    sources = []
    for path in files:
        result = read_json(path)
        sources.append(f"SGLang {result['sglang']}: {result['device']}, {result['date']}, `{result['commit']}`, "
                       f"`{relative(path)}`")
        for row in result["rows"]:
            lines.append(f"| {row['label']} | {result['sglang']} | {_stock_loads(row['stock'])} | "
                         f"{_stock_forward(row['stock'])} | {_ours(row['ours'])} |")
    return ("\n\n" + "\n".join(lines) + "\n\nStock: SGLang's own `get_config`, model registry, built-in "
            "`LlamaForCausalLMEagle3` and `load_weights` with the plugin off (`SGLANG_EAGLE_EXT=0`), then "
            "the EAGLE worker's embedding sharing; forward: a prefill on seeded target aux states and one "
            "decode step, against the float reference drafter (`sglang_eagle_ext/reference/`). "
            "Generated by `python scripts/stock_vs_plugin.py` (" + "; ".join(sources) + ").\n\n")


def _named(rows: list[dict]) -> str:
    return ", ".join(row["label"] for row in rows)


def _acceptance_cell(row: dict) -> str:
    """``stock / ours`` acceptance length, how an arm failed, and the per-prompt tally."""
    if not row.get("written", True):
        return f"not run: {row['reason']}"

    def arm(served: dict) -> str:
        if not served["served"]:
            return "fails to serve" if served is not row["ours"] else f"fails ({served['error']})"
        return f"{served['accept_length']:.2f}" + ("" if served["equals_plain_greedy"] else "†")

    cell = arm(row["stock"]) + (f" (edited: {arm(row['stock_edited'])})" if "stock_edited" in row else "")
    cell += " / " + arm(row["ours"])
    stock_arm = row.get("stock_edited", row["stock"])
    if stock_arm["served"] and row["ours"]["served"]:  # every prompt generates the same number of tokens
        stock, ours = stock_arm["verify_steps"], row["ours"]["verify_steps"]
        cell += f" ({sum(o < s for s, o in zip(stock, ours))}:{sum(s < o for s, o in zip(stock, ours))})"
    return cell


def acceptance_files() -> list[Path]:
    """The served side-by-side results: CPU (chain) first, then GPU (tree), one file per target."""
    return [path for folder in (STOCK_VS_PLUGIN, STOCK_VS_PLUGIN_GPU)
            for path in sorted(folder.glob("stock_vs_plugin_acceptance_sglang-*.json"))]


def stock_acceptance() -> str:
    """Trained drafters served by stock and by this plugin, a column per result file
    (scripts/stock_vs_plugin_acceptance.py)."""
    results = [(path, read_json(path)) for path in acceptance_files()]
    releases = sorted({result["sglang"] for _, result in results})
    columns = []
    for _, result in results:
        drafting = result["drafting"]
        columns.append(("" if len(releases) == 1 else f"SGLang {result['sglang']}, ")
                       + f"{result['device']}, {drafting['kind']} {drafting['topk']}/{drafting['num_steps']}/"
                       f"{drafting['draft_tokens']}, {result['target']['name'].split(' (')[0]}")
    labels = {}
    for _, result in results:
        for row in result["rows"]:
            labels.setdefault(row["layout"], row["label"])
    lines = ["| layout | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for layout, label in labels.items():
        cells = []
        for _, result in results:
            row = next((r for r in result["rows"] if r["layout"] == layout), None)
            cells.append(_acceptance_cell(row) if row else "not run")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    targets = sorted({result["target"]["name"] for _, result in results})
    sources = []
    for path, result in results:
        runs = sorted({(row["run"]["date"], row["run"]["commit"]) for row in result["rows"]})
        sources.append(f"`{relative(path)}` ({result['prompts']} prompts x {result['new_tokens_per_prompt']} "
                       f"tokens; {', '.join(f'{date} `{commit}`' for date, commit in runs)})")
    return ("\n\n" + "\n".join(lines) + "\n\n" + (f"SGLang {releases[0]}. " if len(releases) == 1 else "")
            + "Cells: acceptance length with stock / with this plugin; (a:b): the prompts on which this plugin "
            "/ stock needed fewer verify steps; edited: stock serving a copy whose config.json names the "
            "architecture it builds its EAGLE-3 class for, where it refuses the drafter's own; †: the output "
            "departs from float32 plain greedy decoding (the file's note says why). Targets: " + "; ".join(targets)
            + ". Sources: " + "; ".join(sources) + ".\n\n")


def stock_summary() -> str:
    """One line per SGLang release checked: what stock does with the producer layouts, and what
    this package fixes (from the stock-vs-plugin results)."""
    lines = []
    for path in sorted(STOCK_VS_PLUGIN.glob("stock_vs_plugin_sglang-*.json")):
        result = read_json(path)
        rows = result["rows"]
        refused = [r for r in rows if r["stock"].get("loads") is False and "refusal" in r["stock"]]
        override = [r for r in rows if r["stock"].get("built_with") and r not in refused]
        wrong = [r for r in rows if r not in refused + override
                 and (r["stock"].get("forward", {}).get("equal") is False or r["stock"].get("never_loaded"))]
        right = [r for r in rows if r not in override and r["stock"].get("forward", {}).get("equal") is True]
        unchecked = [r for r in rows if not r["stock"].get("checked")]
        uncompared = [r for r in rows if r["stock"].get("checked") and r not in refused + override + wrong + right]
        ours = [r for r in rows if r["ours"].get("equal")]
        checked = [r for r in rows if "not_checked" not in r["ours"]]
        fixed = (f"this package serves {len(ours)} of {len(checked)} checked as the reference drafter computes"
                 if checked else "this package's side not checked on this release ("
                 + rows[0]["ours"]["not_checked"] + ")")
        line = (f"- **SGLang {result['sglang']}**: of {len(rows)} producer layouts, stock refuses {len(refused)}"
                + (f" ({_named(refused)})" if refused else "")
                + f", builds {len(override)} only with an architecture override"
                + (f" ({_named(override)}; its forward then differs for "
                   f"{sum(r['stock'].get('forward', {}).get('equal') is False for r in override)})" if override else "")
                + f", loads {len(wrong)} but misreads it (a different forward, or parameters never loaded)"
                + (f" ({_named(wrong)})" if wrong else "")
                + f" and serves {len(right)} correctly"
                + (f"; it loads {len(uncompared)} whose forward is not compared ({_named(uncompared)}: "
                   + uncompared[0]["stock"].get("forward", {}).get("reason", "no forward") + ")" if uncompared else "")
                + (f"; stock not checked on {len(unchecked)} ({unchecked[0]['stock']['reason']})" if unchecked else "")
                + f"; {fixed} ({result['device']}, {result['date']}, "
                f"`{relative(path)}`).")
        lines.append(line)
    return "\n\n" + "\n".join(lines) + "\n\n"


BLOCKS: dict = {
    "real-target": real_target_headline,
    "real-target-summary": real_target_summary,
    "vs-vllm": vs_vllm_table,
    "vs-vllm-8b": vs_vllm_8b_table,
    "layouts": layouts_table,
    "producer-files": producer_files_table,
    "stock-vs-plugin": stock_vs_plugin_table,
    "stock-summary": stock_summary,
    "stock-acceptance": stock_acceptance,
    "versions": versions_table,
    "gpu-row-releases": gpu_row_releases,
    "builtin-speed": builtin_speed,
    "tree-kernel-figures": tree_kernel_figures,
    "fused-verify-e2e": fused_verify_e2e,
    "step-profile": step_profile,
    "demo-cpu-time": demo_cpu_time,
    "demo-cpu-range": demo_cpu_range,
    "demo-cpu-source": demo_cpu_source,
    "demo-cpu-vendors": demo_cpu_vendors,
    "eval-setup": eval_setup,
    "eval-table": eval_table,
    **{f"cli-{command}": functools.partial(cli_options, command) for command in COMMANDS},
}

# ---------------------------------------------------------------------------------------------
# Rewriting the pages
# ---------------------------------------------------------------------------------------------

def pages() -> list[Path]:
    """The files whose generated blocks this script writes: the README and every page of docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page_name(page: Path) -> str:
    """``page`` as a reader finds it: relative to the README's folder."""
    return page.relative_to(README.parent).as_posix()


def with_blocks(text: str, blocks: dict, page: str = "README.md") -> str:
    """``text`` (the page ``page``) with every generated block's body replaced (a ValueError for a
    block with no renderer, so a typo in a marker cannot leave stale text behind)."""
    def body(match: re.Match) -> str:
        name = match.group("name")
        if name not in blocks:
            raise ValueError(f"{page} has a generated block {name!r} that {relative(Path(__file__))} "
                             f"does not render (known: {', '.join(sorted(blocks))})")
        return f"<!-- generated:{name}:begin -->{blocks[name]()}<!-- generated:{name}:end -->"
    return MARKER.sub(body, text)


def generated_pages(blocks: dict) -> dict[Path, tuple[str, str]]:
    """Each page's text now and as this script writes it; a ValueError for a block with no renderer
    or a renderer no page shows (a block dropped from every page would leave its figures unchecked)."""
    texts = {page: page.read_text(encoding="utf-8") for page in pages()}
    shown = {match.group("name") for text in texts.values() for match in MARKER.finditer(text)}
    unshown = sorted(set(blocks) - shown)
    if unshown:
        raise ValueError(f"no page shows the generated blocks {', '.join(unshown)}; place their markers in "
                         f"README.md or a page of docs/, or drop their renderers")
    return {page: (text, with_blocks(text, blocks, page_name(page))) for page, text in texts.items()}


def record_tests(log_path: Path) -> int:
    """Append the run in ``log_path`` to the test-run record (a clear error for a log with no summary)."""
    import importlib.metadata

    try:
        record = suite_record(log_path.read_text(encoding="utf-8"), importlib.metadata.version("sglang"))
    except (OSError, ValueError) as error:
        print(f"{log_path}: {error}; give the output of `{RECORD_SUITE_COMMAND}`", file=sys.stderr)
        return 2
    runs = read_json(CPU_TEST_RUNS)
    write_atomically(CPU_TEST_RUNS, json.dumps({**runs, "runs": [*runs["runs"], record]}, indent=1) + "\n")
    print(f"{relative(CPU_TEST_RUNS)}: recorded {record['passed']} passed, {record['failed']} failed, "
          f"{record['skipped']} skipped of {record['collected']} collected; now run python scripts/readme_numbers.py")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="only report whether README.md and docs/*.md are what this script writes")
    mode.add_argument("--measure-cpu", action="store_true",
                      help="run the demo and eval on two fresh builds, write this CPU's record "
                           f"({relative(CPU_RECORDS)}/demo_eval*.json)")
    mode.add_argument("--check-demo", action="store_true",
                      help="run the demo and eval on one fresh build; exit 1 when a figure falls outside the range "
                           "the CPUs measured")
    mode.add_argument("--record-tests", type=Path, metavar="LOG",
                      help=f"append the full-suite run whose pytest output is LOG to {relative(CPU_TEST_RUNS)}")
    parser.add_argument("--cli", type=Path, default=ROOT / ".venv" / "bin" / "sglang-eagle",
                        help="the sglang-eagle executable --measure-cpu and --check-demo run (default: .venv's)")
    args = parser.parse_args(argv)
    if args.measure_cpu:
        record = measure_cpu(args.cli)
        write_atomically(record_path(record["machine"]["cpu_model"]), json.dumps(record, indent=1) + "\n")
        return 0
    if args.check_demo:
        return check_demo(args.cli)
    if args.record_tests:
        return record_tests(args.record_tests)
    try:
        texts = generated_pages(BLOCKS)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    changed = [page for page, (current, generated) in texts.items() if generated != current]
    if args.check:
        for page in changed:
            print(f"{page_name(page)}: generated blocks are out of date; run python scripts/readme_numbers.py",
                  file=sys.stderr)
        stale = stale_test_count(cpu_test_runs(), collected_tests())
        if stale:
            print(stale, file=sys.stderr)
        return 1 if changed or stale else 0
    for page in changed:
        write_atomically(page, texts[page][1])
    return 0



if __name__ == "__main__":
    sys.exit(main())
