"""SmolLM2 served by SGLang with trained drafters: acceptance, speed and losslessness per cell (GPU).

Arms, one engine each, started one after another in a child process (never two at once, so no arm
is timed beside another's start-up):

* ``plain``: the target alone (plain decoding), the baseline of every ratio;
* ``<drafter>/<shape>/plugin``: EAGLE-3 with this package's class (SGLang's default activation);
* ``<drafter>/<shape>/stock``: the same drafter and shape with the plugin off
  (``SGLANG_EAGLE_EXT=0``): stock SGLang's own EAGLE-3 class and loader. A drafter stock cannot
  load is tried once, with the first shape, and the other shapes' cells say so.

Shapes: chain 3/1/4, SGLang's default tree for Llama (5 steps, top-k 4, 8 tokens), a wider tree
(6/8/32), the shortest chain, 1/1/2 (``chain1``; vLLM's ``num_speculative_tokens`` 1) and chain 5/1/6
(``chain5``, vLLM's 5); and two depth
policies under SGLang's ``--speculative-adaptive`` (no speculation or a chain depth chosen per step):
``adaptive``, this package's cost policy (``SGLANG_EAGLE_EXT_ADAPTIVE=1``), and ``stock-adaptive``, stock's
own policy, both over this plugin's class (issue 39); named in ``--arms`` or ``--shapes`` only, the
diagnostics (:data:`DIAGNOSTICS`: each policy pinned to chain 3/1/4, this package's without its trace, and this
package's held at 3/1/4 among its four depths). Cells:
batch 1 (the first ``--single`` MT-bench first turns, one request at a time), 16 and 64 (the first 32
and 64 prompts, in requests of 16 and 64 sent together), greedy and temperature 0.7 / top-p 0.9,
``--new-tokens`` each (``ignore_eos``: every request decodes the same number of tokens, so the batch
stays at its size for the whole cell), ``--rounds`` timed rounds per cell in rotating mode order, after
an untimed warm-up of every batch size and mode (the run committed on 2026-11-27 predates it: its
first rounds carry the warm-up, and its tables show each cell's faster round). Each cell: output
tokens/s (median over rounds and every round's value), time to first token (greedy cells;
:func:`first_token_requests`), acceptance length (SGLang's completion tokens / verify steps), and
for greedy cells the outputs' agreement with plain decoding at the same batch size under the near-tie
rule: an output that departs where plain decoding's top-2 log-probabilities lie within ``NEAR_TIE``
nats counts as a near-tie (bf16 batch-dependence), one that departs elsewhere as a mismatch. Plain
decoding's own agreement between batch 1 and the batched cells is recorded beside them (the engine's
floor). ``--drift`` adds a cell per mode whose batch drifts: 64 requests (or as many as it names) sent
together whose lengths run from a quarter to four times ``--new-tokens`` (:func:`drift_lengths`), so the
running batch falls from 64 to 1 as they end, and a depth policy meets every batch size within one cell.

usage (repository root; SGLang 0.5.23 and this package staged, see benchmarks/gpu/stage_package.sh)::

    python3 benchmarks/real_target/serve_bench.py OUTDIR --target DIR --prompts mtbench.jsonl \
        --drafter specforge=DIR --drafter speculators=DIR [--arms plain,specforge/chain/plugin,...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import re
import signal
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gpu"))
import engines  # noqa: E402
import turns  # noqa: E402
from results_file import save_json  # noqa: E402
from table import attention_backend  # noqa: E402

# the demo's near-tie rule (nats between plain decoding's top-2 at the first departure), stated once
from sglang_eagle_ext.demo.run import NEAR_TIE, first_departure  # noqa: E402
from sglang_eagle_ext.targets import file_sha256  # noqa: E402
from sglang_eagle_ext.sglang.compat.adaptive_shape import TRACE_SWITCH  # noqa: E402
from sglang_eagle_ext.sglang.compat.plain_off import OFF_SWITCH  # noqa: E402
from sglang_eagle_ext.sglang.compat.plain_off import TOKENS_SWITCH as OFF_TOKENS_SWITCH  # noqa: E402
from sglang_eagle_ext.sglang.compat.deferred_extend import AUDIT_SWITCH as DEFERRED_AUDIT  # noqa: E402
from sglang_eagle_ext.sglang.compat.deferred_extend import ENV_SWITCH as DEFERRED_SWITCH  # noqa: E402

SHAPES = {shape.name: shape for shape in (engines.Shape("chain", 3, 1, 4), engines.Shape("tree", 5, 4, 8),
                                          engines.Shape("wide", 6, 8, 32), engines.Shape("chain1", 1, 1, 2),
                                          engines.Shape("chain5", 5, 1, 6),
                                          engines.Shape("adaptive", 3, 1, 4, policy="cost"),
                                          engines.Shape("stock-adaptive", 3, 1, 4, policy="stock"))}
# What an adaptive engine's step costs beside a fixed one's at the same shape (issue 39: on an H200 the cost
# policy's engine stepped 2-3 ms slower at batch 1 at every depth than the fixed chain 3/1/4 and stock's adaptive
# engines): each policy pinned to chain 3/1/4 by its candidates, so that "chain", "pin3-stock", "pin3-cost" and
# "pin3-cost-untraced" differ only by the adaptive path's per-step work, this package's policy and its trace;
# "adaptive-untraced" is "adaptive" without the trace; "hold3" keeps 3/1/4 at every step while SGLang holds the
# states of the policy's four depths (off, 1, 3, 5), so that against "pin3-cost" it is what a set of candidates costs
# a step (section 15 of docs/adaptive-shape.md: 4.13 against 3.46 ms at depth 3, two engines minutes apart). Not in
# --shapes' default; adaptive_table.py's "overhead" tabulates them against "chain".
# Where speculation off's step goes (section 16: 5.98 ms at batch 1 where a plain step costs 1.73): each engine is
# off at batch 1 (chain 1 above it, SGLang's launch depth having to be a candidate), by stock's graphed width-1
# verify with the drafter's extend ("off-verify"), without the extend (SGLang's own switch, which leaves the
# drafter cold for a later depth: "off-skip"), by this package's plain decode step run eagerly ("off-eager") and
# replaying the target's plain decode graphs (the default: "off-graph"), and that without the extend
# ("off-graph-skip"); adaptive_table.py's "off" sets them against plain decoding.
OFF_AT_BATCH_1 = {1: (0,), 2: (1,)}
SKIP_EXTEND = {"SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND": "1"}


def off_below_64(depth: int) -> dict[int, tuple[int, ...]]:
    """Candidates off at batch 1-63 and ``depth`` (the launch's) at 64."""
    return {1: (0,), 64: (depth,)}


# What the deferred drafter extend saves (compat/deferred_extend.py, K = 8): engines off at batches 1 and 16 (the
# nearest key's; chain 1 at 64) with the extend at every off step ("off16-graph"), deferred ("off16-deferred") and
# skipped, the drafter left cold (the floor: "off16-skip"); the cost policy with it ("adaptive-deferred"), and with
# each catch-up checked against stock's per-step extends, run as well (its log's audit lines; its times pay for
# both: "adaptive-deferred-audit"); and at K = 32, the catch-up's eager forward a quarter as often ("-deferred32")
OFF_BELOW_64 = off_below_64(1)
DEFERRED = {DEFERRED_SWITCH: "8"}
DEFERRED_32 = {DEFERRED_SWITCH: "32"}
# off making 2, 4 or 8 plain tokens a request a step (docs/adaptive-shape.md sections 21 and 22), off at batch 1 and
# 16 and under the cost policy. A step makes at most the KV slots the set's largest shape reserves a request (4 for
# chain 3/1/4, 6 for the default set's chain 5, 8 for chain 7), so the 4- and 8-token engines run chain 3 and 7 at
# 64; 8 tokens a step defer the catch-up to 32 (at 8 it would run every step)
OFF_TWO_TOKENS = {**DEFERRED, OFF_TOKENS_SWITCH: "2"}
OFF_FOUR_TOKENS = {**DEFERRED, OFF_TOKENS_SWITCH: "4"}
OFF_EIGHT_TOKENS = {**DEFERRED_32, OFF_TOKENS_SWITCH: "8"}
# Depth 7 (the 8B geometry's first deferred run, 2026-11-29: stock's adaptive mode, whose batch-1 slot drafts 7
# deep, made 901 tok/s at greedy batch 1 where chain 5, the deepest of the policy's default set, made 744): the
# cost policy over off, 1, 3, 5 and 7 ("adaptive7-deferred", a candidates file as a user would pass it) and the
# fixed chain 7/1/8 (DEEP, not in --shapes' default)
DEPTHS_TO_7 = (0, 1, 3, 5, 7)
DIAGNOSTICS = {shape.name: shape for shape in (
    engines.Shape("pin3-stock", 3, 1, 4, policy="stock", candidates=(3,)),
    engines.Shape("pin3-cost", 3, 1, 4, policy="cost", candidates=(3,)),
    engines.Shape("pin3-cost-untraced", 3, 1, 4, policy="cost", candidates=(3,), trace=False),
    engines.Shape("adaptive-untraced", 3, 1, 4, policy="cost", trace=False),
    engines.Shape("hold3", 3, 1, 4, policy="hold"),
    engines.Shape("off-verify", 1, 1, 2, policy="stock", candidates=OFF_AT_BATCH_1),
    engines.Shape("off-skip", 1, 1, 2, policy="stock", candidates=OFF_AT_BATCH_1, env=SKIP_EXTEND),
    engines.Shape("off-eager", 1, 1, 2, policy="cost", candidates=OFF_AT_BATCH_1, env={OFF_SWITCH: "eager"}),
    engines.Shape("off-graph", 1, 1, 2, policy="cost", candidates=OFF_AT_BATCH_1),
    engines.Shape("off-graph-skip", 1, 1, 2, policy="cost", candidates=OFF_AT_BATCH_1, env=SKIP_EXTEND),
    engines.Shape("off16-graph", 1, 1, 2, policy="cost", candidates=OFF_BELOW_64),
    engines.Shape("off16-deferred", 1, 1, 2, policy="cost", candidates=OFF_BELOW_64, env=DEFERRED),
    engines.Shape("off16-skip", 1, 1, 2, policy="cost", candidates=OFF_BELOW_64, env=SKIP_EXTEND),
    engines.Shape("off16-deferred32", 1, 1, 2, policy="cost", candidates=OFF_BELOW_64, env=DEFERRED_32),
    engines.Shape("adaptive-deferred", 3, 1, 4, policy="cost", env=DEFERRED),
    engines.Shape("adaptive-deferred32", 3, 1, 4, policy="cost", env=DEFERRED_32),
    engines.Shape("adaptive-deferred-audit", 3, 1, 4, policy="cost", env={**DEFERRED, DEFERRED_AUDIT: "1"}),
    engines.Shape("adaptive7-deferred", 3, 1, 4, policy="cost", candidates=DEPTHS_TO_7, env=DEFERRED),
    engines.Shape("off16-two-tokens", 1, 1, 2, policy="cost", candidates=OFF_BELOW_64, env=OFF_TWO_TOKENS),
    engines.Shape("adaptive-two-tokens", 3, 1, 4, policy="cost", env=OFF_TWO_TOKENS),
    engines.Shape("off16-four-tokens", 3, 1, 4, policy="cost", candidates=off_below_64(3), env=OFF_FOUR_TOKENS),
    engines.Shape("off16-eight-tokens", 7, 1, 8, policy="cost", candidates=off_below_64(7), env=OFF_EIGHT_TOKENS),
    engines.Shape("adaptive-four-tokens", 3, 1, 4, policy="cost", env=OFF_FOUR_TOKENS),
    engines.Shape("adaptive7-eight-tokens", 3, 1, 4, policy="cost", candidates=DEPTHS_TO_7, env=OFF_EIGHT_TOKENS))}
DEEP = {shape.name: shape for shape in (engines.Shape("chain7", 7, 1, 8),)}
ALL_SHAPES = {**SHAPES, **DIAGNOSTICS, **DEEP}
DRIFT_REQUESTS = 64
BATCHES = (1, 16, 64)
MODES = {"greedy": {"temperature": 0.0}, "sampled": {"temperature": 0.7, "top_p": 0.9}}
START_TIMEOUT_S = 300
CELL_TIMEOUT_S = 900  # one cell's rounds (a CPU check's are slow)
SEED = 0


def arm_names(drafters: list[str], shapes: list[str]) -> list[str]:
    """Plain decoding, then each drafter's shapes with this plugin and with stock SGLang; a depth policy's
    shape with this plugin only (its "stock-adaptive" is stock's policy over this plugin's class)."""
    names = ["plain"]
    for drafter in drafters:
        for shape in shapes:
            names += [f"{drafter}/{shape}/plugin"] + ([] if ALL_SHAPES[shape].policy else [f"{drafter}/{shape}/stock"])
    return names


def drift_lengths(new_tokens: int, count: int = DRIFT_REQUESTS) -> list[int]:
    """New tokens of the drift cell's requests, sent together: from a quarter of ``new_tokens`` to four
    times it, evenly on a log scale, so the running batch drifts from ``count`` down to 1 as they end."""
    if count < 2:
        raise ValueError(f"a drift cell needs at least 2 requests, not {count}")
    return [max(1, round(new_tokens * 2 ** (4 * i / (count - 1) - 2))) for i in range(count)]


class ArmClock:
    """Whether the next arm can end before ``deadline`` (seconds since the epoch; None: no limit). A device lent
    for a fixed time takes its machine back whatever runs, and an arm cut off midway is lost with its start-up,
    so an arm starts only when the longest arm timed so far in this call (``first_guess`` seconds before the
    first) would end in time."""

    def __init__(self, deadline: float | None, first_guess: float):
        self.deadline, self.first_guess = deadline, first_guess
        self.longest: float | None = None  # of the arms timed so far

    def refusal(self, now: float | None = None) -> str | None:
        """Why the next arm must not start, or None when it may."""
        now = time.time() if now is None else now
        expected = self.first_guess if self.longest is None else self.longest
        if self.deadline is None or now + expected <= self.deadline:
            return None
        basis = f"an arm is guessed at {expected:.0f} s (--arm-seconds)" if self.longest is None else \
            f"the longest arm so far took {expected:.0f} s"
        return f"not started: {max(0.0, self.deadline - now):.0f} s were left before --deadline and {basis}"

    @contextlib.contextmanager
    def timing(self):
        """Times the arm run inside the block."""
        started = time.perf_counter()
        yield
        seconds = time.perf_counter() - started
        self.longest = seconds if self.longest is None else max(self.longest, seconds)


def skip_or_note(results: dict, name: str, clock: ArmClock) -> bool:
    """True when ``clock`` refuses arm ``name`` (recorded under ``not_run``, where a later call that measures
    the arm takes it out again)."""
    reason = clock.refusal()
    if reason is not None:
        results.setdefault("not_run", {})[name] = reason
        print(f"# {time.strftime('%H:%M:%S')} {name}: {reason}", flush=True)
        return True
    if name in results.get("not_run", {}):
        del results["not_run"][name]
        if not results["not_run"]:
            del results["not_run"]
    return False


def stock_edit_copy(drafter: str, directory: str) -> str:
    """``directory``: ``drafter``'s weight files linked, its config.json the flat SGLang-format one."""
    from sglang_eagle_ext.drafter.spec import canonical_config
    from sglang_eagle_ext.drafter.model_dir import write_json
    from sglang_eagle_ext.drafter.reader import read_drafter

    config = canonical_config(read_drafter(drafter).spec)
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(drafter):
        if name.endswith(".safetensors") and not os.path.exists(os.path.join(directory, name)):
            os.symlink(os.path.abspath(os.path.join(drafter, name)), os.path.join(directory, name))
    write_json(os.path.join(directory, "config.json"), config)
    return directory


def cell_prompts(ids: list[list[int]], batch: int, single: int) -> list[list[list[int]]]:
    """The requests of one cell, as the waves sent together."""
    if batch == 1:
        return [[prompt] for prompt in ids[:single]]
    count = batch if batch >= 64 else 2 * batch  # at least 64 requests' worth of work per cell when batched
    chosen = [ids[i % len(ids)] for i in range(count)]
    return [chosen[i:i + batch] for i in range(0, count, batch)]


def first_token_requests(waves: list[list[list[int]]], rounds: int) -> list[tuple]:
    """Time to first token, measured alike in every engine's benchmark: each wave sent alone with one new
    token (its prefill, the draft's prefill where there is one, and the first token), ``rounds`` times;
    a request's wall time is its wave's time to first token (the requests of a wave arrive together)."""
    return [([wave], "greedy", 1, False) for _ in range(rounds) for wave in waves]


def host(connection, target: str, drafter: str | None, shape_name: str | None, plugin: bool, log_path: str,
         batches: tuple[int, ...], context_length: int, skip_tokenizer: bool, backend: str,
         log_level: str, kv_tokens: int | None = None) -> None:
    """Child process hosting one engine; answers (batch, mode, waves, top2) with one measurement."""
    entered = time.perf_counter()  # after the spawned interpreter's imports
    os.setpgrp()  # its own process group, with SGLang's scheduler and detokenizer: end_group() ends them all
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ[engines.PLUGIN_SWITCH] = "1" if plugin else "0"
    shape = ALL_SHAPES[shape_name] if shape_name else None
    os.environ.update(shape.environment() if shape else {})  # the depth policy, read by the engine's processes
    if shape is not None and shape.policy == "cost" and shape.trace:  # its record of every step, beside the log
        os.environ[TRACE_SWITCH] = log_path.removesuffix(".log") + ".trace"
    extra = {"skip_tokenizer_init": True} if skip_tokenizer else {}
    config = shape.adaptive_config() if shape is not None else None
    if config is not None:  # the policy's candidates, beside the log
        extra["speculative_adaptive_config"] = log_path.removesuffix(".log") + ".adaptive.json"
        save_json(extra["speculative_adaptive_config"], config)
    try:
        where = engines.prepare_process()
        engine = engines.start(target, where, drafter, shape, graph_bs=batches, max_running=max(batches),
                               context_length=context_length, random_seed=SEED, attention_backend=backend,
                               log_level=log_level, kv_tokens=kv_tokens, **extra)
    except BaseException as exc:  # SGLang raises or exits when the draft cannot be loaded
        traceback.print_exc()
        connection.send({"failed": f"{type(exc).__name__}: {exc}"[:600]})
        return
    built = time.perf_counter()
    for batch in batches:  # the first requests of each batch size and mode compile kernels: untimed
        for params in MODES.values():
            engine.generate(input_ids=[[1, 2, 3]] * batch, sampling_params={**params, "max_new_tokens": 8})
    print(start_parts(entered, built), flush=True)
    connection.send("ready")
    while (request := connection.recv()) is not None:
        waves, mode, new_tokens, top2 = request  # new_tokens: per request of a single wave, or one for all
        params = {**MODES[mode], "ignore_eos": True}
        params = ([{**params, "max_new_tokens": n} for n in new_tokens] if isinstance(new_tokens, list)
                  else {**params, "max_new_tokens": new_tokens})
        extra = dict(return_logprob=True, top_logprobs_num=2) if top2 else {}
        outputs, started = [], time.perf_counter()
        for wave in waves:
            outputs += engine.generate(input_ids=wave, sampling_params=params, **extra)
        seconds = time.perf_counter() - started
        result = {"seconds": seconds, "tokens": sum(o["meta_info"]["completion_tokens"] for o in outputs),
                  "verify": sum(o["meta_info"].get("spec_verify_ct", 0) for o in outputs),
                  "output_ids": [o["output_ids"] for o in outputs]}
        if top2:
            result["top2"] = [[[entry[0] for entry in position[:2]]
                               for position in o["meta_info"]["output_top_logprobs"]] for o in outputs]
        connection.send(result)
    engine.shutdown()


def end_group(process, grace: float = 30) -> None:
    """The engine's process group gone (host and engine core): after ``grace`` s to exit by itself, TERM,
    then KILL, so no orphaned engine core keeps GPU memory from the next arm."""
    process.join(timeout=grace)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(5 if sig == signal.SIGTERM else 0)
    process.join(timeout=5)


def receive(connection, process, timeout: float):
    """The child's next answer; {"failed": ...} when its process dies or ``timeout`` s pass first (the caller ends
    its process group, inside its turn)."""
    started = time.perf_counter()
    while not connection.poll(5):
        if not process.is_alive():
            return {"failed": f"engine process exited ({process.exitcode})"}
        if time.perf_counter() - started > timeout:
            return {"failed": f"no answer after {timeout:.0f} s"}
    try:
        return connection.recv()
    except EOFError:  # the host ended and its end of the pipe with it (the parent closed its copy)
        process.join(timeout=5)
        return {"failed": f"engine process exited ({process.exitcode})"}


class EngineGone(Exception):
    """An arm's engine host ended, or did not answer in time, in the middle of its cells."""


def stopped(record: dict, cells: dict, gone: EngineGone, process) -> dict:
    """An arm whose engine failed mid-cells: why, and the cells it had begun (their rounds are not kept: a cell cut
    short is no measurement), its engine's process group ended at once."""
    record["failed"] = f"during the cells: {gone}"
    record["cells_before_failure"] = sorted(cells)
    end_group(process, grace=0)
    return record


class Link:
    """The parent's end of the pipe to an arm's engine host, for the cells: ``recv`` is :func:`receive`'s answer,
    or :class:`EngineGone` where the host has ended or kept silent for ``timeout`` s (a dead SGLang host sends
    nothing: its scheduler's SIGQUIT ends its whole process tree)."""

    def __init__(self, connection, process, timeout: float):
        self.connection, self.process, self.timeout = connection, process, timeout

    def send(self, message) -> None:
        self.connection.send(message)

    def recv(self):
        answer = receive(self.connection, self.process, self.timeout)
        if isinstance(answer, dict) and set(answer) == {"failed"}:
            raise EngineGone(answer["failed"])
        return answer


def engine_turns(record: dict, process, parent, child, turns_path: str | None, start_timeout: float,
                 cell_timeout: float, measure) -> tuple | None:
    """One arm's engine through its two turns (turns.py; with no lock file, nothing to wait for), for both
    benchmarks: the host started and its answer that it is ready read, then ``measure(link, cells)`` filling
    ``cells`` through a :class:`Link` and the engine shut down. Records ``start_s``, the host's load over the arm's
    last minute (it slows a host-bound step, a small target's), whether the engine's process ended within 60 s of
    its shutdown, and the turns' waits. A failed start or cell is recorded and its engine's process group ended
    inside its turn, so that none dies beside the other benchmark's measurement. Returns (the ready answer, the
    cells), or None where the arm failed."""
    with turns.turn("start", turns_path) as waited:
        started = time.perf_counter()
        process.start()
        child.close()  # the host's end is the host's: its exit is then an end of file here, not a silence
        answer = receive(parent, process, start_timeout)
        record["start_s"] = round(time.perf_counter() - started, 1)
        if isinstance(answer, dict) and "failed" in answer:
            record["failed"] = answer["failed"]
            end_group(process)
            return None
    with turns.turn("measure", turns_path) as measure_waited:
        cells = {}
        try:
            measure(Link(parent, process, cell_timeout), cells)
        except EngineGone as gone:
            stopped(record, cells, gone, process)
            return None
        record["load_average"] = [round(load, 2) for load in os.getloadavg()]
        parent.send(None)
        process.join(timeout=60)
        record["engine_exited"] = process.exitcode is not None
        end_group(process, grace=0)
    if waited is not None:  # turns with another engine on this GPU: the seconds each turn was waited for
        record["turn_waits_s"] = {"start": round(waited, 1), "measure": round(measure_waited, 1)}
    return answer, cells


def start_parts(entered: float, built: float) -> str:
    """The arm log's line saying where an engine's start went (the record's ``start_s`` is their sum with the
    spawned interpreter's start and imports): building the engine, then the untimed warm-up."""
    return f"{START_LINE} {built - entered:.1f} s, warm-up {time.perf_counter() - built:.1f} s"


START_LINE = "start: engine built in"  # the arm log's line that ends the untimed warm-up (start_parts)
SERVING_COMPILE = re.compile(r"Triton kernel '(\w+)' took ([\d.]+) s to compile after serving started")


def serving_compiles(log_path: str) -> list[dict]:
    """The Triton compilations SGLang (0.5.23: ``utils/triton_load_watch.py``, at warning level, those of a
    second or more) logged after the arm's start-up warm-up (each cell's untimed pass included, so a compilation
    listed here stalled a timed round or that pass): each stalled the engine."""
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        lines = handle.read().split("\n" + START_LINE, 1)
    return [{"kernel": kernel, "seconds": float(seconds)}
            for kernel, seconds in SERVING_COMPILE.findall(lines[1] if len(lines) == 2 else "")]


def agreement(outputs: list[list[int]], reference: list[list[int]], top2: list | None) -> dict:
    """Outputs equal to ``reference``; departures at a near-tie of ``top2`` (reference's log-probs)."""
    exact, near_tie, mismatch = 0, 0, []
    for index, (ids, ref) in enumerate(zip(outputs, reference)):
        position = first_departure(ids, ref)
        if position is None:
            exact += 1
            continue
        margin = None
        if top2 is not None and position < len(top2[index]) and len(top2[index][position]) == 2:
            margin = top2[index][position][0] - top2[index][position][1]
        if margin is not None and margin <= NEAR_TIE:
            near_tie += 1
        else:
            mismatch.append({"request": index, "position": position,
                             "margin": None if margin is None else round(margin, 3)})
    return {"requests": len(outputs), "exact": exact, "near_tie": near_tie, "mismatch": mismatch}


def measure_arm(name: str, args, ids, drafters: dict, plain: dict | None) -> dict:
    drafter_name, shape_name, side = name.split("/") if name != "plain" else (None, None, "plugin")
    record = {"arm": name, "drafter": drafter_name,
              "shape": None if shape_name is None else ALL_SHAPES[shape_name].label(),
              "plugin": side == "plugin"}
    drafter = drafters.get(drafter_name)
    if side == "stock-edit":
        drafter = stock_edit_copy(drafter, os.path.join(args.out, "stock-edit", drafter_name))
        with open(os.path.join(drafter, "config.json"), encoding="utf-8") as handle:
            record["config_edit"] = json.load(handle)
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    log_path = os.path.join(args.out, name.replace("/", "_") + ".log")
    process = context.Process(target=host, args=(child, args.target, drafter, shape_name,
                                                  side == "plugin", log_path,
                                                  engine_batch_sizes(args.batches, args.drift),
                                                  args.context_length, args.tokenizer is not None,
                                                  args.attention_backend, args.engine_log_level, args.kv_tokens))
    served = engine_turns(record, process, parent, child, args.turns, args.start_timeout, CELL_TIMEOUT_S,
                          lambda link, cells: measure_cells(link, cells, args, ids, name))
    if served is None:
        return record
    _, cells = served
    record["serving_compiles"] = serving_compiles(log_path)
    for cell in cells.values():
        cell["tok_s_median"] = round(statistics.median(cell["tok_s"]), 1)
        if cell.get("ttft_ms"):
            cell["ttft_ms_median"] = round(statistics.median(cell["ttft_ms"]), 2)
        if cell["verify"]:
            cell["accept_length"] = round(cell["tokens"] / cell["verify"], 3)
    compare_cells(cells, plain, args.batches, name == "plain")
    record["cells"] = cells
    return record


def measure_cells(parent, cells: dict, args, ids, name: str) -> None:
    """Every cell of one arm into ``cells``, from its engine's host (``parent``, a :class:`Link`): per batch size
    both modes' rounds and the greedy time to first token, plain decoding's reference top-2 too, and the drift cell
    where asked. An engine that fails mid-cells raises :class:`EngineGone` with the cells so far kept."""
    for batch in args.batches:
        waves = cell_prompts(ids, batch, args.single)
        time_rounds(parent, cells, f"batch{batch}", waves, args.new_tokens, args.rounds)
        ttft = cells[f"batch{batch}/greedy"].setdefault("ttft_ms", [])
        for request in first_token_requests(waves, args.rounds):
            parent.send(request)
            ttft.append(round(1000 * parent.recv()["seconds"], 2))
        if name == "plain":
            add_reference_top2(parent, cells[f"batch{batch}/greedy"], waves, args.new_tokens)
    if args.drift:  # one wave whose batch drifts down as its requests end (drift_lengths)
        waves = [[ids[i % len(ids)] for i in range(args.drift)]]
        lengths = drift_lengths(args.new_tokens, args.drift)
        time_rounds(parent, cells, "drift", waves, lengths, args.rounds)
        if name == "plain":
            add_reference_top2(parent, cells["drift/greedy"], waves, lengths)


def time_rounds(parent, cells: dict, prefix: str, waves, new_tokens, rounds: int) -> None:
    """``rounds`` timed rounds of cells ``PREFIX/<mode>`` (modes in rotating order): tokens/s of each round,
    tokens and verify steps summed, the greedy outputs of the first round. One untimed greedy pass of the same
    waves goes first: the first pass of a cell's prompts ran 1.3-1.5x slower than the next in every arm (the
    first H200 runs; prompts not yet in the radix cache, first launches at their lengths), which made the A/A
    spread of two rounds 25-40 % where the rounds that followed agreed within 5 %."""
    parent.send((waves, "greedy", new_tokens, False))
    parent.recv()
    for round_ in range(rounds):
        for mode in (list(MODES) if round_ % 2 == 0 else list(MODES)[::-1]):
            parent.send((waves, mode, new_tokens, False))
            result = parent.recv()
            cell = cells.setdefault(f"{prefix}/{mode}", {"tok_s": [], "verify": 0, "tokens": 0})
            cell["tok_s"].append(round(result["tokens"] / result["seconds"], 1))
            cell["tokens"] += result["tokens"]
            cell["verify"] += result["verify"]
            if mode == "greedy":
                cell.setdefault("outputs", result["output_ids"])


def add_reference_top2(parent, cell: dict, waves, new_tokens) -> None:
    """Plain decoding's greedy outputs again, untimed, with their top-2 log-probs (the near-tie rule's)."""
    parent.send((waves, "greedy", new_tokens, True))
    result = parent.recv()
    cell["top2"] = result["top2"]
    cell["logprob_run_equal"] = result["output_ids"] == cell["outputs"]


def engine_batch_sizes(batches: tuple[int, ...], drift_requests: int = 0) -> tuple[int, ...]:
    """The batch sizes an engine captures graphs for (and warms up): the cells', and with a drift cell of
    ``drift_requests`` every power of two up to that size, as the batch passes through them all."""
    drifted = {1 << k for k in range(drift_requests.bit_length())} | {drift_requests} if drift_requests else set()
    return tuple(sorted(set(batches) | drifted))


def compare_cells(cells: dict, plain: dict | None, batches, is_plain: bool) -> None:
    """Each cell (its ``tok_s_median`` set) against plain decoding's same cell: the speedup and, greedy,
    the outputs' agreement; plain decoding's own cells get their batched-vs-single agreement (the floor)."""
    for key, cell in cells.items():
        if plain is not None and key in plain["cells"]:
            base = plain["cells"][key]
            cell["speedup_median"] = round(cell["tok_s_median"] / base["tok_s_median"], 3)
            if key.endswith("greedy"):
                cell["vs_plain"] = agreement(cell["outputs"], base["outputs"], base.get("top2"))
    if is_plain:
        single = cells["batch1/greedy"]["outputs"]
        for batch in batches[1:]:
            batched = cells[f"batch{batch}/greedy"]
            count = min(len(single), len(batched["outputs"]))
            batched["plain_batched_vs_single"] = agreement(batched["outputs"][:count], single[:count],
                                                           cells["batch1/greedy"]["top2"][:count])


# what two runs taken side by side (two serve_bench processes taking turns on one GPU, each with part of the arms)
# must share to be one run: everything their cells are measured under
SHARED_BY_HALVES = ("device", "sglang", "torch", "commit", "target", "tokenizer", "drafter_files", "prompts",
                    "new_tokens", "rounds", "single", "batches", "attention_backend")


def merged(runs: list[dict]) -> dict:
    """Runs taken side by side as one: their arms together, and plain decoding's comparisons (the speedup, greedy
    agreement) added to the arms of the runs that did not hold it. Refused (ValueError, naming the field) where the
    runs differ in what their cells are measured under or hold an arm twice."""
    first, arms = runs[0], {}
    for run in runs:
        differing = [key for key in SHARED_BY_HALVES if run.get(key) != first.get(key)]
        if differing:
            raise ValueError(f"runs differ in {', '.join(differing)}: not one run taken side by side")
        twice = set(arms) & set(run["arms"])
        if twice:
            raise ValueError(f"arms run twice: {', '.join(sorted(twice))}")
        arms.update(run["arms"])
    plain = arms.get("plain")
    if plain is not None and "cells" in plain:
        for run in runs:
            if "plain" not in run["arms"]:
                for arm in run["arms"].values():
                    compare_cells(arm.get("cells", {}), plain, first["batches"], False)
    return {**first, "command": " ; ".join(run["command"] for run in runs), "arms": arms}


def environment() -> dict:
    import sglang

    return {**engines.run_environment(), "sglang": sglang.__version__}


def batch_sizes(text: str) -> tuple[int, ...]:
    """``--batches``: comma-separated sizes, the first of them 1, refused at parsing otherwise: batch 1's outputs are
    the reference every batched cell's agreement is read against (:func:`compare_cells`), after plain decoding's
    arm has run."""
    try:
        sizes = tuple(int(size) for size in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated whole numbers, e.g. 1,16,64") from None
    if sizes[0] != 1 or min(sizes) < 1 or len(set(sizes)) != len(sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: distinct positive sizes, the first of them 1 (batch 1 is the "
                                         f"reference of every batched cell's agreement), e.g. 1,16,64")
    return sizes


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every engine's serving benchmark takes (this one and ``vllm_bench.py``): the same
    target, prompts, drafters, arms and cells."""
    parser.add_argument("out")
    parser.add_argument("--target", required=True)
    parser.add_argument("--prompts", required=True, help="JSON lines {prompt} (data.py mtbench)")
    parser.add_argument("--drafter", action="append", default=[], help="NAME=DIR, repeatable")
    parser.add_argument("--arms", help="comma-separated arm names (default: every arm)")
    parser.add_argument("--batches", type=batch_sizes, default=BATCHES,
                        help="distinct batch sizes, the first of them 1 (plain decoding's batch-1 outputs are every "
                        "batched cell's reference, in every run)")
    parser.add_argument("--single", type=int, default=8, help="prompts of the batch-1 cells")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--context-length", type=int, default=2048)
    parser.add_argument("--workload", help="the target, drafters and prompts in words, recorded with the results "
                        "(vs_vllm.py's pages name each run's)")
    parser.add_argument("--deadline", type=float, help="seconds since the epoch by which every arm must have "
                        "ended (a lent device's end): an arm that would not end in time is not started")
    parser.add_argument("--turns", metavar="PATH", help="a lock file shared with the other engine's benchmark on "
                        "this GPU: starts overlap, measurements do not (turns.py)")
    parser.add_argument("--arm-seconds", type=float, default=210.0,
                        help="what the first arm is expected to take, start-up included (--deadline)")
    parser.add_argument("--tokenizer", help="the model whose tokenizer and chat template make the prompts' ids, "
                        "for a target without one (zipf_checkpoint.py's); the engines then start without a "
                        "tokenizer: ids in, ids out (default: the target's own)")


def prompt_ids(args) -> list[list[int]]:
    """The prompts' token ids, the same in every engine's benchmark: each line of ``--prompts`` as a one-turn
    chat in ``--tokenizer``'s (default: the target's) chat template."""
    from transformers import AutoTokenizer

    with open(args.prompts, encoding="utf-8") as handle:
        texts = [json.loads(line)["prompt"] for line in handle if line.strip()]
    return engines.chat_ids(AutoTokenizer.from_pretrained(args.tokenizer or args.target), texts)


def drafter_files(drafters: dict) -> dict:
    """Each drafter's files (its config and weights, the folder's top level) by name, as their sha256: two runs
    served the same drafter only where these agree (two trainings by one recipe on different machines need not
    give the same bits, nor the same lower-ranked drafts of a tree). A drafter that is no folder here is left out:
    its arms fail at their engine's start, each with its own error."""
    return {name: {entry: file_sha256(os.path.join(folder, entry)) for entry in sorted(os.listdir(folder))
                   if os.path.isfile(os.path.join(folder, entry))}
            for name, folder in drafters.items() if os.path.isdir(folder)}


def run_record(path: str, args, drafters: dict, environment: dict, **extra) -> dict:
    """A run's results as every engine's benchmark writes them: its environment, the world two engines' runs
    must share (``vs_vllm.same_world``), ``extra``, and the arms an earlier call's run measured into ``path``
    (a run continued in a later call keeps them)."""
    results = {**environment, **({"workload": args.workload} if args.workload else {}), "target": args.target,
               "tokenizer": args.tokenizer or args.target, "drafters": drafters,
               "drafter_files": drafter_files(drafters), "prompts": args.prompts,
               "new_tokens": args.new_tokens, "rounds": args.rounds, "single": args.single,
               "batches": list(args.batches), "near_tie_nats": NEAR_TIE, **extra, "arms": {}}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            earlier = json.load(handle)
        backend, asked = attention_backend(earlier), results.get("attention_backend")
        if asked is not None and backend != asked:
            sys.exit(f"{path}: its arms ran {backend} attention, this call asks {asked}: one file holds one "
                     "backend's arms (give another OUT)")
        changed = sorted(name for name, files in earlier.get("drafter_files", {}).items()
                         if name in results["drafter_files"] and results["drafter_files"][name] != files)
        if changed:
            sys.exit(f"{path}: its arms served other files for drafter {', '.join(changed)} than this call's "
                     "(drafter_files): one file holds one set of drafters' arms (give another OUT)")
        results["arms"] = earlier.get("arms", {})
        if earlier.get("not_run"):  # the deadline's notes stay until a call measures their arms
            results["not_run"] = earlier["not_run"]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_run_arguments(parser)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"of {', '.join(ALL_SHAPES)} (default: all but "
                        f"the diagnostics {', '.join(DIAGNOSTICS)})")
    parser.add_argument("--drift", type=int, nargs="?", const=DRIFT_REQUESTS, default=0, metavar="REQUESTS",
                        help=f"also a drift cell per mode: REQUESTS (default {DRIFT_REQUESTS}) sent together whose new "
                             "tokens run from a quarter to four times --new-tokens, so the batch drifts down to 1")
    parser.add_argument("--attention-backend", default=engines.ATTENTION_BACKEND,
                        help="SGLang's attention backend on a GPU (fa3, SGLang's default on Hopper, needs the FA3 "
                             "kernels benchmarks/gpu/fa3_ops.py carries; ignored on a CPU)")
    parser.add_argument("--kv-tokens", type=int, help="SGLang's KV pool in tokens (max_total_tokens; default: what "
                        "its memory fraction gives), a bound where another engine shares the GPU (turns.py)")
    parser.add_argument("--start-timeout", type=int, default=START_TIMEOUT_S,
                        help="seconds an engine may take to start and warm up (a CPU check needs more)")
    parser.add_argument("--engine-log-level", default="warning", choices=("error", "warning", "info"),
                        help="SGLang's log level in each arm's log (default warning: the Triton compilations that "
                             "stall a timed cell, recorded as the arm's serving_compiles); info adds its start-up "
                             "stages and their times (where an arm's start goes) and a line per 40 decode steps")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    drafters = dict(item.split("=", 1) for item in args.drafter)
    where = engines.prepare_process()
    ids = prompt_ids(args)
    names = args.arms.split(",") if args.arms else arm_names(list(drafters), args.shapes.split(","))
    path = os.path.join(args.out, "serve_bench.json")
    results = run_record(path, args, drafters, environment(),
                         **({"attention_backend": args.attention_backend} if where != "cpu" else {}),
                         **({"drift_new_tokens": drift_lengths(args.new_tokens, args.drift)} if args.drift else {}))
    stock_refused = {}  # (drafter, side) -> why its other shapes are not tried
    clock = ArmClock(args.deadline, args.arm_seconds)
    for name in names:
        if name in results["arms"] and "failed" not in results["arms"][name]:
            continue
        drafter_name, side = name.split("/")[0], name.split("/")[-1]
        if (drafter_name, side) in stock_refused:
            results["arms"][name] = {"arm": name, "failed": "not tried: " + stock_refused[drafter_name, side]}
            continue
        if skip_or_note(results, name, clock):
            save_json(path, results)
            continue
        plain = results["arms"].get("plain")
        print(f"# {time.strftime('%H:%M:%S')} {name}", flush=True)
        with clock.timing():
            record = measure_arm(name, args, ids, drafters, None if name == "plain" else plain)
        if "failed" in record and side.startswith("stock"):
            stock_refused[drafter_name, side] = f"stock failed to serve this drafter with {record.get('shape')}"
        results["arms"][name] = record
        save_json(path, results)
        summary = {k: (v.get("tok_s_median"), v.get("accept_length"), v.get("ttft_ms_median"))
                   for k, v in record.get("cells", {}).items()}
        print(f"  {record.get('failed') or summary}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
