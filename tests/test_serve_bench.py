"""benchmarks/real_target/serve_bench.py's depth-policy arms and drift cell (issue 39's measurement), on a CPU:
which arms exist, what each asks of SGLang and of this package's switch, and how the drift cell's batch falls."""

import json
import os
import random
import subprocess
from types import SimpleNamespace

import pytest

from sglang_eagle_ext import env
from sglang_eagle_ext.sglang.compat.adaptive_shape import ENV_SWITCH
from sglang_eagle_ext.sglang.compat.plain_off import OFF_SWITCH
from tests.conftest import needs_sglang
from tests.script_module import load_siblings

# serve_bench imports engines and the GPU folder's results_file by bare name
engines, serve_bench = load_siblings("benchmarks/real_target", "engines", "serve_bench")
_, adaptive_table = load_siblings("benchmarks/real_target", "table", "adaptive_table")


def test_depth_policies_run_with_this_plugin_only():
    names = serve_bench.arm_names(["d"], ["chain", "adaptive", "stock-adaptive"])
    assert names == ["plain", "d/chain/plugin", "d/chain/stock", "d/adaptive/plugin", "d/stock-adaptive/plugin"]


def test_a_policy_shape_asks_for_sglangs_adaptive_mode_and_sets_the_policy_switch():
    adaptive, stock, chain = (serve_bench.SHAPES[name] for name in ("adaptive", "stock-adaptive", "chain"))
    assert engines.speculative("D", adaptive)["speculative_adaptive"] is True
    assert engines.speculative("D", stock)["speculative_adaptive"] is True
    assert "speculative_adaptive" not in engines.speculative("D", chain) and chain.environment() == {}
    # the values the switch reads as on (this package's cost policy) and off (stock's policy)
    assert adaptive.environment()[ENV_SWITCH] in env.ON and stock.environment()[ENV_SWITCH] in env.OFF
    # the deepest depth is the configured one: the same chain as the fixed "chain" arm
    assert (adaptive.steps, adaptive.topk, adaptive.draft_tokens) == (chain.steps, chain.topk, chain.draft_tokens)
    with pytest.raises(ValueError, match="policy 'costs'"):
        engines.Shape("typo", 3, 1, 4, policy="costs")


def test_the_drift_cells_batch_falls_one_request_at_a_time_from_all_to_none():
    lengths = serve_bench.drift_lengths(128)
    assert len(lengths) == serve_bench.DRIFT_REQUESTS and lengths[0] == 32 and lengths[-1] == 512
    # requests still running just after each length: every batch size from 63 down to 0, one at a time
    assert [sum(1 for n in lengths if n > t) for t in lengths] == list(range(serve_bench.DRIFT_REQUESTS - 1, -1, -1))
    with pytest.raises(ValueError, match="at least 2 requests"):
        serve_bench.drift_lengths(128, 1)


def test_the_engine_captures_every_batch_size_the_drift_cell_passes_through():
    assert serve_bench.engine_batch_sizes((1, 16, 64)) == (1, 16, 64)
    assert serve_bench.engine_batch_sizes((1, 24), 64) == (1, 2, 4, 8, 16, 24, 32, 64)
    assert serve_bench.engine_batch_sizes((1, 4), 12) == (1, 2, 4, 8, 12)


def test_a_continued_run_keeps_its_arms_only_under_the_same_attention_backend(tmp_path):
    """A later call continues a run's file (its arms kept) only when it serves the same attention backend: one
    file, one backend, or Triton and FA3 arms would share a page under one label (files written before the
    backend was recorded ran Triton)."""
    args = SimpleNamespace(workload="w", target="t", tokenizer=None, prompts="p", new_tokens=128, rounds=2,
                           single=8, batches=(1, 16))
    path = tmp_path / "serve_bench.json"
    path.write_text(json.dumps({"arms": {"plain": {"arm": "plain"}}}))  # an older file: no backend recorded
    kept = serve_bench.run_record(str(path), args, {}, {}, attention_backend="triton")
    assert kept["arms"] == {"plain": {"arm": "plain"}} and kept["attention_backend"] == "triton"
    with pytest.raises(SystemExit, match="its arms ran triton attention, this call asks fa3"):
        serve_bench.run_record(str(path), args, {}, {}, attention_backend="fa3")
    assert serve_bench.run_record(str(path), args, {}, {})["arms"] == kept["arms"]  # a CPU run records none


def test_a_run_records_each_drafters_files_as_sha256sum_reads_them(tmp_path):
    """Every file at a drafter folder's top level, by name, with the digest coreutils' sha256sum gives; a
    subfolder is not read, a drafter that is no folder left out."""
    rng = random.Random(7)
    folder = tmp_path / "drafter"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["Eagle3Speculator"]}')
    (folder / "model.safetensors").write_bytes(rng.randbytes(3 << 20))  # more than one 1 MiB read
    (folder / "sub" / "ignored.bin").write_bytes(b"not read")
    expected = {}
    for name in ("config.json", "model.safetensors"):
        line = subprocess.run(["sha256sum", str(folder / name)], capture_output=True, text=True, check=True).stdout
        expected[name] = line.split()[0]
    assert serve_bench.drafter_files({"d": str(folder), "gone": str(tmp_path / "none")}) == {"d": expected}


def test_a_continued_run_keeps_its_arms_only_for_the_same_drafter_files(tmp_path):
    """A later call continues a run's file only where each drafter both calls name has the same files: the
    drafter's weights rewritten in between (another training) are refused; an unchanged folder continues."""
    args = SimpleNamespace(workload="w", target="t", tokenizer=None, prompts="p", new_tokens=128, rounds=2,
                           single=8, batches=(1, 16))
    folder = tmp_path / "drafter"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"first training")
    path = tmp_path / "serve_bench.json"
    first = serve_bench.run_record(str(path), args, {"d": str(folder)}, {})
    first["arms"] = {"d/chain/plugin": {"arm": "d/chain/plugin"}}
    path.write_text(json.dumps(first))
    assert serve_bench.run_record(str(path), args, {"d": str(folder)}, {})["arms"] == first["arms"]
    (folder / "model.safetensors").write_bytes(b"second training")
    with pytest.raises(SystemExit, match=r"served other files for drafter d than this call's \(drafter_files\)"):
        serve_bench.run_record(str(path), args, {"d": str(folder)}, {})


def test_an_arm_starts_only_when_the_longest_arm_so_far_would_end_before_the_deadline(monkeypatch):
    clock = serve_bench.ArmClock(deadline=1000.0, first_guess=180.0)
    assert clock.refusal(now=820.0) is None  # 820 + 180 = 1000: just in time
    assert "an arm is guessed at 180 s (--arm-seconds)" in clock.refusal(now=821.0)
    ticks = iter([0.0, 100.0, 0.0, 250.0, 0.0, 120.0])  # perf_counter at each arm's start and end
    monkeypatch.setattr(serve_bench.time, "perf_counter", lambda: next(ticks))
    for _ in range(3):
        with clock.timing():
            pass
    assert clock.refusal(now=750.0) is None and clock.refusal(now=751.0) == (
        "not started: 249 s were left before --deadline and the longest arm so far took 250 s")
    assert serve_bench.ArmClock(deadline=None, first_guess=1e9).refusal(now=0.0) is None


def test_a_refused_arm_is_noted_and_a_later_call_that_measures_it_takes_the_note_out(tmp_path):
    """The notes travel with the run's file: a later call keeps the notes of arms it does not measure."""
    args = SimpleNamespace(workload=None, target="t", tokenizer=None, prompts="p", new_tokens=128, rounds=2,
                           single=8, batches=(1, 16))
    path = tmp_path / "serve_bench.json"
    results = serve_bench.run_record(str(path), args, {}, {})
    late = serve_bench.ArmClock(deadline=0.0, first_guess=1.0)  # the epoch: past
    assert serve_bench.skip_or_note(results, "d/chain/plugin", late) is True
    assert serve_bench.skip_or_note(results, "d/tree/plugin", late) is True
    assert results["not_run"]["d/chain/plugin"].startswith("not started: 0 s were left")
    path.write_text(json.dumps(results))
    later = serve_bench.run_record(str(path), args, {}, {})  # a later call, with no deadline
    assert set(later["not_run"]) == {"d/chain/plugin", "d/tree/plugin"}
    assert serve_bench.skip_or_note(later, "d/chain/plugin", serve_bench.ArmClock(None, 1.0)) is False
    assert set(later["not_run"]) == {"d/tree/plugin"}
    assert serve_bench.skip_or_note(later, "d/tree/plugin", serve_bench.ArmClock(None, 1.0)) is False
    assert "not_run" not in later


def test_the_diagnostics_pin_each_policy_to_the_fixed_chain_and_are_left_out_of_the_default_arms():
    """The arms that isolate what an adaptive engine's step costs (issue 39's H200 run: the cost policy's engine
    stepped slower at every depth than the fixed and stock-adaptive engines): each policy with chain 3/1/4 as its
    only candidate, at every batch size, this package's with and without its trace."""
    chain = serve_bench.SHAPES["chain"]
    pinned = {name: serve_bench.DIAGNOSTICS[name] for name in ("pin3-stock", "pin3-cost", "pin3-cost-untraced")}
    for shape in pinned.values():
        assert (shape.steps, shape.topk, shape.draft_tokens) == (chain.steps, chain.topk, chain.draft_tokens)
        assert shape.adaptive_config() == {"1": {"candidate_steps": [3]}}
        assert engines.speculative("D", shape)["speculative_adaptive"] is True
    assert pinned["pin3-stock"].environment()[ENV_SWITCH] in env.OFF
    assert pinned["pin3-cost"].environment()[ENV_SWITCH] in env.ON and pinned["pin3-cost"].trace
    assert not pinned["pin3-cost-untraced"].trace
    # held: the launch chain at every step, with the policy's own four depths declared (their states held)
    held = serve_bench.DIAGNOSTICS["hold3"]
    assert (held.steps, held.topk, held.draft_tokens) == (chain.steps, chain.topk, chain.draft_tokens)
    assert held.adaptive_config() is None and held.trace
    assert held.environment()[ENV_SWITCH] == "hold"  # the switch value adaptive_shape.selected reads as hold
    untraced = serve_bench.DIAGNOSTICS["adaptive-untraced"]
    assert untraced.adaptive_config() is None and not untraced.trace  # the policy's own candidates
    assert chain.adaptive_config() is None and serve_bench.SHAPES["adaptive"].adaptive_config() is None
    assert not set(serve_bench.DIAGNOSTICS) & set(serve_bench.SHAPES)  # --shapes' default: no diagnostic
    assert set(adaptive_table.DIAGNOSTICS) == set(serve_bench.DIAGNOSTICS)  # its verdict leaves them all out
    assert serve_bench.arm_names(["d"], ["pin3-stock", "pin3-cost"]) == ["plain", "d/pin3-stock/plugin",
                                                                        "d/pin3-cost/plugin"]
    with pytest.raises(ValueError, match=r"candidates \[1\] need a policy and the launch depth 3"):
        engines.Shape("off-launch", 3, 1, 4, policy="cost", candidates=(1,))
    with pytest.raises(ValueError, match="need a policy"):
        engines.Shape("no-policy", 3, 1, 4, candidates=(3,))


def test_off_arms_are_off_at_batch_1_only_each_by_its_path():
    """The off diagnostics: speculation off at batch 1 and chain 1 above it (SGLang's slots: a batch takes the
    nearest key's candidates; the launch depth must be one of them), each under its path's switches."""
    for name, path in (("off-verify", "stock"), ("off-skip", "stock"), ("off-eager", "eager"),
                       ("off-graph", "plain"), ("off-graph-skip", "plain")):
        shape = serve_bench.DIAGNOSTICS[name]
        assert (shape.steps, shape.topk, shape.draft_tokens) == (1, 1, 2)
        assert shape.adaptive_config() == {"1": {"candidate_steps": [0]}, "2": {"candidate_steps": [1]}}
        skips = shape.environment().get("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND") == "1"
        assert skips == name.endswith("skip")
        # stock's policy binds no plain step (stock's width-1 verify); under this package's the off switch, at its
        # default (plain: the graphs) where unset, says how the plain step runs
        if path == "stock":
            assert shape.environment()[ENV_SWITCH] in env.OFF
        else:
            assert shape.environment()[ENV_SWITCH] in env.ON and shape.environment().get(OFF_SWITCH, "plain") == path
    with pytest.raises(ValueError, match=r"candidates \[0, 1\] need a policy and the launch depth 3"):
        engines.Shape("off-launch", 3, 1, 4, policy="cost", candidates={1: (0,), 2: (1,)})


@pytest.mark.parametrize("shape, switch, config, traced", [
    ("chain", None, None, False), ("adaptive", "1", None, True), ("pin3-stock", "0", [3], False),
    ("pin3-cost", "1", [3], True), ("pin3-cost-untraced", "1", [3], False), ("adaptive-untraced", "1", None, False)])
def test_the_hosted_engine_gets_the_shapes_switch_trace_and_candidates_file(shape, switch, config, traced, tmp_path,
                                                                            monkeypatch):
    """What serve_bench.host hands an arm's engine (engines.start stubbed): the policy switch, the trace prefix
    beside the arm's log for this package's traced policy only, and a candidates file in SGLang's format."""
    for name in (engines.PLUGIN_SWITCH, ENV_SWITCH, serve_bench.TRACE_SWITCH):
        monkeypatch.setenv(name, "")  # recorded as it was (host sets them in this process), then unset
        monkeypatch.delenv(name)
    monkeypatch.setattr(serve_bench.os, "dup2", lambda *_: None)  # host's output to its log: not pytest's
    monkeypatch.setattr(serve_bench.os, "setpgrp", lambda: None)  # nor its process group
    monkeypatch.setattr(serve_bench.engines, "prepare_process", lambda: "cpu")
    seen = {}

    def start(target, where, drafter, shape_, **extra):
        seen.update(extra=extra, switch=os.environ.get(ENV_SWITCH), trace=os.environ.get(serve_bench.TRACE_SWITCH))
        raise RuntimeError("stubbed")

    monkeypatch.setattr(serve_bench.engines, "start", start)
    sent = []
    log = tmp_path / "d_arm.log"
    serve_bench.host(SimpleNamespace(send=sent.append), "T", "D", shape, True, str(log), (1,), 512, False, "triton",
                     "info")
    assert sent == [{"failed": "RuntimeError: stubbed"}]
    assert seen["extra"]["log_level"] == "info"  # what the arm's log holds: SGLang's own level
    assert seen["switch"] == switch and seen["trace"] == (str(tmp_path / "d_arm.trace") if traced else None)
    path = seen["extra"].get("speculative_adaptive_config")
    assert (path is None) == (config is None)
    if config is not None:
        assert path == str(tmp_path / "d_arm.adaptive.json")
        assert json.loads((tmp_path / "d_arm.adaptive.json").read_text()) == {"1": {"candidate_steps": config}}


@needs_sglang
def test_an_arm_records_the_triton_compilations_sglang_logged_in_its_timed_cells_only(tmp_path):
    import logging

    from sglang.srt.utils import triton_load_watch  # SGLang's own warning, written by its own hook

    log_path = tmp_path / "arm.log"
    handler = logging.FileHandler(log_path)
    triton_load_watch.logger.addHandler(handler)

    def compiled(kernel: str, seconds: float) -> None:
        triton_load_watch._on_compilation(src=SimpleNamespace(name=kernel), metadata=None, metadata_group=None,
                                          times=SimpleNamespace(total=seconds * 1e6), cache_hit=False)

    try:
        triton_load_watch.mark_serving_started()
        compiled("_chunk_pass_kernel", 1.13)  # the untimed warm-up's
        handler.stream.write(serve_bench.start_parts(0.0, 0.0) + "\n")
        compiled("_walk_kernel", 2.38)
        compiled("_chunk_pass_kernel", 1.25)
    finally:
        triton_load_watch._serving_started = False  # as it was: the hook is armed by SGLang's engine only
        triton_load_watch.logger.removeHandler(handler)
        handler.close()
    assert serve_bench.serving_compiles(str(log_path)) == [{"kernel": "_walk_kernel", "seconds": 2.38},
                                                           {"kernel": "_chunk_pass_kernel", "seconds": 1.25}]


def _ends_at_once(connection) -> None:
    os._exit(3)  # as an SGLang host does when its scheduler fails: no answer, its process gone


def test_an_engine_host_that_ends_mid_cells_is_reported_at_once_not_waited_on():
    """The parent's end of an arm's pipe (serve_bench.Link, which measure_arm holds inside its measuring turn): a
    host that ends without a word is an EngineGone as soon as its end of the pipe closes, not a wait of the cell's
    timeout with the other engine's benchmark locked out."""
    import multiprocessing
    import time

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_ends_at_once, args=(child,))
    process.start()
    child.close()
    started = time.monotonic()
    with pytest.raises(serve_bench.EngineGone, match=r"engine process exited \(3\)"):
        serve_bench.Link(parent, process, timeout=600).recv()
    assert time.monotonic() - started < 60


def _half(arms: dict, **fields) -> dict:
    run = {"device": "GPU X", "sglang": "0.5.23", "torch": "2.14.1", "commit": "abc1234", "target": "T",
           "tokenizer": "T", "drafter_files": {"d": {"model.safetensors": "ab" * 32}}, "prompts": "P",
           "new_tokens": 4, "rounds": 2, "single": 2, "batches": [1], "attention_backend": "fa3",
           "command": "serve_bench.py /out", "arms": arms}
    return {**run, **fields}


def _greedy_cell(tok_s: list[float], outputs: list[list[int]], **extra) -> dict:
    return {"tok_s": tok_s, "tok_s_median": sorted(tok_s)[len(tok_s) // 2], "outputs": outputs, **extra}


def test_two_halves_taken_side_by_side_are_one_run_with_plain_decodings_comparisons(tmp_path):
    """install_and_start.sh's adaptive+adaptive2: the half without plain decoding gets its speedups and greedy
    agreement from the other half's plain arm, as serve_bench gives them within one run (compare_cells)."""
    plain = {"arm": "plain", "cells": {"batch1/greedy": _greedy_cell(
        [100.0, 120.0], [[1, 2, 3, 4], [5, 6, 7, 8]], top2=[[[-0.1, -2.0]] * 4, [[-0.5, -0.6]] * 4])}}
    # d/x: the second request departs at its third token, where plain decoding's top two are 0.1 nats apart
    other = {"arm": "d/x/plugin", "cells": {"batch1/greedy": _greedy_cell(
        [240.0, 300.0], [[1, 2, 3, 4], [5, 6, 9, 9]])}}
    first, second = _half({"plain": plain}), _half({"d/x/plugin": other}, command="serve_bench.py /out2")
    run = serve_bench.merged([first, second])
    assert set(run["arms"]) == {"plain", "d/x/plugin"} and "/out2" in run["command"]
    cell = run["arms"]["d/x/plugin"]["cells"]["batch1/greedy"]
    assert cell["speedup_median"] == 2.5  # 300 / 120
    assert cell["vs_plain"] == {"requests": 2, "exact": 1, "near_tie": 1, "mismatch": []}
    with pytest.raises(ValueError, match="runs differ in rounds"):
        serve_bench.merged([first, _half({"d/x/plugin": other}, rounds=3)])
    with pytest.raises(ValueError, match="arms run twice: plain"):
        serve_bench.merged([first, _half({"plain": plain})])
    # table.py's import takes both halves and writes the one run
    paths = []
    for index, half in enumerate((first, second)):
        paths.append(tmp_path / f"half{index}.json")
        paths[-1].write_text(json.dumps(half))
    table = load_siblings("benchmarks/real_target", "table")[0]
    assert table.main(["import", *map(str, paths), str(tmp_path / "run.json")]) == 0
    written = json.loads((tmp_path / "run.json").read_text())
    assert written["arms"]["d/x/plugin"]["cells"]["batch1/greedy"]["speedup_best"] == 2.5  # 300 / 120
    assert "outputs" not in written["arms"]["plain"]["cells"]["batch1/greedy"]


def test_batch_sizes_must_begin_at_1_and_are_refused_at_parsing_otherwise():
    """A run at --batches 16 measured plain decoding's arm and then stopped with a KeyError in compare_cells (an H200,
    2026-11-29): batch 1's outputs are every batched cell's reference, so the sizes are checked before any arm."""
    import argparse

    parser = argparse.ArgumentParser()
    serve_bench.add_run_arguments(parser)
    base = ["out", "--target", "t", "--prompts", "p"]
    assert parser.parse_args(base + ["--batches", "1,16,64"]).batches == (1, 16, 64)
    for text in ("16", "16,1", "1,16,16", "1,0", "1,x"):
        with pytest.raises(SystemExit):
            parser.parse_args(base + ["--batches", text])
    for text in ("16", "1,0", "1,16,16"):  # the suggestion is one the parser takes
        with pytest.raises(argparse.ArgumentTypeError, match="positive sizes, the first of them 1.*e.g. 1,16,64"):
            serve_bench.batch_sizes(text)
    assert serve_bench.batch_sizes("1,16,64") == (1, 16, 64)
