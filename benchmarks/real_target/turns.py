"""Two engines' benchmarks on one GPU, taking turns: an engine starts beside the other's start, and measures alone.

On the real target an arm is mostly its engine's start (SGLang 69-130 s, vLLM 107-151 s on an H200, 2026-11-29,
against 20-40 s of measuring), so issue 38's twelve arms did not fit one lease of one GPU one after the other.
With turns, ``serve_bench.py`` and ``vllm_bench.py`` run side by side on the same GPU (``install_and_start.sh``'s
``vllm+serve`` where one GPU is lent): each arm's start overlaps the other engine's start, and no arm measures
while anything else starts or measures. The engine that waits holds its GPU memory (each takes a smaller share
of it) and its processes idle.

The turn is a lock on one file, both benchmarks' ``--turns PATH`` (without it, no turns: each benchmark alone on
its GPU): a start holds it shared, so two starts overlap; a measurement holds it exclusively. Both benchmarks hold
a start's turn from spawning the engine to its answer that it is ready (its untimed warm-up included), and a
measurement's from the first cell to the engine's shutdown (a shutdown frees GPU memory, which synchronises the
device).
"""

from __future__ import annotations

import fcntl
import time
from contextlib import contextmanager
from typing import Iterator

KINDS = {"start": fcntl.LOCK_SH, "measure": fcntl.LOCK_EX}


@contextmanager
def turn(kind: str, path: str | None) -> Iterator[float | None]:
    """Hold the turn for ``kind`` (``"start"`` or ``"measure"``) on the lock file ``path``; yields the seconds
    waited for it, or None where there are no turns (``path`` None)."""
    mode = KINDS[kind]
    if not path:
        yield None
        return
    asked = time.perf_counter()
    with open(path, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, mode)
        try:
            yield time.perf_counter() - asked
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
