"""Build the demo's models in a child process whose arithmetic does not depend on the CPU it runs on.

Training amplifies the last bit of every float, so two builds that round one operation differently
end with different models and different acceptance figures. On one AVX-512 Xeon, the tiny target
built with ATen's and MKL's AVX2 code paths had other weights than the one built with their
AVX-512 paths (the paths an AVX2-only EPYC and a Xeon pick by default). The child therefore runs
single-threaded on the AVX2 paths of ATen (``ATEN_CPU_CAPABILITY``) and MKL (``MKL_CBWR``, its
conditional numerical reproducibility, strict), which every x86-64 CPU the demo targets has. Both
are read when torch and MKL start, hence a fresh process.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

TARGET_DIR = "target"
X86_64 = ("x86_64", "AMD64")
# Read once, when ATen dispatches its first kernel and MKL makes its first call.
X86_PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT"}
# One thread: the split of a reduction among threads must not depend on the machine's cores.
THREAD_PINS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def pinned_environment(env: dict, machine: str | None = None) -> dict:
    """``env`` with the settings that make a build's floats the same on every CPU of its kind."""
    pins = dict(THREAD_PINS)
    if (machine or platform.machine()) in X86_64:
        pins.update(X86_PINS)
    return {**env, **pins}


def drafter_dir(layout: str) -> str:
    """Where under the work directory the drafter written in ``layout`` lives."""
    return "drafter-2layer" if layout == "sglang" else f"drafter-{layout}"


def build_models(workdir: str, layout: str = "sglang") -> int:
    """Build (or reuse) the tiny target and the drafter distilled for ``layout`` (written in it) under
    ``workdir`` in a pinned child; its exit status (its progress and any error go to this process's
    output)."""
    child = [sys.executable, "-m", "sglang_eagle_ext.demo.build", workdir, layout]
    return subprocess.run(child, env=pinned_environment(dict(os.environ))).returncode


def main(argv: list[str] | None = None) -> int:
    import time

    from sglang_eagle_ext.sglang.compat import cpu

    cpu.install()  # before transformers imports a torchvision built for another torch
    from sglang_eagle_ext.demo.distill import LAYOUT_SETTINGS, build_tiny_drafter
    from sglang_eagle_ext.demo.tiny_target import build_tiny_target

    workdir, layout = argv if argv is not None else sys.argv[1:]
    last_report = [0.0]

    def progress(step, total, loss):
        if time.monotonic() - last_report[0] > 10 or step == total:
            last_report[0] = time.monotonic()
            print(f"[demo]   training step {step}/{total}, loss {loss:.3f}", flush=True)

    try:
        target = build_tiny_target(os.path.join(workdir, TARGET_DIR))
        print(f"[demo] target ready: {target}", flush=True)
        settings = LAYOUT_SETTINGS[layout]
        print(f"[demo] distilling (or reusing) a {settings.num_layers}-layer EAGLE-3 drafter from the target's "
              f"own greedy text, written in the {layout} layout (first run only) ...", flush=True)
        drafter = build_tiny_drafter(os.path.join(workdir, drafter_dir(layout)), target, settings, progress,
                                     layout=layout)
    except FileExistsError as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2
    print(f"[demo] drafter ready: {drafter}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
