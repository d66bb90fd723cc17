"""Where a Python import's time goes on this host: the few costs an import is made of, each timed alone.

An engine's start is mostly Python importing SGLang (7,546 modules: 33.4 s on the H200 host of 2026-11-29, 4.9 s on
this project's CPU machine). An import stats and reads its bytecode file, executes the module's body and touches
fresh memory; this times each of those alone, on the installed package's own bytecode files and on the same files
copied to ``/dev/shm``, so that the cause (the file system, system calls, page faults or plain CPU) is read from one
run rather than guessed; the package's bytecode is written first (``compileall``, every core; the kit installs
with pip's ``--no-compile``, so the first engine's import would otherwise write it: from the tenth vs-vLLM run on,
the first arm's ``start_s`` no longer includes that). Then the import itself: ``python3 -X importtime`` of the
module an engine's scheduler imports, in a fresh interpreter, with the modules whose own bodies took longest:
whether the time is spread over thousands of modules or sits in a few that do work at import (a device query, a
JIT build). About 50 s on the GPU host; ``run_gpu.sh`` runs it beside the setup phase, and the phases that measure
wait for it (90 s at most). Prints one JSON object::

    python3 benchmarks/real_target/host_probe.py [PACKAGE [MODULE]] > host_probe.json

PACKAGE (default ``sglang``): the installed package whose ``__pycache__`` files are read and written; MODULE
(default ``sglang.srt.managers.scheduler``): the module whose import is profiled.
"""

from __future__ import annotations

import importlib.util
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time

FILES = 2000  # bytecode files read per pass
STATS = 20000
LOOP = 3_000_000
MEMORY_MIB = 512


def seconds(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def python_loop() -> None:
    total = 0
    for i in range(LOOP):
        total += i * i


def package_root(package: str) -> str:
    return os.path.dirname(importlib.util.find_spec(package).origin)


def bytecode_files(package: str) -> list[str]:
    """Up to FILES of the package's bytecode files (written by an earlier import)."""
    root = package_root(package)
    found = []
    for folder, _, names in os.walk(root):
        found += [os.path.join(folder, name) for name in names if name.endswith(".pyc")]
        if len(found) >= FILES:
            break
    return found[:FILES]


def read_all(paths: list[str]) -> None:
    for path in paths:
        os.stat(path)
        with open(path, "rb") as handle:
            handle.read()


def stat_many(path: str) -> None:
    for _ in range(STATS):
        os.stat(path)


def touch_fresh_memory() -> None:
    """One write per 4 KiB page of a fresh anonymous mapping: a page fault each."""
    size = MEMORY_MIB << 20
    region = mmap.mmap(-1, size)
    for offset in range(0, size, 4096):
        region[offset] = 1
    region.close()


def mounts(paths: dict, table: str = "/proc/mounts") -> dict:
    """The file system type holding each named path (the longest mount point above it), by ``table``."""
    with open(table, encoding="utf-8") as handle:
        table = [line.split()[1:3] for line in handle]

    def holder(path: str):
        path = os.path.realpath(path)
        under = [(len(point), order, kind) for order, (point, kind) in enumerate(table)
                 if path == point or path.startswith(point.rstrip("/") + "/")]
        return max(under)[2] if under else None  # the longest mount point; of equal ones the last mounted

    return {name: holder(path) for name, path in paths.items()}


IMPORT_LIMIT_S = 45  # the profile's import ends by then: the measuring phases wait 90 s at most for the probe
BYTECODE_LIMIT_S = 30


def import_profile(module: str, top: int = 15, limit: float = IMPORT_LIMIT_S) -> dict:
    """``python3 -X importtime -c "import MODULE"`` in a fresh interpreter: its wall time, the modules it imported,
    the sum of their own times, and the ``top`` modules by own time (ms), from the lines Python writes to stderr
    (``import time: SELF_US | CUMULATIVE_US | NAME``); an import still running after ``limit`` s is stopped
    (``exit`` "timeout", its lines so far counted)."""
    exit_code, stderr, wall = run_limited(["-X", "importtime", "-c", f"import {module}"], limit)
    own = []
    for line in stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if line.startswith("import time:") and len(fields) == 3 and fields[0].strip().isdigit():
            own.append((int(fields[0]), fields[2].strip()))
    own.sort(reverse=True)
    return {"module": module, "exit": exit_code, "seconds": round(wall, 2), "modules": len(own),
            "own_s_sum": round(sum(us for us, _ in own) / 1e6, 2),
            "top_own_ms": [[name, round(us / 1e3, 1)] for us, name in own[:top]]}


def write_bytecode(package: str, limit: float = BYTECODE_LIMIT_S) -> dict:
    """The package's bytecode written by ``compileall`` on every core (files already current are only checked):
    the seconds it took and its exit code ("timeout" past ``limit`` s)."""
    exit_code, _, wall = run_limited(["-m", "compileall", "-q", "-j", "0", package_root(package)], limit)
    return {"seconds": round(wall, 2), "exit": exit_code}


def run_limited(arguments: list[str], limit: float) -> tuple[int | str, str, float]:
    """This interpreter run afresh with ``arguments``, stopped after ``limit`` s: its exit code ("timeout" where
    stopped), what it wrote to stderr by then, and its wall time."""
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, *arguments], capture_output=True, text=True, check=False,
                              timeout=limit)
        exit_code, stderr = done.returncode, done.stderr
    except subprocess.TimeoutExpired as stopped:  # its output so far, as bytes whatever text= asked
        exit_code = "timeout"
        stderr = stopped.stderr.decode(errors="replace") if isinstance(stopped.stderr, bytes) else stopped.stderr or ""
    return exit_code, stderr, time.perf_counter() - started


def probe(package: str, module: str) -> dict:
    # first the bytecode an install without it lacks (the kit's: pip's --no-compile), so that the reads below and
    # the import profile read it, as every engine's import after the first does
    written = write_bytecode(package)
    files = bytecode_files(package)
    record = {"python": sys.version.split()[0], "cores": os.cpu_count(), "package": package,
              "write_bytecode": written, "pyc_files": len(files),
              "mounts": mounts({package: os.path.dirname(files[0]) if files else "/tmp", "/tmp": "/tmp",
                                "/dev/shm": "/dev/shm"}),
              "python_loop_s": round(seconds(python_loop), 3),
              "stat_us": round(1e6 * seconds(lambda: stat_many(files[0] if files else "/tmp")) / STATS, 2),
              "page_fault_us": round(1e6 * seconds(touch_fresh_memory) / (MEMORY_MIB << 8), 2)}
    if files:
        read_all(files)  # warm whatever cache the file system keeps
        record["read_pyc_ms_each"] = round(1e3 * seconds(lambda: read_all(files)) / len(files), 3)
        try:  # the same files in memory; gone again whatever happens (a host's /dev/shm may be small)
            with tempfile.TemporaryDirectory(dir="/dev/shm") as copy:
                copies = [shutil.copy(path, os.path.join(copy, f"{index}.pyc")) for index, path in enumerate(files)]
                read_all(copies)
                record["read_pyc_ms_each_dev_shm"] = round(1e3 * seconds(lambda: read_all(copies)) / len(copies), 3)
        except OSError as exc:
            record["read_pyc_ms_each_dev_shm"] = f"not measured: {exc}"
    for name in ("json", "torch"):  # a fresh interpreter each: the interpreter's own start, then one big import
        record[f"import_{name}_s"] = round(seconds(lambda: subprocess.run(
            [sys.executable, "-c", f"import {name}"], check=False, capture_output=True)), 2)
    record["import_profile"] = import_profile(module)
    return record


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1] if len(sys.argv) > 1 else "sglang",
                           sys.argv[2] if len(sys.argv) > 2 else "sglang.srt.managers.scheduler"), indent=1))
