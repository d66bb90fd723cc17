"""The soak's verdicts, as pure functions of what the run recorded (``benchmarks/soak.py``).

Each check returns ``{"pass": bool, ...the numbers it was decided on}``.
"""

from __future__ import annotations

import re
import statistics

# The project's bf16 near-tie rule (docs/benchmarks.md, supported SGLang releases): a greedy output that first differs
# where the reference's top-1 / top-2 log-probability margin is at most this many nats.
NEAR_TIE_NATS = 1.0
# Memory may grow by this share of its early level, or by the floor, whichever is larger, before the
# run counts as leaking: allocator caches settle in steps of a few MiB, a leak grows without bound.
MEMORY_GROWTH_SHARE = 0.05
MEMORY_GROWTH_FLOOR_MIB = 64.0
WARM_UP_SHARE = 0.1  # the first tenth of the load: caches, graphs and pools fill
MIN_MEMORY_SAMPLES = 8  # after warm-up; fewer cannot tell a trend from noise
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


def first_difference(reference_tokens: list[str], text: str) -> int:
    """The index of the first reference token that ``text`` does not reproduce (the reference's
    tokens joined give its text); ``len(reference_tokens)`` when ``text`` extends it."""
    joined, end = "".join(reference_tokens), 0
    for index, token in enumerate(reference_tokens):
        end += len(token)
        if text[:end] != joined[:end]:
            return index
    return len(reference_tokens)


def classify_greedy(reference: dict, text: str) -> str:
    """``exact``, ``near-tie`` (the first differing token is one where the reference's top-2 margin is
    at most :data:`NEAR_TIE_NATS`) or ``mismatch``. ``reference``: the sequential run's ``text``,
    ``tokens`` and per-token ``margins`` (top-1 minus top-2 log-probability; None where unknown)."""
    if text == reference["text"]:
        return "exact"
    index = first_difference(reference["tokens"], text)
    margin = reference["margins"][index] if index < len(reference["margins"]) else None
    if margin is not None and margin <= NEAR_TIE_NATS:
        return "near-tie"
    return "mismatch"


def greedy_check(classes: dict[str, int], rule: str) -> dict:
    """``rule`` ``exact``: every greedy output under load equals its sequential output; ``near-tie``:
    every one that differs first differs at a near-tie of the reference."""
    allowed = {"exact"} if rule == "exact" else {"exact", "near-tie"}
    compared = sum(classes.values())
    failing = sum(count for name, count in classes.items() if name not in allowed)
    return {"pass": compared > 0 and failing == 0, "rule": rule, "compared": compared,
            **{name: classes.get(name, 0) for name in ("exact", "near-tie", "mismatch")}}


def count_check(good: int, bad: int, what: str) -> dict:
    """Pass when at least one ``what`` was checked and none was bad."""
    return {"pass": good > 0 and bad == 0, "checked": good + bad, "failed": bad, "what": what}


def traceback_check(log_text: str) -> dict:
    lines = log_text.splitlines()
    hits = [index for index, line in enumerate(lines) if TRACEBACK.search(line)]
    first = "\n".join(lines[hits[0]:hits[0] + 12]) if hits else ""
    return {"pass": not hits, "tracebacks": len(hits), "first": first, "log_lines": len(lines)}


def memory_check(samples: list[tuple[float, float]], load_start: float, load_end: float, what: str) -> dict:
    """``samples``: (time, MiB). After warm-up, the median of the last quarter may exceed the median of
    the first quarter by at most max(share x first, floor)."""
    warm = load_start + WARM_UP_SHARE * (load_end - load_start)
    values = [mib for when, mib in samples if warm <= when <= load_end]
    if len(values) < MIN_MEMORY_SAMPLES:
        return {"pass": False, "what": what, "samples": len(values),
                "reason": f"fewer than {MIN_MEMORY_SAMPLES} samples after warm-up"}
    quarter = len(values) // 4
    first, last = statistics.median(values[:quarter]), statistics.median(values[-quarter:])
    tolerance = max(MEMORY_GROWTH_SHARE * first, MEMORY_GROWTH_FLOOR_MIB)
    return {"pass": last - first <= tolerance, "what": what, "samples": len(values),
            "first_quarter_mib": round(first, 1), "last_quarter_mib": round(last, 1),
            "growth_mib": round(last - first, 1), "tolerance_mib": round(tolerance, 1),
            "max_mib": round(max(values), 1)}
