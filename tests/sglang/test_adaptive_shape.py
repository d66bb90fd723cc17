"""sglang_eagle_ext/sglang/shape_policy.py: the drafting depth chosen per step (issue 39 stage A).

The policy is driven as SGLang's adaptive controller drives it (a decision before each decode step, a verify
result after it) against a simulated server: a fake clock advanced by a per-(depth, batch) step cost, and
accepted drafts drawn (seeded) from per-depth acceptance rates. The references are computed here, apart from
the policy: the sample mean of the draws, and the throughput of every fixed depth on the same simulated
server. The last tests drive it with SGLang 0.5.23's own AdaptiveController, and check the switch and the
binding that puts it where SGLang's worker constructs its policy."""

import itertools
import json
import os
import random
import re
from types import SimpleNamespace

import pytest
from packaging.version import Version

from sglang_eagle_ext import env
from sglang_eagle_ext.sglang import shape_policy
from sglang_eagle_ext.sglang.compat import adaptive_shape
from sglang_eagle_ext.sglang.shape_policy import DEFAULT_STEPS, DepthAcceptance, ShapePolicy, bucket_of

RATES = (0.9, 0.8, 0.7, 0.6, 0.5)  # draft j accepted with RATES[j - 1] when drafts 1 .. j - 1 were


def draw(rng: random.Random, steps: int, requests: int, rates=RATES) -> list[int]:
    """Accepted drafts per request of one verify step of a depth-``steps`` chain (draft j accepted with
    ``rates[j - 1]`` when drafts 1 .. j - 1 were)."""
    counts = []
    for _ in range(requests):
        count = 0
        while count < steps and rng.random() < rates[count]:
            count += 1
        counts.append(count)
    return counts


def true_tokens(steps: int, rates=RATES) -> float:
    total, reach = 1.0, 1.0
    for rate in rates[:steps]:
        reach *= rate
        total += reach
    return total


class Server:
    """A simulated decode loop: ``cost(steps, batch)`` seconds per step on a fake clock. Under the overlap
    scheduler (``overlap``) the next step is decided before the last step's result is processed."""

    def __init__(self, cost, seed: int = 0, overlap: bool = True, rates=lambda steps: RATES, off_tokens: int = 1):
        self.cost, self.rng, self.now, self.overlap, self.rates = cost, random.Random(seed), 0.0, overlap, rates
        self.off_tokens = off_tokens  # tokens a request an off step makes, reported as SGLang does: n - 1 "drafts"

    def clock(self) -> float:
        return self.now

    def run(self, policy, work: list[tuple[int, float]]) -> tuple[float, list[int]]:
        """Each (batch size, tokens) of ``work`` decoded to its last token: (seconds taken, depth of each step)."""
        started, chosen, waiting = self.now, [], None
        for batch, tokens in work:
            made = 0.0
            while made < tokens:
                steps = policy.get_steps_for_batch(batch)
                if waiting is not None:  # the previous step's result, processed while this one runs
                    policy.on_verify_complete(*waiting)
                chosen.append(steps)
                self.now += self.cost(steps, batch)
                counts = draw(self.rng, steps, batch, self.rates(steps)) if steps else [self.off_tokens - 1] * batch
                made += sum(1 + c for c in counts)
                waiting = (counts, batch)
                if not self.overlap:
                    policy.on_verify_complete(*waiting)
                    waiting = None
        if waiting is not None:
            policy.on_verify_complete(*waiting)
        return self.now - started, chosen


class Fixed:
    """A fixed depth, driven like the policy (the baseline every choice is judged against)."""

    def __init__(self, steps: int):
        self.steps = steps

    def get_steps_for_batch(self, batch: int) -> int:
        return self.steps

    def on_verify_complete(self, counts, batch) -> None:
        return None


def cost(steps: int, batch: int) -> float:
    """ms per step: a fixed host part, a target forward growing with the verified tokens, draft forwards and
    the speculative path's own overhead. Best depth: 3 at batch 1 (by 23 %) and 4 (11 %), off at 64 (15 %)."""
    return 1e-3 * (1.0 + 0.05 * batch * (steps + 1) + 0.2 * steps + 0.02 * batch * steps + (0.3 if steps else 0.0))


def policy_on(server: Server, **kwargs) -> ShapePolicy:
    lines = []
    policy = ShapePolicy(3, clock=server.clock, log=lines.append, **kwargs)
    policy.set_cuda_graph_bs([1, 2, 4, 8, 16, 24, 32, 48, 64])
    policy.lines = lines
    return policy


def test_acceptance_by_depth_is_the_sample_mean():
    rng = random.Random(7)
    acceptance = DepthAcceptance(decay=1.0)
    counts = []
    for _ in range(400):
        step = draw(rng, 4, 8)
        counts += step
        acceptance.observe(step, 4)
    # the per-depth rates telescope: 1 + sum_j prod_{i<=j} a_i is 1 + the mean accepted drafts, exactly
    assert acceptance.expected_tokens(4) == pytest.approx(1 + sum(counts) / len(counts), rel=1e-12)
    assert acceptance.rates() == pytest.approx(RATES[:4], abs=0.05)
    assert acceptance.expected_tokens(0) == 1.0
    # a depth never drafted takes the deepest rate measured
    rates = acceptance.rates()
    assert acceptance.expected_tokens(6) == pytest.approx(
        acceptance.expected_tokens(4) + sum(_prod(rates) * rates[-1] ** k for k in (1, 2)), rel=1e-12)
    assert DepthAcceptance().expected_tokens(2) is None


def _prod(values):
    out = 1.0
    for value in values:
        out *= value
    return out


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("batch", [1, 4, 64])
def test_each_batch_size_runs_its_best_fixed_depth(batch, overlap):
    best = max(DEFAULT_STEPS, key=lambda s: true_tokens(s) / cost(s, batch))
    server = Server(cost, seed=batch, overlap=overlap)
    policy = policy_on(server)
    server.run(policy, [(batch, 300 * batch)])  # probing every depth, then settling
    seconds, chosen = server.run(policy, [(batch, 3000 * batch)])
    fixed = {s: Server(cost, seed=batch).run(Fixed(s), [(batch, 3000 * batch)])[0] for s in DEFAULT_STEPS}
    assert min(fixed, key=fixed.get) == best  # the cost model's best is the simulated best
    assert chosen.count(best) / len(chosen) > 0.95, (best, {s: chosen.count(s) for s in DEFAULT_STEPS})
    assert seconds <= 1.05 * fixed[best]  # probes included; sampling noise both ways


def test_an_off_step_of_several_tokens_is_weighed_by_the_tokens_it_makes():
    """Off making 2 tokens a request a step (each a plain forward: 0.1 + 0.05 x batch ms more than a 1-token
    step) is the best depth at batch 1 of a host-bound step, where off at 1 token is the worst: the policy told
    so runs off and matches that fixed choice; a policy not told so keeps a chain, and so does one told so where
    the steps make one (it weighs off by the tokens its results show)."""
    def two_token_cost(steps: int, batch: int) -> float:
        return cost(steps, batch) + (0 if steps else 1e-3 * (0.1 + 0.05 * batch))

    fixed = {s: Server(two_token_cost, seed=3, off_tokens=2).run(Fixed(s), [(1, 3000)])[0] for s in DEFAULT_STEPS}
    assert min(fixed, key=fixed.get) == 0 and fixed[0] < 0.9 * min(fixed[s] for s in DEFAULT_STEPS if s)
    server = Server(two_token_cost, seed=3, off_tokens=2)
    policy = policy_on(server, off_tokens=2)
    server.run(policy, [(1, 300)])
    seconds, chosen = server.run(policy, [(1, 3000)])
    assert chosen.count(0) / len(chosen) > 0.95 and seconds <= 1.05 * fixed[0]
    # not told, a policy on the same server weighs off at one token and keeps a chain; told 2 where the steps make
    # 1 (batches stock's width-1 verify serves), it learns the 1 from the results and keeps a chain too
    for told, made in ((1, 2), (2, 1)):
        other_server = Server(two_token_cost if made == 2 else cost, seed=3, off_tokens=made)
        other = policy_on(other_server, off_tokens=told)
        other_server.run(other, [(1, 300)])
        _, other_chosen = other_server.run(other, [(1, 3000)])
        assert other_chosen.count(0) / len(other_chosen) < 0.05, (told, made)


TREE = (5, 4, 8)  # the set's tree at depth 5, in place of chain 5
TREE_RATES = (0.97, 0.93, 0.9, 0.85, 0.8)  # its argmax path, four branches a level: accepted deeper than a chain


def tree_rates(steps: int) -> tuple:
    return TREE_RATES if steps == TREE[0] else RATES


def tree_cost(steps: int, batch: int) -> float:
    """:func:`cost`, the tree's with its width: 8 verified tokens and 4 draft rows a request."""
    if steps != TREE[0]:
        return cost(steps, batch)
    return 1e-3 * (1.0 + 0.05 * batch * TREE[2] + 0.2 * steps + 0.02 * batch * steps * TREE[1] + 0.3)


@pytest.mark.parametrize("batch", [1, 4, 64])
def test_a_tree_in_the_set_runs_where_it_beats_the_chains_and_off(batch):
    """The set off, chains 1 and 3 and tree 5/4/8: the tree's acceptance is measured apart from the chains'
    (it accepts deeper) and its cost is measured, not put on the chains' line; it runs at batch 1, where its
    tokens per second are the best, and not at 4 or 64, where its width costs more than it accepts."""
    best = max(DEFAULT_STEPS, key=lambda s: true_tokens(s, tree_rates(s)) / tree_cost(s, batch))
    assert (best == TREE[0]) == (batch == 1)
    server = Server(tree_cost, seed=batch, rates=tree_rates)
    policy = policy_on(server, tree=TREE)
    server.run(policy, [(batch, 300 * batch)])
    seconds, chosen = server.run(policy, [(batch, 3000 * batch)])
    fixed = {s: Server(tree_cost, seed=batch, rates=tree_rates).run(Fixed(s), [(batch, 3000 * batch)])[0]
             for s in DEFAULT_STEPS}
    assert min(fixed, key=fixed.get) == best
    assert chosen.count(best) / len(chosen) > 0.95, (best, {s: chosen.count(s) for s in DEFAULT_STEPS})
    assert seconds <= 1.05 * fixed[best]
    assert policy.expected_tokens("sampled", TREE[0]) == pytest.approx(true_tokens(5, TREE_RATES), abs=0.3)
    assert policy.expected_tokens("sampled", 3) == pytest.approx(true_tokens(3), abs=0.3)  # not the tree's
    assert policy.name(TREE[0]) == "tree 5/4/8" and policy.name(3) == "chain 3/1/4"


def test_a_drifting_batch_size_beats_every_fixed_depth():
    work = [(b, 200 * b) for b in (1, 4, 16, 32, 64, 32, 16, 4, 1) for _ in range(3)]
    server = Server(cost, seed=3)
    policy = policy_on(server)
    seconds, _ = server.run(policy, work)
    for steps in DEFAULT_STEPS:
        assert seconds < Server(cost, seed=3).run(Fixed(steps), work)[0], steps
    assert any("adaptive shape: batch" in line for line in policy.lines)


def stable_cost(steps: int, batch: int) -> float:
    """ms per step whose ratio between two depths does not move with the batch (as measured on the GPU, within
    ~10 %): the best depth is 3 at every batch size."""
    return 1e-3 * (1.0 + 0.05 * batch) * (1.0 + 0.25 * steps)


def test_a_neighbouring_bucket_runs_the_predicted_best_without_probing():
    """After one bucket settled, a short cell at the next bucket starts at the best depth and probes none of the
    depths the first bucket measured (their cost ratios carry over); a depth never measured anywhere (on the
    first bucket's line of chain costs only) may be probed once, and the rest of the cell runs the best."""
    best = max(DEFAULT_STEPS, key=lambda s: true_tokens(s) / stable_cost(s, 2))
    server = Server(stable_cost, seed=11)
    policy = policy_on(server)
    server.run(policy, [(1, 400)])
    measured = {steps for steps in DEFAULT_STEPS if policy.step_time(1, steps) is not None}
    assert best in measured and 0 in measured and len(measured) < len(DEFAULT_STEPS)
    _, chosen = server.run(policy, [(2, 2 * 60)])
    others = [steps for steps in chosen if steps != best]
    assert chosen[0] == best and not set(others) & measured and len(others) <= shape_policy.PROBE_STEPS + 1


def test_a_prediction_carried_far_is_measured_before_it_is_trusted():
    """Under ``cost``, the depths' cost ratios move with the batch (chain 3 costs 2.1x off at batch 1, 4.4x at
    64): a bucket six doublings from the only measured one measures the depths predicted near the best and
    settles on its own best."""
    best = max(DEFAULT_STEPS, key=lambda s: true_tokens(s) / cost(s, 64))
    server = Server(cost, seed=12)
    policy = policy_on(server)
    server.run(policy, [(1, 600)])
    server.run(policy, [(64, 300 * 64)])
    _, chosen = server.run(policy, [(64, 3000 * 64)])
    assert chosen.count(best) / len(chosen) > 0.95, (best, {s: chosen.count(s) for s in DEFAULT_STEPS})


class GappedServer(Server):
    """A server where a quarter of the steps follow a gap of 2 ms (a prefill, the host busy), which only
    lengthens a period, and one result in ten is processed 0.4 ms late, which lengthens its period by what
    it shortens the next (the GPU ran on meanwhile)."""

    GAP, GAP_SHARE, LATE, LATE_SHARE = 2e-3, 0.25, 0.4e-3, 0.1

    def run(self, policy, work):
        cost, owed = self.cost, [0.0]

        def noisy(steps, batch):
            extra = -owed[0] + (self.GAP if self.rng.random() < self.GAP_SHARE else 0.0)
            owed[0] = self.LATE if self.rng.random() < self.LATE_SHARE else 0.0
            return cost(steps, batch) + extra + owed[0]

        self.cost = noisy
        try:
            return super().run(policy, work)
        finally:
            self.cost = cost


@pytest.mark.parametrize("seed", [13, 14, 15])
def test_gaps_and_late_results_do_not_move_the_measured_cost(seed):
    """Each depth the policy measured (the best among them) reads within a late result's shift of its true step
    cost, never a gap's (a mean of the periods would read 0.5 ms more), and the policy runs the best depth."""
    best = max(DEFAULT_STEPS, key=lambda s: true_tokens(s) / stable_cost(s, 8))
    server = GappedServer(stable_cost, seed=seed)
    policy = policy_on(server)
    _, chosen = server.run(policy, [(8, 8 * 400)])
    measured = [steps for steps in DEFAULT_STEPS if policy.step_time(8, steps) is not None]
    assert best in measured and 0 in measured
    for steps in measured:
        assert abs(policy.step_time(8, steps) - stable_cost(steps, 8)) <= GappedServer.LATE + 1e-12, steps
    assert chosen[-1] == best


@pytest.mark.parametrize("batch", [1, 64])
def test_acceptance_forgets_per_request_not_per_result(batch):
    """Traffic whose drafts were all accepted, then traffic whose first draft never is: after n requests of the
    second the first depth's rate is DECAY ** n (the old requests' weight), at batch 1 and batch 64 alike."""
    acceptance = DepthAcceptance()
    for _ in range(2000 // batch):
        acceptance.observe([3] * batch, 3)
    for _ in range(128 // batch):
        acceptance.observe([0] * batch, 3)
    assert acceptance.rates()[0] == pytest.approx(shape_policy.DECAY ** 128, rel=0.01)


def test_a_shallow_run_keeps_what_deeper_drafts_showed():
    """Hours of chain 1 at batch 64 leave the rates of depths 2 .. 5, which no step drafted meanwhile, as
    they were (their counts are not decayed to nothing, which would read as certain acceptance)."""
    rng = random.Random(16)
    acceptance = DepthAcceptance()
    for _ in range(200):
        acceptance.observe(draw(rng, 5, 8), 5)
    deeper = acceptance.rates()[1:]
    for _ in range(5000):
        acceptance.observe(draw(rng, 1, 64), 1)
    assert acceptance.rates()[1:] == pytest.approx(deeper, rel=1e-12)
    assert acceptance.rates()[0] == pytest.approx(RATES[0], abs=0.05)


def test_candidates_that_differ_within_a_bucket_are_respected(tmp_path):
    """A config file's batch-size keys need not be powers of two: batch sizes 4-5 and 6-7 share a bucket but
    not their candidates, and every decision is a candidate of its own batch size."""
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [0, 1, 3, 5]}, "6": {"candidate_steps": [0, 1]}}))
    server = Server(cost, seed=17)
    policy = ShapePolicy(3, str(path), clock=server.clock, log=lambda line: None)
    rng = random.Random(17)
    for _ in range(400):
        batch = rng.randint(4, 7)
        steps = policy.get_steps_for_batch(batch)
        assert steps in ((0, 1) if batch >= 6 else (0, 1, 3, 5)), (batch, steps)
        server.now += cost(steps, batch)
        policy.on_verify_complete(draw(server.rng, steps, batch), batch)


def test_greedy_and_sampled_batches_each_keep_their_own_depth():
    """Cells of all-greedy batches (every draft accepted) and of sampled ones (half accepted) take turns; told
    each batch's kind, the policy learns each kind's acceptance and depth once, and each later cell runs its
    kind's best depth from its first step instead of re-learning the acceptance. Idle batches (size 0, no
    result) between steps change nothing: every period still lands on the depth that ran."""
    rates = {"greedy": (1.0,) * 5, "sampled": (0.5,) * 5}
    best = {kind: max(DEFAULT_STEPS, key=lambda s: true_tokens(s, rates[kind]) / stable_cost(s, 4)) for kind in rates}
    assert best["greedy"] != best["sampled"]
    clock = [0.0]
    policy = ShapePolicy(3, clock=lambda: clock[0], log=lambda line: None)
    policy.set_cuda_graph_bs([1, 2, 4, 8])
    rng = random.Random(18)
    cells = []
    for cell in range(8):
        kind = ("greedy", "sampled")[cell % 2]
        cells.append((kind, []))
        for step in range(150):
            if step % 7 == 3:
                assert policy.get_steps_for_batch(0) == cells[-1][1][-1]  # idle: the running depth, no result
            policy.note_batch(all_greedy=kind == "greedy")
            steps = policy.get_steps_for_batch(4)
            cells[-1][1].append(steps)
            clock[0] += stable_cost(steps, 4)
            counts = []
            for _ in range(4):
                count = 0
                while count < steps and rng.random() < rates[kind][count]:
                    count += 1
                counts.append(count)
            policy.on_verify_complete(counts, 4)
    for kind, chosen in cells[2:]:
        assert set(chosen) == {best[kind]}, kind
    for steps in {best["greedy"], best["sampled"]}:  # no period was matched to a step it did not time
        assert policy.step_time(4, steps) == pytest.approx(stable_cost(steps, 4), rel=1e-9)


def test_a_summary_line_counts_every_step_per_bucket_and_depth():
    server = Server(lambda steps, batch: 1.0, seed=14)  # a second per step: a summary every 60 steps or so
    policy = policy_on(server)
    server.run(policy, [(1, 400), (4, 4 * 400)])
    summaries = [line for line in policy.lines if "steps by depth in the last" in line]
    assert len(summaries) >= 2 and any("batch 4+" in line for line in summaries)
    for line in summaries:  # one decision per second of the fake clock, each counted once
        counted = sum(int(n) for n in re.findall(r"(?:off|chain \d+/1/\d+) (\d+)", line))
        assert counted == shape_policy.SUMMARY_INTERVAL_S, line


def test_switches_are_logged_with_their_reason_at_a_bounded_rate():
    server = Server(cost, seed=5)
    policy = policy_on(server)
    server.run(policy, [(b, 20 * b) for _ in range(100) for b in (1, 64)])  # two buckets taking turns
    switches = [line for line in policy.lines if "->" in line]
    assert switches and all("acceptance by depth" in line for line in switches)
    for key in (1, 64):  # at most one line per bucket per 10 s of the fake clock
        assert len([line for line in switches if f"batch {key}+" in line]) <= 1 + server.now / \
            shape_policy.LOG_INTERVAL_S


def test_the_trace_holds_every_step_with_its_depth_and_period():
    """The trace's rows against the simulated server's own record: one result row per step, in order, at the
    depth that step ran; each timed period equal to that step's simulated cost (under the overlap scheduler a
    result arrives as its step ends); untimed exactly the first step and each step that changed the worker's
    depth; each timed row's CPU time the process clock's advance over the same span (here a quarter of the fake
    wall clock's); every switch with its reason. Without a trace the process clock is never read."""
    server, rows = Server(cost, seed=21), []
    policy = policy_on(server, trace=rows.append, cpu_clock=lambda: 0.25 * server.now)
    _, chosen = server.run(policy, [(1, 300), (64, 64 * 40), (4, 4 * 200)])
    results = [row for row in rows if "depth" in row]
    switches = [row for row in rows if "to" in row]
    assert [row["depth"] for row in results] == chosen
    assert [size for size, _ in itertools.groupby(row["requests"] for row in results)] == [1, 64, 4]
    untimed = [index for index, row in enumerate(results) if row["period_ms"] is None]
    assert untimed == [0] + [i for i in range(1, len(chosen)) if chosen[i] != chosen[i - 1]]
    for row in results:
        if row["period_ms"] is not None:
            assert row["period_ms"] == pytest.approx(1e3 * cost(row["depth"], row["requests"]), abs=1e-3)
            assert row["cpu_ms"] == pytest.approx(0.25 * row["period_ms"], abs=1e-3)
        else:
            assert row["cpu_ms"] is None
    assert switches and all(row["from"] != row["to"] and row["reason"] for row in switches)
    assert [row["t"] for row in rows] == sorted(row["t"] for row in rows)
    json.dumps(rows)  # the rows are JSON as they are

    def unread():
        raise AssertionError("the process clock read without a trace")

    untraced = Server(cost, seed=21)
    untraced.run(policy_on(untraced, cpu_clock=unread), [(1, 300)])  # raises if the clock is read


def test_the_trace_file_appends_json_lines_in_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(adaptive_shape, "TRACE_ROWS", 3)
    trace = adaptive_shape.TraceFile(str(tmp_path / "run"))
    rows = [{"t": i / 7, "depth": i % 4, "reason": f"row {i}"} for i in range(7)]
    for row in rows:
        trace(row)
    lines = (tmp_path / f"run.{os.getpid()}.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == rows[:6]  # two full batches written, the seventh waits
    trace.flush()
    lines = (tmp_path / f"run.{os.getpid()}.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == rows


def test_cycle_mode_runs_every_depth_in_turn():
    server = Server(cost, seed=1)
    policy = policy_on(server, mode="cycle")
    _, chosen = server.run(policy, [(4, 40)])
    assert sorted(set(chosen)) == list(DEFAULT_STEPS) and all(a != b for a, b in zip(chosen, chosen[1:]))


def test_hold_mode_keeps_the_launch_depth_where_the_cost_policy_leaves_it(tmp_path):
    # the diagnostic that times an engine holding every candidate's state at one depth: the same traffic moves the
    # cost policy off the launch depth (the control), and never the held one
    steps = {}
    for mode in ("cost", "hold"):
        server = Server(cost, seed=3)
        _, steps[mode] = server.run(policy_on(server, mode=mode), [(1, 300), (64, 300)])
    assert set(steps["cost"]) != {3} and set(steps["hold"]) == {3}
    # where the launch depth is no candidate, the first of that batch size's candidates
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [1, 3]}, "16": {"candidate_steps": [0, 1]}}))
    held = ShapePolicy(3, str(path), mode="hold", log=lambda line: None)
    held.set_cuda_graph_bs([1, 2, 4, 8, 16, 32])
    assert {held.get_steps_for_batch(2) for _ in range(20)} == {3}
    assert {held.get_steps_for_batch(20) for _ in range(20)} == {0}
    with pytest.raises(ValueError, match="'held'"):
        ShapePolicy(3, mode="held")


def test_candidates_from_sglangs_config_file(tmp_path):
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [1, 3]}, "16": {"candidate_steps": [0, 1]},
                                "ema_alpha": 0.2}))
    policy = ShapePolicy(1, str(path), log=lambda line: None)
    policy.set_cuda_graph_bs([1, 2, 4, 8, 16, 32])
    assert policy.candidate_steps == [0, 1, 3]
    assert policy.cuda_graph_bs_for_step(3) == [1, 2, 4, 8]
    assert policy.cuda_graph_bs_for_step(0) == [16, 32]
    assert policy.cuda_graph_bs_for_step(1) == [1, 2, 4, 8, 16, 32]
    assert all(policy.get_steps_for_batch(20) in (0, 1) for _ in range(50))
    (tmp_path / "bad.json").write_text(json.dumps({"ema_alpha": 0.2}))
    with pytest.raises(ValueError, match="bad.json"):
        ShapePolicy(1, str(tmp_path / "bad.json"))


def test_buckets_are_powers_of_two():
    assert [bucket_of(b) for b in (1, 2, 3, 4, 7, 8, 48, 64, 100)] == [1, 2, 2, 4, 4, 8, 32, 64, 64]


def test_sglangs_own_controller_drives_it():
    """SGLang 0.5.23's AdaptiveController with a worker stand-in: states built for the policy's depths at the
    batch sizes it names, and the worker switched to what the policy chooses."""
    state_module = pytest.importorskip("sglang.srt.speculative.adaptive_runtime_state")

    class Worker:
        speculative_num_steps = 3

        def __init__(self):
            self.built, self.applied = {}, []

        def build_adaptive_runtime_state(self, speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=None):
            self.built[speculative_num_steps] = (speculative_num_draft_tokens, cuda_graph_bs)
            return state_module.SpecRuntimeState(speculative_num_steps, speculative_num_draft_tokens,
                                                  None, None, None, None, None, None)

        def apply_runtime_state(self, state):
            self.speculative_num_steps = state.speculative_num_steps
            self.applied.append(state.speculative_num_steps)

    server = Server(cost, seed=2)
    worker = Worker()
    controller = state_module.AdaptiveController(worker, ShapePolicy(3, clock=server.clock, log=lambda line: None))
    controller.init_states(cuda_graph_bs=[1, 8, 64])
    assert worker.built == {steps: (steps + 1, [1, 8, 64]) for steps in DEFAULT_STEPS}
    for _ in range(400):  # without overlap: each result processed before the next decision
        controller.activate_step_by_batch(64)
        server.now += cost(worker.speculative_num_steps, 64)
        controller.on_verify_complete(draw(server.rng, worker.speculative_num_steps, 64), batch_size=64)
    best = max(DEFAULT_STEPS, key=lambda s: true_tokens(s) / cost(s, 64))
    assert worker.speculative_num_steps == best and best in worker.applied and 0 in worker.applied


@pytest.mark.parametrize("value, mode", [(None, "off"), ("0", "off"), ("1", "on"), ("On", "on"), ("cycle", "cycle"),
                                         ("hold", "hold")])
def test_the_switch(monkeypatch, value, mode):
    if value is None:
        monkeypatch.delenv(adaptive_shape.ENV_SWITCH, raising=False)
    else:
        monkeypatch.setenv(adaptive_shape.ENV_SWITCH, value)
    assert adaptive_shape.selected(Version("0.5.23")) == mode
    if mode == "off":
        assert adaptive_shape.selected(Version("0.5.16")) == "off"
    else:  # set on where SGLang's adaptive mode takes no policy: start-up stops, saying why
        with pytest.raises(env.SwitchError, match="0.5.21 and later.*this is SGLang 0.5.16"):
            adaptive_shape.selected(Version("0.5.16"))


def test_a_misspelt_switch_is_refused(monkeypatch):
    monkeypatch.setenv(adaptive_shape.ENV_SWITCH, "fast")
    with pytest.raises(env.SwitchError, match="SGLANG_EAGLE_EXT_ADAPTIVE='fast'"):
        adaptive_shape.selected(Version("0.5.23"))


@pytest.mark.parametrize("value", ["1", "cycle", "hold", "0"])
def test_the_binding_puts_the_policy_where_sglangs_worker_constructs_it(monkeypatch, tmp_path, value):
    worker = pytest.importorskip("sglang.srt.speculative.eagle_worker_v2")
    stock = worker.AdaptiveSpeculativeParams
    monkeypatch.setattr(worker, "AdaptiveSpeculativeParams", stock)  # put back after the test

    def forward_batch_generation(self, batch, on_publish=None):  # SGLang's, standing in: what it was handed
        return batch

    monkeypatch.setattr(worker.EAGLEWorkerV2, "forward_batch_generation", forward_batch_generation)
    # put back after the test: what the binding wraps (plain_off's verify, adaptive_trees' seams)
    scheduler = pytest.importorskip("sglang.srt.managers.scheduler")
    for owner, method in ((worker.EAGLEWorkerV2, "verify"), (worker.EAGLEWorkerV2, "__init__"),
                          (worker.EAGLEWorkerV2, "_override_worker_state"),
                          (worker.EAGLEWorkerV2, "build_adaptive_runtime_state"),
                          (worker.EAGLEWorkerV2, "apply_runtime_state"),
                          (worker.EagleDraftWorker, "_draft_extend_for_prefill"),
                          (worker.EagleDraftWorker, "_draft_extend_for_decode"), (worker.EagleDraftWorker, "draft"),
                          (scheduler.Scheduler, "__init__")):
        monkeypatch.setattr(owner, method, owner.__dict__[method])
    monkeypatch.setenv(adaptive_shape.ENV_SWITCH, value)
    monkeypatch.setenv(adaptive_shape.TRACE_SWITCH, str(tmp_path / "Trace"))
    phrase = adaptive_shape._bind_once_scheduler_loads(None)
    policy = worker.AdaptiveSpeculativeParams(initial_steps=3, cfg_path=None)  # as EAGLEWorkerV2.__init__ calls it
    if value == "0":
        assert worker.AdaptiveSpeculativeParams is stock and phrase.startswith("adaptive shape: stock's")
        return
    assert isinstance(policy, ShapePolicy) and policy.candidate_steps == list(DEFAULT_STEPS)
    assert policy._trace.path == f"{tmp_path / 'Trace'}.{os.getpid()}.jsonl"  # the path as given, case kept
    assert ("round-robin" in phrase) == (value == "cycle") and "--speculative-adaptive" in phrase
    assert ("held at the launch depth" in phrase) == (value == "hold")
    assert policy._mode == {"1": "cost", "cycle": "cycle", "hold": "hold"}[value]
    # depth 0 is plain decoding (the default of the off switch): the worker's verify is wrapped, and its depth-0
    # state's build captures the target's plain decode graphs
    assert "off: plain decoding, by the target's own decode graphs" in phrase
    for method in ("verify", "build_adaptive_runtime_state"):
        assert getattr(getattr(worker.EAGLEWorkerV2, method), "__eagle_ext_original__", None) is not None
    # a launch at top-k above 1 is the set's tree (test_adaptive_trees.py): the worker's seams are wrapped
    assert phrase.endswith("; trees: the launch shape where its top-k is above 1")
    assert getattr(worker.EagleDraftWorker.draft, "__eagle_ext_original__", None) is not None
    assert getattr(scheduler.Scheduler.__init__, "__eagle_ext_original__", None) is not None
    # the worker's decode entry tells the policy the batch's kind before SGLang asks it for the depth, from
    # the requests (SGLang's is_all_greedy stays low once a sampled request joined); an idle batch keeps it
    this = SimpleNamespace(adaptive_controller=SimpleNamespace(params=policy))
    for top_ks, kind in (((1, 1), "greedy"), ((1, 40), "sampled"), ((), "sampled"), ((1,), "greedy"), ((), "greedy")):
        batch = SimpleNamespace(reqs=[SimpleNamespace(sampling_params=SimpleNamespace(top_k=k)) for k in top_ks],
                                sampling_info=SimpleNamespace(is_all_greedy=False))
        assert worker.EAGLEWorkerV2.forward_batch_generation(this, batch) is batch
        assert policy._traffic == kind, top_ks


# The plain "off" (plain_off.py): which depth-0 batches it serves; its run on a server is in
# test_adaptive_lossless.py (outputs, the target's law, and which path each batch took)
def _depth_zero_batch(**overrides):
    """A decode batch at depth 0 as plain_off reads it, every field at the value that lets it serve."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    request = SimpleNamespace(sampling_params=SimpleNamespace(frequency_penalty=0.0, presence_penalty=0.0,
                                                              repetition_penalty=1.0, min_new_tokens=0))
    fields = dict(forward_mode=ForwardMode.DECODE, spec_info=SimpleNamespace(spec_steps=0, draft_token_num=1),
                  has_grammar=False, return_logprob=False, return_hidden_states=False, reqs=[request],
                  sampling_info=SimpleNamespace(has_custom_logit_processor=False, has_watermark_candidates=False),
                  hisparse_coordinator=None, seq_lens=SimpleNamespace(shape=(1,)))
    fields.update(overrides)
    return SimpleNamespace(**fields)


def _worker(graph_runner=None, steps=0):
    model_runner = SimpleNamespace(decode_cuda_graph_runner=graph_runner,
                                   model_config=SimpleNamespace(model_is_mrope=False))
    return SimpleNamespace(speculative_num_steps=steps, target_worker=SimpleNamespace(model_runner=model_runner))


def test_plain_off_serves_only_depth_zero_batches_it_keeps_stocks_semantics_for(monkeypatch):
    from sglang_eagle_ext.sglang.compat import off_graphs, plain_off

    context = pytest.importorskip("sglang.srt.runtime_context")
    parallel = SimpleNamespace(pp_size=1, attn_dp_size=1)  # what a server publishes; none runs here
    monkeypatch.setattr(context, "get_parallel", lambda: parallel)
    worker, batch = _worker(), _depth_zero_batch()
    assert plain_off.is_width_one_verify(worker, batch)
    hybrid_arch = pytest.importorskip("sglang.srt.configs.hybrid_arch")
    monkeypatch.setattr(hybrid_arch, "mambaish_config", lambda config: getattr(config, "mamba", None))
    assert plain_off.stock_reason(worker, batch, None, graphs_only=True) is None
    # only stock's width-1 input at depth 0 is replaced: a drafted verify, another depth, an idle batch are not
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    assert not plain_off.is_width_one_verify(worker, _depth_zero_batch(spec_info=SimpleNamespace(
        spec_steps=3, draft_token_num=4)))
    assert not plain_off.is_width_one_verify(_worker(steps=1), batch)
    assert not plain_off.is_width_one_verify(worker, _depth_zero_batch(forward_mode=ForwardMode.IDLE))
    penalties = [dict(frequency_penalty=0.5), dict(presence_penalty=-0.2), dict(repetition_penalty=1.1),
                 dict(min_new_tokens=4)]
    for penalty in penalties:
        request = SimpleNamespace(sampling_params=SimpleNamespace(**{**vars(batch.reqs[0].sampling_params),
                                                                    **penalty}))
        assert plain_off.stock_reason(worker, _depth_zero_batch(reqs=[batch.reqs[0], request]), None,
                                      graphs_only=True) == "penalties", penalty
    for field, reason in (("has_grammar", "grammar"), ("return_logprob", "log-probs"),
                          ("return_hidden_states", "returned hidden states")):
        assert plain_off.stock_reason(worker, _depth_zero_batch(**{field: True}), None, True) == reason
    custom = SimpleNamespace(has_custom_logit_processor=True, has_watermark_candidates=False)
    assert "custom logit" in plain_off.stock_reason(worker, _depth_zero_batch(sampling_info=custom), None, True)
    assert "pipeline" in plain_off.stock_reason(worker, batch, object(), True)  # PP proxy tensors
    for name in ("pp_size", "attn_dp_size"):  # an engine's own: a fresh worker each (read once per worker)
        monkeypatch.setattr(parallel, name, 2)
        assert "parallelism" in plain_off.stock_reason(_worker(), batch, None, True), name
        monkeypatch.setattr(parallel, name, 1)
    hybrid = _worker()
    hybrid.target_worker.model_runner.model_config.mamba = object()  # a mamba / GDN config, as stock detects it
    assert "hybrid" in plain_off.stock_reason(hybrid, batch, None, True)
    mrope = _worker()
    mrope.target_worker.model_runner.model_config.model_is_mrope = True
    assert "multimodal rope" in plain_off.stock_reason(mrope, batch, None, True)
    assert "sparse" in plain_off.stock_reason(worker, _depth_zero_batch(hisparse_coordinator=object()), None, True)
    # a graphed target decode: plain decoding by its plain decode graphs where they hold the batch, else the
    # graphed width-1 verify, unless the eager plain path is asked for
    graphed = _worker(graph_runner=object())
    assert "not captured" in plain_off.stock_reason(graphed, batch, None, graphs_only=True)
    assert plain_off.stock_reason(graphed, batch, None, graphs_only=False) is None
    setattr(graphed, off_graphs.ATTRIBUTE, off_graphs.OffGraphs(SimpleNamespace(max_bs=1), object()))
    assert plain_off.stock_reason(graphed, batch, None, graphs_only=True) is None
    two = _depth_zero_batch(seq_lens=SimpleNamespace(shape=(2,)))
    assert "above the plain decode graphs' largest" in plain_off.stock_reason(graphed, two, None, graphs_only=True)


def test_plain_off_reads_an_engines_parallelism_and_target_kind_once_per_worker(monkeypatch):
    """They do not change while an engine serves; reading a hybrid config each step cost a CPU-bound step about
    a tenth of a millisecond. Batch facts are read every step."""
    from sglang_eagle_ext.sglang.compat import plain_off

    context = pytest.importorskip("sglang.srt.runtime_context")
    hybrid_arch = pytest.importorskip("sglang.srt.configs.hybrid_arch")
    parallel = SimpleNamespace(pp_size=1, attn_dp_size=1)
    monkeypatch.setattr(context, "get_parallel", lambda: parallel)
    reads = []
    monkeypatch.setattr(hybrid_arch, "mambaish_config", lambda config: reads.append(config))
    worker, batch = _worker(), _depth_zero_batch()
    for _ in range(3):
        assert plain_off.stock_reason(worker, batch, None, graphs_only=True) is None
        assert plain_off.stock_reason(worker, _depth_zero_batch(has_grammar=True), None, True) == "grammar"
    assert len(reads) == 1
    monkeypatch.setattr(parallel, "pp_size", 2)  # not re-read by this worker; a new one reads it
    assert plain_off.stock_reason(worker, batch, None, True) is None
    assert plain_off.stock_reason(_worker(), batch, None, True) == plain_off.PARALLELISM
    assert len(reads) == 1  # parallelism decided before the target's kind is read


def test_plain_off_counts_reach_the_log_at_powers_of_two():
    from sglang_eagle_ext.sglang.compat import plain_off

    lines = []
    counts = plain_off.OffCounts(log=lines.append)
    for _ in range(9):
        counts.add(plain_off.PLAIN)
    counts.add("stock's width-1 verify (penalties)")
    assert [line.split("adaptive off: ")[1] for line in lines] == [
        "1 step by plain decoding"] + [f"{n} steps by plain decoding" for n in (2, 4, 8)] + [
        "1 step by stock's width-1 verify (penalties)"]


@pytest.mark.parametrize("value, phrase", [("stock", "off: stock's width-1 verify (SGLANG_EAGLE_EXT_ADAPTIVE_OFF"),
                                           ("eager", "eager even under CUDA graphs"),
                                           ("plain", "by the target's own decode graphs")])
def test_the_off_switch_selects_what_depth_zero_runs(monkeypatch, value, phrase):
    from sglang_eagle_ext.sglang.compat import plain_off

    worker = pytest.importorskip("sglang.srt.speculative.eagle_worker_v2")
    stock = {method: getattr(worker.EAGLEWorkerV2, method) for method in ("verify", "build_adaptive_runtime_state")}
    for method, original in stock.items():
        monkeypatch.setattr(worker.EAGLEWorkerV2, method, original)  # put back after the test
    monkeypatch.setenv(plain_off.OFF_SWITCH, value)
    assert phrase in plain_off.bind(worker, plain_off.selected())
    assert (worker.EAGLEWorkerV2.verify is stock["verify"]) == (value == "stock")
    # only the default captures the plain decode graphs
    captures = worker.EAGLEWorkerV2.build_adaptive_runtime_state is not stock["build_adaptive_runtime_state"]
    assert captures == (value == "plain")


def test_plain_off_falls_back_to_stock_on_a_release_it_was_not_built_for(monkeypatch):
    from sglang_eagle_ext.sglang.compat import plain_off

    worker = pytest.importorskip("sglang.srt.speculative.eagle_worker_v2")
    monkeypatch.setattr(worker.EAGLEWorkerV2, "verify", worker.EAGLEWorkerV2.verify)
    stock = worker.EAGLEWorkerV2.verify
    monkeypatch.setattr(plain_off.releases, "installed_release", lambda: Version("0.5.21"))
    phrase = plain_off.bind(worker, "plain")
    assert "stock's width-1 verify" in phrase and "this is 0.5.21" in phrase and worker.EAGLEWorkerV2.verify is stock


def test_a_misspelt_off_switch_stops_start_up(monkeypatch):
    monkeypatch.setenv(adaptive_shape.ENV_SWITCH, "1")
    monkeypatch.setenv("SGLANG_EAGLE_EXT_ADAPTIVE_OFF", "fast")
    with pytest.raises(env.SwitchError, match="SGLANG_EAGLE_EXT_ADAPTIVE_OFF"):
        adaptive_shape.selected(Version("0.5.23"))
