"""The drafting shape chosen per decode step from measured costs and live acceptance (issue 39, stage A of
``docs/adaptive-shape.md``): speculation off or a chain depth, per batch size.

:class:`ShapePolicy` takes the place of stock SGLang's ``AdaptiveSpeculativeParams`` (``--speculative-adaptive``,
SGLang 0.5.21 and later; the binding is :mod:`.compat.adaptive_shape`). SGLang keeps doing what it does for
its own adaptive mode: one set of CUDA graphs per candidate depth (steps ``S``, top-k 1, ``S + 1`` draft
tokens; ``S = 0`` is speculation off: stock verifies only the target's own bonus token, which
:mod:`.compat.plain_off` replaces by a plain decode step where it can, and the drafter's KV is kept current),
switched between decode steps. What changes is the choice. Stock steps the depth up or down
from a moving average of accepted drafts and never weighs what a step costs; this policy picks, for the
running batch size, the depth with the most accepted tokens per second:

    G(S, b) = E[tokens per step | S] / T(S, b)

* ``T(S, b)``: from the last :data:`WINDOW` step periods measured while depth ``S`` ran at batch bucket ``b``
  (the time between consecutive verify results on the host, which is the step throughput the scheduler
  sees, overlap included), the lower quartile: a prefill or an idle gap between two steps only lengthens a
  period, so the low end is the step's own cost; a result processed late lengthens its period by what it
  shortens the next, so the estimate may read low by that much. Buckets are powers of two of the padded
  batch size. A depth not measured at a bucket is predicted from one that is:
  ``T(S, b) = T(R, b) * T(S, b') / T(R, b')``, with ``b'`` the nearest bucket where both were measured (or
  ``S`` lies on ``b'``'s line of chains, below) and ``R`` the depth nearest ``S`` among them (the ratio
  between two depths' costs moves slowly with the batch; on the 8B-geometry H200 run chain 3 cost 0.84 of
  chain 5 at batch 1 and 0.86 at batch 64), or on the line through two chains measured at ``b``, whichever
  is carried fewer doublings.
* ``E[tokens | S] = 1 + sum_{j <= S} prod_{i <= j} a_i``: ``a_j``, the rate at which draft ``j`` is accepted
  when drafts ``1 .. j-1`` were, counted from every verify result's accepted drafts per request (pooled over
  batch sizes, each request's observation decayed by :data:`DECAY` per later one, so the estimate follows
  the last hundred or so requests' drafts: acceptance belongs to the drafter and the traffic, not to the
  batch size), kept apart for batches whose requests are all greedy and the rest (an all-greedy batch
  accepts far more: 4.00 against 2.11 tokens per chain-3 step on the first GPU run), each with its own
  depth per bucket; the binding tells the policy which kind the next batch is (:meth:`ShapePolicy.note_batch`).
  Depths never drafted take the deepest measured rate. ``E[tokens | 0] = 1``.

Exploration is kept to what the model cannot predict, because a serving workload's batch sizes come and go
within a few hundred steps (in the first GPU run, ``benchmarks/results/adaptive/``, a policy that probed every
depth at every bucket made 0.82-0.92 of its own chain 3's greedy output). A depth neither measured at a bucket
nor predictable is probed there for :data:`PROBE_STEPS` steps, the one nearest the running depth first: at the
first bucket, once two chains are measured the other chains are predicted on the line through them (a chain
step's cost is close to affine in its depth; "off" is always measured there) and probed only as below; a bucket
(or kind) met later starts at the best depth, by its kind's acceptance, of the nearest bucket with measured
costs (itself, where the other kind measured them) and measures only that. A predicted depth whose gain lies
within ``DOUBT * d**2`` of the best (``d``: the doublings of the batch its figure was carried) is probed (a
predicted best always is), so predictions decide only where they could not hide a win: a neighbour's ratios are
trusted to 5 %, ratios carried six doublings not at all. Every :data:`REPROBE_EVERY` decisions of a bucket the
runner-up is measured afresh (costs drift with context length). A switch between measured depths needs a gain
:data:`MARGIN` above the running one after at least :data:`MIN_DWELL` steps at it; a bucket whose running depth
is not allowed at the batch size now (candidates per batch size from a config file) moves at once. Each verify
result is matched to the decision it answers (the oldest pending one: under the overlap scheduler the next step
is decided before the last result arrives); the first step after the worker's depth changes is not timed (it
carries the switch). An idle batch (size 0, attention DP) keeps the running depth and is not counted. Each
choice that changes a bucket's depth is logged, at most once per :data:`LOG_INTERVAL_S` per bucket, with its
reason, and every :data:`SUMMARY_INTERVAL_S` or so one line says how many steps each bucket ran at each depth.
Given a ``trace`` callable, every verify result (bucket, kind, depth, accepted drafts, the period timed or not,
and the CPU time the scheduler's process spent over that period: a period much longer than its CPU time waited,
on the GPU or for a core another process held, where one about as long was the host's own work) and every switch
(with its reason) is handed to it as a row: the whole record of a run.

A set may hold one tree (stage B, :mod:`.compat.adaptive_trees`: the launch shape ``S/k/D`` at top-k above 1,
``tree=`` here): its candidate depth ``S`` is that tree, whose acceptance is kept apart from the chains' (its
results, accepted drafts along the accepted path, telescope as a chain's, so ``E[tokens | tree]`` is 1 + their
mean) and whose cost is measured (or carried by a neighbouring bucket's ratio), never read off the chains' line.

Lossless as every speculative path: each step is verified by SGLang's own rule for that step's depth, so a
switch changes what is proposed, never what is accepted. ``cycle`` (the switch's test mode) runs the
candidate depths round-robin, one per step, for checking exactly that; ``hold`` (a diagnostic) keeps the
launch depth at every step while SGLang holds every candidate's state, so that an engine with several
candidates can be timed against a fixed engine at one depth.

Standard library only; no SGLang import (the binding hands it SGLang's config).
"""

from __future__ import annotations

import bisect
import json
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

# off, chain 1/1/2, 3/1/4, 5/1/6: within stock's default candidates (up to 7), from which SGLang sizes the
# draft-token bound and the KV reservation; 5 for drafters that accept deep (the first GPU run's best fixed
# greedy shape), where a cost-blind choice of it would lose at large batches
DEFAULT_STEPS = (0, 1, 3, 5)
WINDOW = 32
MIN_SAMPLES = 6
QUANTILE = 0.25  # of a window's periods: the step's own cost under gaps that only lengthen periods
PROBE_STEPS = 12
REPROBE_EVERY = 1024
MARGIN = 0.05
# a cost ratio carried d doublings of the batch may be off by DOUBT * d**2 (5, 20, 45 % at 1, 2, 3): on the
# first GPU run ratios moved 2-12 % over five or six doublings, and where the verify's width dominates (large
# batches) the ratio of two depths' costs tends to their widths' ratio, which it is far from at batch 1
DOUBT = 0.05
MIN_DWELL = 16
PENDING = 4  # decisions awaiting their results, at most (SGLang's overlap keeps one in flight)
DECAY = 0.99  # per request observed: the last ~100 requests' drafts carry the estimate (rates within ~0.1),
# so it follows a change from greedy to sampled traffic within ~100 steps at batch 1, one or two at batch 64
LOG_INTERVAL_S = 10.0
SUMMARY_INTERVAL_S = 60.0
TRAFFIC = ("greedy", "sampled")  # a batch whose requests are all greedy, and any other


# How the policy chooses: by measured cost, round-robin over the candidates (the switch's test mode), or the
# launch depth held (a diagnostic) -> the phrase its start-up line uses
MODE_PHRASES = {"cost": "cost policy", "cycle": "round-robin (test mode)",
                "hold": "held at the launch depth (diagnostic)"}


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
        kept = self.decay ** len(accepted_drafts)  # only the depths this result drafted: deeper ones keep theirs
        for depth in range(steps):
            self.tried[depth] *= kept
            self.accepted[depth] *= kept
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
    """The running depth of one batch-size bucket for one kind of traffic, and its decision counters."""

    steps: int
    decisions: int = 0
    since_switch: int = 0
    probe_left: int = 0
    cycle: int = 0
    last_log: float = float("-inf")
    last_reprobe: int = 0  # decisions count at the last measuring of the runner-up
    ran: dict[int, int] = field(default_factory=dict)  # depth -> steps since the last summary line


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


def all_candidates(by_key: dict[int, list[int]]) -> list[int]:
    """Every candidate depth of :func:`load_candidates`' table, whatever the batch size, ascending."""
    return sorted({steps for candidates in by_key.values() for steps in candidates})


class ShapePolicy:
    """SGLang's ``AdaptiveSpecPolicy`` (``speculative/adaptive_runtime_state.py``, 0.5.21+), choosing the depth
    with the most accepted tokens per second for the running batch size. Constructed as SGLang constructs
    ``AdaptiveSpeculativeParams``: ``(initial_steps=..., cfg_path=...)``."""

    def __init__(self, initial_steps: int, cfg_path: str | None = None, *, mode: str = "cost",
                 clock: Callable[[], float] = time.perf_counter, log: Callable[[str], None] | None = None,
                 trace: Callable[[dict], None] | None = None, tree: tuple[int, int, int] | None = None,
                 cpu_clock: Callable[[], float] = time.process_time, off_tokens: int = 1):
        self._by_key = load_candidates(cfg_path)
        self._keys = sorted(self._by_key)
        self._initial = initial_steps
        if mode not in MODE_PHRASES:
            raise ValueError(f"policy mode {mode!r}: one of {', '.join(MODE_PHRASES)}")
        self._mode = mode
        self._clock = clock
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self._graph_bs: list[int] | None = None
        self._buckets: dict[tuple[int, str], _Bucket] = {}  # (bucket, traffic) -> its running depth
        self._times: dict[tuple[int, int], deque] = {}  # (bucket, depth) -> step periods, whatever the traffic
        self.acceptance = {traffic: DepthAcceptance() for traffic in TRAFFIC}
        # the set's tree, S/k/D, where it has one (compat/adaptive_trees.py): the candidate S is that tree, its
        # acceptance its own (a chain's cannot tell it) and its cost off the chains' line
        self._tree = tree
        self.tree_acceptance = {traffic: DepthAcceptance() for traffic in TRAFFIC}
        # tokens a request a step of depth 0 makes by traffic (compat/plain_off.py: off_tokens asked, fewer where a
        # batch keeps stock's width-1 verify or the engine cannot make them), measured as acceptance is
        self._off_asked = off_tokens
        self._off_tokens = {traffic: float(off_tokens) for traffic in TRAFFIC}
        self._traffic = "sampled"  # of the next decision; without note_batch every batch counts as this
        # the decisions whose verify results have not come back: (bucket, traffic, depth, first step after a
        # switch); under the overlap scheduler the next decision is made before the last result arrives
        self._pending: deque = deque(maxlen=PENDING)
        self._last_result: float | None = None
        self._cpu_clock = cpu_clock  # read only where a trace is kept
        self._last_cpu: float | None = None
        self._running = initial_steps  # the depth last handed to SGLang: a change of it is a switch
        self._last_summary: float | None = None
        # every verify result and every switch as a row (time since construction, seconds), when given: what
        # a run's rate-limited log lines cannot show (the depth and period of each step)
        self._trace = trace
        self._started = clock()
        self._log(f"sglang-eagle-ext: adaptive shape: {MODE_PHRASES[mode]} over "
                  f"depths {self.candidate_steps} (0 = speculation off{self._tree_phrase()}), starting at "
                  f"{initial_steps}")

    # -- SGLang's policy protocol --

    @property
    def candidate_steps(self) -> list[int]:
        return all_candidates(self._by_key)

    def set_cuda_graph_bs(self, cuda_graph_bs: list[int] | None) -> None:
        self._graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    def cuda_graph_bs_for_step(self, step: int) -> list[int] | None:
        """The captured batch sizes at which ``step`` can run (its graphs are captured only there)."""
        if self._graph_bs is None:
            return None
        return [bs for bs in self._graph_bs if step in self._allowed(bs)]

    def note_batch(self, all_greedy: bool) -> None:
        """The kind of the batch whose depth is asked next: every request greedy, or not (the binding calls
        this with the batch's sampling info before SGLang asks for its depth)."""
        self._traffic = "greedy" if all_greedy else "sampled"

    def get_steps_for_batch(self, batch_size: int) -> int:
        """The depth of the next decode step at ``batch_size`` (SGLang calls this before each one)."""
        self._summarise()
        if batch_size <= 0:  # an idle batch (attention DP) verifies nothing and gets no result: nothing to decide
            return self._running
        padded = self._pad(batch_size)
        key, traffic = bucket_of(padded), self._traffic
        allowed = self._allowed(padded)
        if (key, traffic) not in self._buckets:
            self._buckets[key, traffic] = _Bucket(self._start(key, traffic, allowed))
        state = self._buckets[key, traffic]
        state.decisions += 1
        chosen, reason = self._choose(key, traffic, state, allowed)
        if chosen != state.steps:
            self._switch(key, traffic, state, chosen, reason)
        else:
            state.since_switch += 1
        # the step that changes the worker's depth carries the change (whichever state asked for it): untimed
        switched, self._running = state.steps != self._running, state.steps
        self._pending.append((key, traffic, state.steps, switched))
        state.ran[state.steps] = state.ran.get(state.steps, 0) + 1
        return state.steps

    def on_verify_complete(self, num_correct_drafts_per_req: list[int], batch_size: int) -> int | None:
        """A verify result (accepted drafts per request) of the oldest pending decision: its depth's
        acceptance, and the step period since the previous result unless the depth had just been switched
        to (that step carries the switch). The depth is chosen in :meth:`get_steps_for_batch`, so this
        never asks for a switch (``None``)."""
        now = self._clock()
        previous, self._last_result = self._last_result, now
        cpu_before = self._last_cpu
        if self._trace is not None:  # beside the period, over the same span
            self._last_cpu = self._cpu_clock()
        if not self._pending:  # a result without a decision: nothing to attribute it to
            return None
        key, traffic, steps, switched = self._pending.popleft()
        timed = previous is not None and not switched and now > previous
        if timed:
            # every period kept: an idle gap or a prefill between two steps is an outlier the estimate ignores;
            # a clock that did not advance (two results handed over at once) times nothing
            self._times.setdefault((key, steps), deque(maxlen=WINDOW)).append(now - previous)
        self._acceptance_of(steps)[traffic].observe(num_correct_drafts_per_req, steps)
        if steps == 0 and self._off_asked > 1 and num_correct_drafts_per_req:  # off's tokens after the first
            # reach it as SGLang's "drafts"
            kept = DECAY ** len(num_correct_drafts_per_req)
            made = 1 + sum(num_correct_drafts_per_req) / len(num_correct_drafts_per_req)
            self._off_tokens[traffic] = kept * self._off_tokens[traffic] + (1 - kept) * made
        if self._trace is not None:
            self._trace({"t": round(now - self._started, 6), "bucket": key, "traffic": traffic, "depth": steps,
                         "requests": len(num_correct_drafts_per_req), "accepted": sum(num_correct_drafts_per_req),
                         "period_ms": round(1e3 * (now - previous), 4) if timed else None,
                         "cpu_ms": (round(1e3 * (self._last_cpu - cpu_before), 4)
                                    if timed and cpu_before is not None else None)})
        return None

    # -- the choice --

    def step_time(self, key: int, steps: int) -> float | None:
        """Depth ``steps``'s measured step period at bucket ``key`` (seconds), or None before MIN_SAMPLES."""
        times = self._times.get((key, steps))
        if not times or len(times) < MIN_SAMPLES:
            return None
        return sorted(times)[int(QUANTILE * (len(times) - 1))]

    def predicted_time(self, key: int, steps: int) -> tuple[float, int] | None:
        """Depth ``steps``'s step period at bucket ``key`` and how far it is carried, in doublings of the batch:
        measured here (0); else the nearer of two predictions: a depth measured here scaled by the two
        depths' cost ratio at the nearest bucket that has both (that bucket's figure for ``steps`` measured,
        or on its line, below: one more), and the line through two chains measured here (a chain step's cost
        is close to affine in its depth: draft forwards and verify width; counted as one doubling). None when
        neither exists."""
        measured = self.step_time(key, steps)
        if measured is not None:
            return measured, 0
        best = None  # (doublings, depths apart, bucket): the nearest bucket, then the reference nearest in depth
        for other in {bucket for bucket, _ in self._times}:
            if other == key or (there := self._on_line(other, steps)) is None:
                continue
            distance = abs(other.bit_length() - key.bit_length()) + there[1]
            for reference in self.candidate_steps:
                here, base = self.step_time(key, reference), self.step_time(other, reference)
                rank = (distance, abs(reference - steps), other)
                if reference != steps and here is not None and base is not None and (best is None or rank < best[0]):
                    best = (rank, here * there[0] / base)
        local = self._on_line(key, steps)
        if best is not None and (local is None or best[0][0] < local[1]):
            return best[1], best[0][0]
        return local

    def _on_line(self, key: int, steps: int) -> tuple[float, int] | None:
        """Depth ``steps``'s period at bucket ``key``: measured (0), or for a chain on the line through the
        shallowest and deepest chains measured there (1; never below half the cheaper one); None with fewer
        than two, and for "off" unless measured: its path (a width-1 verify, no draft step) is not on the
        chains' line (on the first GPU run it read 0.65-0.9 of what the line gives)."""
        measured = self.step_time(key, steps)
        if measured is not None:
            return measured, 0
        here = sorted((depth, period) for depth in self.candidate_steps
                      if depth > 0 and not self._is_tree(depth) and (period := self.step_time(key, depth)) is not None)
        if steps == 0 or self._is_tree(steps) or len(here) < 2:
            return None
        (low, low_t), (high, high_t) = here[0], here[-1]
        return max(low_t + (high_t - low_t) * (steps - low) / (high - low), min(low_t, high_t) / 2), 1

    def expected_tokens(self, traffic: str, steps: int) -> float | None:
        """Tokens per request per step of depth ``steps`` for ``traffic``; the other kind's figure until this
        kind has drafted."""
        if steps == 0:  # every token plain decoding's, none a draft
            return self._off_tokens[traffic]
        acceptance = self._acceptance_of(steps)
        tokens = acceptance[traffic].expected_tokens(steps)
        if tokens is None:
            tokens = acceptance[TRAFFIC[1 - TRAFFIC.index(traffic)]].expected_tokens(steps)
        return tokens

    def _acceptance_of(self, steps: int) -> dict[str, DepthAcceptance]:
        """The acceptance by traffic of depth ``steps``: the tree's own where ``steps`` is the tree. A tree's
        result, accepted drafts along its accepted path (0 .. S), telescopes as a chain's does: its expected
        tokens are 1 + their mean."""
        return self.tree_acceptance if self._is_tree(steps) else self.acceptance

    def _is_tree(self, steps: int) -> bool:
        return self._tree is not None and steps == self._tree[0]

    def name(self, steps: int) -> str:
        return shape_name(steps, self._tree)

    def _tree_phrase(self) -> str:
        return f"; {self._tree[0]} = {self.name(self._tree[0])}" if self._tree is not None else ""

    def gains(self, key: int, traffic: str, allowed: list[int]) -> dict[int, tuple[float, int]]:
        """Accepted tokens per second per request of each depth at bucket ``key`` for ``traffic``, with the
        doublings its step period was carried over (0: measured here)."""
        out = {}
        for steps in allowed:
            period, tokens = self.predicted_time(key, steps), self.expected_tokens(traffic, steps)
            if period is not None and tokens is not None and period[0] > 0:
                out[steps] = (tokens / period[0], period[1])
        return out

    def _start(self, key: int, traffic: str, allowed: list[int]) -> int:
        """A new state's first depth: the best by this traffic's acceptance at this bucket if the other kind
        measured costs here, else at the nearest bucket that did, else the configured depth."""
        known = {bucket for bucket, steps in self._times if self.step_time(bucket, steps) is not None}
        if known and self._mode != "hold":
            nearest = min(known, key=lambda other: (abs(other.bit_length() - key.bit_length()), other))
            gains = {steps: gain for steps, (gain, _) in self.gains(nearest, traffic, allowed).items()}
            if gains:
                return max(gains, key=gains.get)
        return self._initial if self._initial in allowed else allowed[0]

    def _choose(self, key: int, traffic: str, state: _Bucket, allowed: list[int]) -> tuple[int, str]:
        if self._mode == "cycle":
            state.cycle += 1
            return allowed[state.cycle % len(allowed)], "round-robin"
        if self._mode == "hold":
            return (self._initial if self._initial in allowed else allowed[0]), "held (diagnostic)"
        if state.steps not in allowed:  # this batch size's candidates differ from the bucket's last one's
            state.probe_left = 0
            return min(allowed, key=lambda steps: (abs(steps - state.steps), steps)), "not a candidate here"
        if state.probe_left > 0:
            state.probe_left -= 1
            if state.probe_left == 0:  # a probe is no switch to dwell on: the next decision may leave it
                state.since_switch = MIN_DWELL
            return state.steps, "probing"
        if self.step_time(key, state.steps) is None:  # the running depth runs on until measured
            return state.steps, "measuring"
        estimates = self.gains(key, traffic, allowed)  # once per decision: it takes a quantile per depth
        unknown = [steps for steps in allowed if steps not in estimates]
        if unknown:  # not predictable yet: the depth nearest the running one first (a far one may be by then)
            state.probe_left = PROBE_STEPS
            return min(unknown, key=lambda steps: (abs(steps - state.steps), -steps)), "not measured yet"
        gains = {steps: gain for steps, (gain, _) in estimates.items()}
        best = max(gains, key=gains.get)
        # a predicted depth close enough to the best that the prediction's error could hide a win: measured
        # here (a ratio carried over more doublings is trusted less)
        plausible = [steps for steps, (gain, distance) in estimates.items()
                     if distance > 0 and gain >= gains[best] * (1 - DOUBT * distance ** 2)]
        if plausible:
            state.probe_left = PROBE_STEPS
            return max(plausible, key=gains.get), "predicted to be within reach: " + self._describe(estimates)
        if state.decisions - state.last_reprobe >= REPROBE_EVERY and len(gains) > 1:
            runner_up = max((steps for steps in gains if steps != state.steps), key=gains.get)
            state.probe_left, state.last_reprobe = PROBE_STEPS, state.decisions
            self._times.pop((key, runner_up), None)  # measured afresh: old periods would hide a drift
            return runner_up, "measuring the runner-up again (costs drift with context length)"
        if (best != state.steps and state.since_switch >= MIN_DWELL
                and gains[best] > gains.get(state.steps, 0.0) * (1 + MARGIN)):
            return best, "gain " + self._describe(estimates)
        return state.steps, "keep"

    def _describe(self, estimates: dict[int, tuple[float, int]]) -> str:
        return ", ".join(f"{self.name(steps)} {gain * 1e-3:.3g}{' (predicted)' if distance else ''}"
                         for steps, (gain, distance) in sorted(estimates.items()))

    def _switch(self, key: int, traffic: str, state: _Bucket, steps: int, reason: str) -> None:
        previous = state.steps
        state.steps, state.since_switch = steps, 0
        now = self._clock()
        if self._trace is not None:
            self._trace({"t": round(now - self._started, 6), "bucket": key, "traffic": traffic, "from": previous,
                         "to": steps, "reason": reason})
        if self._mode == "cycle" or now - state.last_log < LOG_INTERVAL_S:
            return
        state.last_log = now
        rates = "/".join(f"{rate:.2f}" for rate in self.acceptance[traffic].rates()) or "-"
        costs = ", ".join(f"{self.name(s)} {1e3 * period:.2f} ms" for s in self.candidate_steps
                          if (period := self.step_time(key, s)) is not None) or "-"
        self._log(f"sglang-eagle-ext: adaptive shape: batch {key}+ {traffic} -> {self.name(steps)} "
                  f"(was {self.name(previous)}): {reason} (accepted tokens per ms per request); "
                  f"acceptance by depth {rates}; step {costs}")

    def _summarise(self) -> None:
        """Every SUMMARY_INTERVAL_S: the steps each bucket ran at each depth since the last summary."""
        now = self._clock()
        if self._last_summary is None:
            self._last_summary = now
        if now - self._last_summary < SUMMARY_INTERVAL_S:
            return
        interval, self._last_summary = now - self._last_summary, now
        ran = "; ".join(f"batch {key}+ {traffic}: "
                        + ", ".join(f"{self.name(s)} {n}" for s, n in sorted(state.ran.items()))
                        for (key, traffic), state in sorted(self._buckets.items()) if state.ran)
        for state in self._buckets.values():
            state.ran = {}
        if ran and self._mode != "cycle":
            self._log(f"sglang-eagle-ext: adaptive shape: steps by depth in the last {interval:.0f} s: {ran}")

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


def shape_name(steps: int, tree: tuple[int, int, int] | None = None) -> str:
    """How logs name the shape of depth ``steps``: off, a chain ``S/1/S+1``, or ``tree`` (``S/k/D``) at its
    ``S``."""
    if tree is not None and steps == tree[0]:
        return "tree " + "/".join(map(str, tree))
    return "off" if steps == 0 else f"chain {steps}/1/{steps + 1}"
