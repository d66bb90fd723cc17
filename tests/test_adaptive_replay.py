"""benchmarks/real_target/adaptive_replay.py: the depth policy replayed on the first GPU run's own costs.

References: the run's measured arms (the replayed fixed chains must land near them), the chain law
``E_S = 1 + sum_j prod_{i<=j} a_i`` computed here from the derived rates (it must give back the tokens per
step they were solved from), and each fixed depth on the same simulated server (the policy's yardstick)."""

import json
import os

import pytest
from tests.script_module import ROOT, load_siblings

from sglang_eagle_ext.sglang.shape_policy import DEFAULT_STEPS

(replay,) = load_siblings("benchmarks/real_target", "adaptive_replay")
RUN = os.path.join(ROOT, "benchmarks", "results", "adaptive", "serve_8b-geometry_h200_sglang-0.5.23.json")


@pytest.fixture(scope="module")
def run() -> dict:
    with open(RUN, encoding="utf-8") as handle:
        return json.load(handle)


def chain_tokens(rates: list[float], depth: int) -> float:
    total, reach = 1.0, 1.0
    for rate in rates[:depth]:
        reach *= rate
        total += reach
    return total


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_rates_give_back_each_chains_tokens_per_step(run, mode):
    rates = replay.rates(run, "zipf", mode)
    tolerance = 1e-9 if mode == "sampled" else 0.01  # greedy: a rate solved above 1 is held at 1
    for depth in (1, 3, 5):
        assert chain_tokens(rates, depth) == pytest.approx(replay.tokens_per_step(run, "zipf", mode, depth),
                                                           rel=tolerance)
    # this drafter accepts every greedy draft, and about 0.58 of sampled ones at every depth
    assert min(replay.rates(run, "zipf", "greedy")) > 0.95 and max(replay.rates(run, "zipf", "sampled")) < 0.65


def test_replayed_fixed_chains_land_near_the_measured_arms(run):
    """The costs come from the greedy cells, so the greedy replays check the derivation; the sampled ones
    check the rates against cells they were not read from. Within 15 %: every replayed wave waits plain
    decoding's time to first token, where the arms' own ranged 27-43 ms at batch 1."""
    for depth, shape in replay.CHAINS.items():
        simulated = replay.replay(run, "zipf", lambda clock, depth=depth: replay.Fixed(depth))
        for key, value in simulated.items():
            if key.startswith("drift/"):
                continue
            measured = run["arms"][f"zipf/{shape}/plugin"]["cells"][key]["tok_s_median"]
            assert value == pytest.approx(measured, rel=0.15), (shape, key)


def test_the_policy_keeps_within_a_few_percent_of_the_best_fixed_depth(run):
    """On the first run's costs and acceptance the policy makes at least 0.93 of the best fixed depth of its
    set in every cell, though the first cell of each batch size and kind pays for what it measures there and
    the greedy and sampled cells take turns (the policy of that run made 0.82-0.92 of chain 3 alone at greedy
    on the GPU; commit 6cbda76's policy replayed here makes 0.88-0.99 of it)."""
    fixed = {depth: replay.replay(run, "zipf", lambda clock, depth=depth: replay.Fixed(depth))
             for depth in DEFAULT_STEPS}
    policy = replay.replay(run, "zipf", lambda clock: replay.ShapePolicy(3, clock=clock, log=lambda line: None))
    always_off = replay.replay(run, "zipf", lambda clock: replay.Fixed(0))
    for key, value in policy.items():
        best = max(fixed[depth][key] for depth in DEFAULT_STEPS)
        assert value >= 0.93 * best, key
        assert always_off[key] < 0.93 * best  # the bound can fail: no speculation falls short everywhere
