"""The drafting shape chosen per decode step from measured costs and live acceptance (issue 39, stage A of
``docs/adaptive-shape.md``): speculation off or a chain depth, per batch size.

:class:`ShapePolicy` takes the place of stock SGLang's ``AdaptiveSpeculativeParams`` (``--speculative-adaptive``,
SGLang 0.5.21 and later; the binding is :mod:`.compat.adaptive_shape`). SGLang keeps doing what it does for
its own adaptive mode: one set of CUDA graphs per candidate depth (steps ``S``, top-k 1, ``S + 1`` draft
tokens; ``S = 0`` is speculation off: the target verifies only its own bonus token, and the drafter's KV is
kept current), switched between decode steps. What changes is the choice. Stock steps the depth up or down
from a moving average of accepted drafts and never weighs what a step costs; this policy picks, for the
running batch size, the depth with the most accepted tokens per second:

    G(S, b) = E[tokens per step | S] / T(S, b)

* ``T(S, b)``: the median of the last :data:`WINDOW` step periods measured while depth ``S`` ran at batch
  bucket ``b`` (the time between consecutive verify results on the host, which is the step throughput the
  scheduler sees, overlap included). Buckets are powers of two of the padded batch size.
* ``E[tokens | S] = 1 + sum_{j <= S} prod_{i <= j} a_i``: ``a_j``, the rate at which draft ``j`` is accepted
  when drafts ``1 .. j-1`` were, counted from every verify result's accepted drafts per request (pooled over
  batch sizes, decayed by :data:`DECAY` per result: acceptance belongs to the drafter and the traffic, not
  to the batch size). Depths never drafted take the deepest measured rate. ``E[tokens | 0] = 1``.

A depth with fewer than :data:`MIN_SAMPLES` periods at a bucket is probed for :data:`PROBE_STEPS` steps
before the bucket exploits; every :data:`REPROBE_EVERY` decisions of a bucket the longest-unmeasured other
depth is probed again (costs drift with context length). A switch needs the best gain to beat the running
depth's by :data:`MARGIN` after at least :data:`MIN_DWELL` steps at it. Each verify result is matched to
the decision it answers (the oldest pending one: under the overlap scheduler the next step is decided before
the last result arrives); the first step after a switch is not timed (it carries the switch). Each choice
that changes a bucket's depth is logged, at most once per :data:`LOG_INTERVAL_S` per bucket, with its
reason.

Lossless as every speculative path: each step is verified by SGLang's own rule for that step's depth, so a
switch changes what is proposed, never what is accepted. ``cycle`` (the switch's test mode) runs the
candidate depths round-robin, one per step, for checking exactly that.

Standard library only; no SGLang import (the binding hands it SGLang's config).
"""

from __future__ import annotations

import bisect
import json
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

DEFAULT_STEPS = (0, 1, 3)  # off, chain 1/1/2, chain 3/1/4: within stock's default candidates, which size SGLang
WINDOW = 32
MIN_SAMPLES = 6
PROBE_STEPS = 12
REPROBE_EVERY = 1024
MARGIN = 0.05
MIN_DWELL = 16
PENDING = 4  # decisions awaiting their results, at most (SGLang's overlap keeps one in flight)
DECAY = 0.995
LOG_INTERVAL_S = 10.0


class DepthAcceptance:
    """Acceptance per draft depth, from verify results: accepted drafts per request under a depth-``S``
    chain tell, for each ``j <= S``, whether draft ``j`` was tried (``j - 1`` accepted) and accepted."""

    def __init__(self, decay: float = DECAY):
        self.decay = decay
        self.tried: list[float] = []  # index j - 1: requests whose draft j was tried
        self.accepted: list[float] = []

    def observe(self, accepted_drafts: list[int], steps: int) -> None:
        """One verify result of a depth-``steps`` chain: each request's accepted drafts (0 .. ``steps``)."""
        if steps <= 0 or not accepted_drafts:
            return
        while len(self.tried) < steps:
            self.tried.append(0.0)
            self.accepted.append(0.0)
        self.tried = [count * self.decay for count in self.tried]
        self.accepted = [count * self.decay for count in self.accepted]
        for count in accepted_drafts:
            count = min(max(int(count), 0), steps)
            for depth in range(min(count + 1, steps)):  # drafts 1 .. count accepted, count + 1 rejected
                self.tried[depth] += 1
                self.accepted[depth] += depth < count

    def rates(self) -> list[float]:
        """``a_j`` for each depth measured so far (``j = 1 ..``): accepted / tried."""
        return [accepted / tried for accepted, tried in zip(self.accepted, self.tried) if tried > 0]

    def expected_tokens(self, steps: int) -> float | None:
        """Tokens per request per step under a depth-``steps`` chain (the bonus token included); ``None``
        for a positive depth before any draft was measured."""
        if steps == 0:
            return 1.0
        rates = self.rates()
        if not rates:
            return None
        total, reach = 1.0, 1.0
        for depth in range(steps):
            reach *= rates[min(depth, len(rates) - 1)]
            total += reach
        return total


@dataclass
class _Bucket:
    """One batch-size bucket's running depth and its decision counters."""

    steps: int
    decisions: int = 0
    since_switch: int = 0
    probe_left: int = 0
    cycle: int = 0
    last_log: float = float("-inf")
    measured_at: dict[int, int] = field(default_factory=dict)  # depth -> decisions count at its last period


def load_candidates(cfg_path: str | None) -> dict[int, list[int]]:
    """Candidate depths per batch-size key, from SGLang's adaptive config (its file format: integer-string
    keys, each with ``candidate_steps``); every batch size takes :data:`DEFAULT_STEPS` without a file."""
    if cfg_path is None:
        return {1: list(DEFAULT_STEPS)}
    with open(cfg_path, encoding="utf-8") as handle:
        config = json.load(handle)
    keyed = {int(key): sorted(set(entry["candidate_steps"])) for key, entry in config.items() if key.isdigit()}
    if not keyed:
        raise ValueError(f"{cfg_path}: no integer batch-size key with candidate_steps (SGLang's adaptive config)")
    return keyed


class ShapePolicy:
    """SGLang's ``AdaptiveSpecPolicy`` (``speculative/adaptive_runtime_state.py``, 0.5.21+), choosing the depth
    with the most accepted tokens per second for the running batch size. Constructed as SGLang constructs
    ``AdaptiveSpeculativeParams``: ``(initial_steps=..., cfg_path=...)``."""

    def __init__(self, initial_steps: int, cfg_path: str | None = None, *, cycle: bool = False,
                 clock: Callable[[], float] = time.perf_counter, log: Callable[[str], None] | None = None):
        self._by_key = load_candidates(cfg_path)
        self._keys = sorted(self._by_key)
        self._initial = initial_steps
        self._cycle = cycle
        self._clock = clock
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self._graph_bs: list[int] | None = None
        self._buckets: dict[int, _Bucket] = {}
        self._times: dict[tuple[int, int], deque] = {}
        self.acceptance = DepthAcceptance()
        # the decisions whose verify results have not come back: (bucket, depth, first step after a switch);
        # under the overlap scheduler the next decision is made before the last result arrives
        self._pending: deque = deque(maxlen=PENDING)
        self._last_result: float | None = None
        self._log(f"sglang-eagle-ext: adaptive shape: {'round-robin (test mode)' if cycle else 'cost policy'} over "
                  f"depths {self.candidate_steps} (0 = speculation off), starting at {initial_steps}")

    # -- SGLang's policy protocol --

    @property
    def candidate_steps(self) -> list[int]:
        return sorted({steps for candidates in self._by_key.values() for steps in candidates})

    def set_cuda_graph_bs(self, cuda_graph_bs: list[int] | None) -> None:
        self._graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    def cuda_graph_bs_for_step(self, step: int) -> list[int] | None:
        """The captured batch sizes at which ``step`` can run (its graphs are captured only there)."""
        if self._graph_bs is None:
            return None
        return [bs for bs in self._graph_bs if step in self._allowed(bs)]

    def get_steps_for_batch(self, batch_size: int) -> int:
        """The depth of the next decode step at ``batch_size`` (SGLang calls this before each one)."""
        padded = self._pad(batch_size)
        key = bucket_of(padded)
        allowed = self._allowed(padded)
        state = self._buckets.setdefault(key, _Bucket(self._initial if self._initial in allowed else allowed[0]))
        state.decisions += 1
        chosen, reason = self._choose(key, state, allowed)
        switched = chosen != state.steps
        if switched:
            self._switch(key, state, chosen, reason)
        else:
            state.since_switch += 1
        self._pending.append((key, state.steps, switched))
        return state.steps

    def on_verify_complete(self, num_correct_drafts_per_req: list[int], batch_size: int) -> int | None:
        """A verify result (accepted drafts per request) of the oldest pending decision: its depth's
        acceptance, and the step period since the previous result unless the depth had just been switched
        to (that step carries the switch). The depth is chosen in :meth:`get_steps_for_batch`, so this
        never asks for a switch (``None``)."""
        now = self._clock()
        previous, self._last_result = self._last_result, now
        if not self._pending:  # a result without a decision: nothing to attribute it to
            return None
        key, steps, switched = self._pending.popleft()
        if previous is not None and not switched:
            # every period kept: an idle gap or a prefill between two steps is an outlier the median ignores
            self._times.setdefault((key, steps), deque(maxlen=WINDOW)).append(now - previous)
            self._buckets[key].measured_at[steps] = self._buckets[key].decisions
        self.acceptance.observe(num_correct_drafts_per_req, steps)
        return None

    # -- the choice --

    def step_time(self, key: int, steps: int) -> float | None:
        times = self._times.get((key, steps))
        return statistics.median(times) if times and len(times) >= MIN_SAMPLES else None

    def gains(self, key: int, allowed: list[int]) -> dict[int, float]:
        """Accepted tokens per second per request of each depth measured at bucket ``key``."""
        out = {}
        for steps in allowed:
            period, tokens = self.step_time(key, steps), self.acceptance.expected_tokens(steps)
            if period is not None and tokens is not None:
                out[steps] = tokens / period
        return out

    def _choose(self, key: int, state: _Bucket, allowed: list[int]) -> tuple[int, str]:
        if self._cycle:
            state.cycle += 1
            return allowed[state.cycle % len(allowed)], "round-robin"
        if state.probe_left > 0:
            state.probe_left -= 1
            return state.steps, "probing"
        gains = self.gains(key, allowed)  # once per decision: it takes a median per depth
        unmeasured = [steps for steps in allowed if steps not in gains]
        if unmeasured:  # the running depth runs on until measured; another is probed
            if state.steps not in unmeasured:
                state.probe_left = PROBE_STEPS
            return (state.steps if state.steps in unmeasured else unmeasured[0]), "not measured at this batch size yet"
        if state.decisions % REPROBE_EVERY == 0 and len(allowed) > 1:
            stale = min((steps for steps in allowed if steps != state.steps),
                        key=lambda steps: state.measured_at.get(steps, -1))
            state.probe_left = PROBE_STEPS
            return stale, "probing again (costs drift with context length)"
        best = max(gains, key=gains.get)
        if (best != state.steps and state.since_switch >= MIN_DWELL
                and gains[best] > gains.get(state.steps, 0.0) * (1 + MARGIN)):
            return best, "gain " + ", ".join(f"{_name(s)} {g * 1e-3:.3g}" for s, g in sorted(gains.items()))
        return state.steps, "keep"

    def _switch(self, key: int, state: _Bucket, steps: int, reason: str) -> None:
        previous = state.steps
        state.steps, state.since_switch = steps, 0
        now = self._clock()
        if self._cycle or now - state.last_log < LOG_INTERVAL_S:
            return
        state.last_log = now
        rates = "/".join(f"{rate:.2f}" for rate in self.acceptance.rates()) or "-"
        costs = ", ".join(f"{_name(s)} {1e3 * self.step_time(key, s):.2f} ms" for s in self.candidate_steps
                          if self.step_time(key, s) is not None) or "-"
        self._log(f"sglang-eagle-ext: adaptive shape: batch {key}+ -> {_name(steps)} (was {_name(previous)}): "
                  f"{reason} (accepted tokens per ms per request); acceptance by depth {rates}; step {costs}")

    # -- batch sizes --

    def _pad(self, batch_size: int) -> int:
        if self._graph_bs is None:
            return batch_size
        index = bisect.bisect_left(self._graph_bs, batch_size)
        return self._graph_bs[index] if index < len(self._graph_bs) else batch_size

    def _allowed(self, padded: int) -> list[int]:
        index = bisect.bisect_right(self._keys, padded) - 1
        return self._by_key[self._keys[max(index, 0)]]


def bucket_of(padded_batch_size: int) -> int:
    """The power of two at or below the padded batch size: the bucket whose step costs it shares."""
    return 1 << (max(padded_batch_size, 1).bit_length() - 1)


def _name(steps: int) -> str:
    return "off" if steps == 0 else f"chain {steps}/1/{steps + 1}"
