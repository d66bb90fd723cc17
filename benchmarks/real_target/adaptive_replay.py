"""The depth policy replayed on a GPU run's own costs: what ``ShapePolicy`` would make of a ``serve_bench.py`` run.

A GPU run of the depth policy costs most of a session's device time; its arms of fixed depth already say what
each depth costs and accepts on that workload. This replays the run's cell sequence (the engine's warm-up,
then per batch size ``rounds`` timed rounds in rotating mode order, then the drift cell) through
:class:`~sglang_eagle_ext.sglang.shape_policy.ShapePolicy` driven as SGLang's controller drives it, against a
simulated server whose step costs and acceptance are the run's:

* step cost ``T(S, b)`` of chain depth ``S`` at batch ``b``: from that chain arm's greedy cell,
  ``(b * new_tokens / tok/s - time to first token) / verify steps per request``; "off" (SGLang's steps = 0
  path, never an arm) extrapolated linearly from depths 1 and 3 (on the first run the policy's own log read
  5.34 / 7.27 / 9.22 ms at batch 1 / 16 / 32 where this gives 5.39 / 7.71 / 10.17); batch sizes between the
  run's, linear in the batch;
* acceptance per depth and mode: the rates ``a_1`` (chain 1), ``a_2 = a_3`` (chain 3) and ``a_4 = a_5``
  (chain 5) that reproduce the arms' tokens per verify step (the prefill's token and each request's last,
  cut step taken out);
* each wave's time to first token (plain decoding's) as a gap before its first step, as the policy sees it.

The same server runs each fixed depth; the table gives, per cell and mode, every fixed depth's simulated
tok/s, the policy's, and its ratio to the best fixed depth. A simulation, not a measurement: the GPU run
decides; this says whether a change of the policy is worth one.

usage::

    python3 benchmarks/real_target/adaptive_replay.py RUN.json DRAFTER   # markdown
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys

from sglang_eagle_ext.sglang.shape_policy import DEFAULT_STEPS, ShapePolicy

CHAINS = {1: "chain1", 3: "chain", 5: "chain5"}  # depth -> serve_bench's shape name of that fixed chain
MODES = ("greedy", "sampled")
WARM_UP_TOKENS = 8  # serve_bench's untimed first requests at each batch size and mode
GRAPH_BS = (1, 2, 4, 8, 16, 32, 64)
SEED = 0


def cell_requests(results: dict, batch: int) -> int:
    """Requests of one round of a batch cell (serve_bench.cell_prompts)."""
    return results["single"] if batch == 1 else (batch if batch >= 64 else 2 * batch)


def step_costs(results: dict, drafter: str) -> dict[int, dict[int, float]]:
    """Seconds per step, ``{batch: {depth: T}}`` at the run's batch sizes, depth 0 extrapolated."""
    new = results["new_tokens"]
    costs = {}
    for batch in results["batches"]:
        row = {}
        for depth, shape in CHAINS.items():
            cell = results["arms"][f"{drafter}/{shape}/plugin"]["cells"][f"batch{batch}/greedy"]
            steps_per_request = cell["verify"] / (cell_requests(results, batch) * len(cell["tok_s"]))
            wave_s = batch * new / cell["tok_s_median"] if batch > 1 else new / cell["tok_s_median"]
            row[depth] = (wave_s - cell["ttft_ms_median"] / 1e3) / steps_per_request
        row[0] = row[1] - (row[3] - row[1]) / 2
        costs[batch] = row
    return costs


def cost_at(costs: dict[int, dict[int, float]], depth: int, batch: int) -> float:
    """``T(depth, batch)``, linear in the batch between the run's batch sizes (flat beyond them)."""
    sizes = sorted(costs)
    if batch <= sizes[0] or batch >= sizes[-1]:
        return costs[sizes[0] if batch <= sizes[0] else sizes[-1]][depth]
    upper = next(size for size in sizes if size >= batch)
    lower = max(size for size in sizes if size < batch)
    share = (batch - lower) / (upper - lower)
    return costs[lower][depth] * (1 - share) + costs[upper][depth] * share


def tokens_per_step(results: dict, drafter: str, mode: str, depth: int) -> float:
    """Tokens per verify step of the chain arm over its batch cells. Per request, the prefill makes the first
    token and the last step is cut (it makes (E + 1) / 2 tokens on average), so ``N - 1 = E (steps - 1) +
    (E + 1) / 2``, i.e. ``E = (N - 1.5) / (steps - 0.5)``, summed over the requests."""
    tokens = steps = requests = 0
    for batch in results["batches"]:
        cell = results["arms"][f"{drafter}/{CHAINS[depth]}/plugin"]["cells"][f"batch{batch}/{mode}"]
        tokens, steps = tokens + cell["tokens"], steps + cell["verify"]
        requests += cell_requests(results, batch) * len(cell["tok_s"])
    return min(depth + 1.0, (tokens - 1.5 * requests) / (steps - 0.5 * requests))


def rates(results: dict, drafter: str, mode: str) -> list[float]:
    """``a_1 .. a_5`` reproducing the chain arms' tokens per step: ``E_1 = 1 + a_1``,
    ``E_3 = E_1 + a_1 r + a_1 r^2`` (``r = a_2 = a_3``), ``E_5 = E_3 + a_1 r^2 (q + q^2)`` (``q = a_4 = a_5``)."""
    e1, e3, e5 = (tokens_per_step(results, drafter, mode, depth) for depth in (1, 3, 5))
    a1 = min(1.0, max(e1 - 1, 1e-6))
    r = _root(1.0, 1.0, -max(e3 - e1, 0.0) / a1)
    q = _root(1.0, 1.0, -max(e5 - e3, 0.0) / (a1 * r * r)) if r > 0 else 0.0
    return [a1, r, r, q, q]


def _root(a: float, b: float, c: float) -> float:
    """The non-negative root of ``a x^2 + b x + c``, clamped to [0, 1]."""
    root = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    return min(1.0, max(root, 0.0))


class Fixed:
    """One depth at every step (the baseline)."""

    def __init__(self, depth: int):
        self.depth = depth

    def get_steps_for_batch(self, batch: int) -> int:
        return self.depth

    def on_verify_complete(self, counts, batch) -> None:
        return None


class ReplayServer:
    """Requests decoded together until each has its tokens; a step's cost from the run, its accepted drafts
    drawn from the mode's rates; under the overlap scheduler a result is handed over after the next decision."""

    def __init__(self, costs, rates_by_mode, seed: int = SEED):
        self.costs, self.rates, self.rng, self.now = costs, rates_by_mode, random.Random(seed), 0.0
        self.waiting = None

    def clock(self) -> float:
        return self.now

    def wave(self, policy, lengths: list[int], mode: str, gap_s: float) -> tuple[float, int]:
        """One wave (its requests' new tokens, the first from the prefill): (seconds, tokens)."""
        started = self.now
        self.now += gap_s
        remaining = [length - 1 for length in lengths]
        while any(remaining):
            batch = sum(1 for left in remaining if left > 0)
            if hasattr(policy, "note_batch"):  # as the binding tells it before each decode step
                policy.note_batch(all_greedy=mode == "greedy")
            depth = policy.get_steps_for_batch(batch)
            if self.waiting is not None:
                policy.on_verify_complete(*self.waiting)
            self.now += cost_at(self.costs, depth, batch)
            counts = []
            for index, left in enumerate(remaining):
                if left <= 0:
                    continue
                count = 0
                while count < depth and self.rng.random() < self.rates[mode][count]:
                    count += 1
                counts.append(count)
                remaining[index] = max(0, left - count - 1)
            self.waiting = (counts, batch)
        if self.waiting is not None:
            policy.on_verify_complete(*self.waiting)
            self.waiting = None
        return self.now - started, sum(lengths)


def replay(results: dict, drafter: str, make_policy) -> dict[str, float]:
    """The run's cell sequence through ``make_policy(clock)``: simulated output tok/s per cell (the median of
    its rounds)."""
    costs = step_costs(results, drafter)
    server = ReplayServer(costs, {mode: rates(results, drafter, mode) for mode in MODES})
    policy = make_policy(server.clock)
    if hasattr(policy, "set_cuda_graph_bs"):
        policy.set_cuda_graph_bs(list(GRAPH_BS))
    plain_ttft = results["arms"]["plain"]["cells"]
    for batch in results["batches"]:
        for mode in MODES:
            server.wave(policy, [WARM_UP_TOKENS] * batch, mode, 0.0)
    measured: dict[str, list[float]] = {}
    cells = [(f"batch{b}", b, [[results["new_tokens"]] * b] * (cell_requests(results, b) // b))
             for b in results["batches"]]
    if results.get("drift_new_tokens"):
        cells.append(("drift", len(results["drift_new_tokens"]), [results["drift_new_tokens"]]))
    for prefix, batch, waves in cells:
        gap = plain_ttft.get(f"batch{batch}/greedy", {}).get("ttft_ms_median", 0.0) / 1e3
        for round_ in range(results["rounds"]):
            for mode in (MODES if round_ % 2 == 0 else MODES[::-1]):
                seconds = tokens = 0.0
                for lengths in waves:
                    wave_s, wave_tokens = server.wave(policy, lengths, mode, gap)
                    seconds, tokens = seconds + wave_s, tokens + wave_tokens
                measured.setdefault(f"{prefix}/{mode}", []).append(tokens / seconds)
    return {key: statistics.median(values) for key, values in measured.items()}


def markdown(results: dict, drafter: str) -> str:
    fixed = {depth: replay(results, drafter, lambda clock, depth=depth: Fixed(depth)) for depth in DEFAULT_STEPS}
    policy = replay(results, drafter, lambda clock: ShapePolicy(3, clock=clock, log=lambda line: None))
    mode_rates = {mode: "/".join(f"{rate:.2f}" for rate in rates(results, drafter, mode)) for mode in MODES}
    lines = [f"Replayed on {results['device']} run of {results['date']} (commit {results['commit']}), drafter "
             f"{drafter}; acceptance by depth greedy {mode_rates['greedy']}, sampled {mode_rates['sampled']}; "
             "simulated output tok/s (median of the rounds).", "",
             "| cell | " + " | ".join("off" if d == 0 else f"chain {d}" for d in DEFAULT_STEPS)
             + " | policy | policy / best fixed |", "|" + "---|" * (len(DEFAULT_STEPS) + 3)]
    for key in policy:
        best = max(DEFAULT_STEPS, key=lambda d: fixed[d][key])
        row = " | ".join(f"{fixed[d][key]:,.0f}" for d in DEFAULT_STEPS)
        lines.append(f"| {key} | {row} | {policy[key]:,.0f} | {policy[key] / fixed[best][key]:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        print(markdown(json.load(handle), argv[1]), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
