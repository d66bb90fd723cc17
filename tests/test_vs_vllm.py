"""benchmarks/real_target/vs_vllm.py: which arms it compares, its ratios and words, on two small runs built
here with figures chosen so each answer is computed by hand; and the committed comparison page is the one
its committed runs generate."""

import copy
import json

import pytest

from tests.script_module import ROOT, load_siblings

table, vs_vllm = load_siblings("benchmarks/real_target", "table", "vs_vllm")
RESULTS = ROOT / "benchmarks" / "results" / "real_target"


def cell(tok_s: list[float], accept: float | None = None, ttft: float | None = None) -> dict:
    out = {"tok_s": tok_s, "tok_s_median": sorted(tok_s)[len(tok_s) // 2]}
    if accept is not None:
        out["accept_length"] = accept
    if ttft is not None:
        out["ttft_ms_median"] = ttft
    return out


def run(engine: str, plain: dict, arms: dict) -> dict:
    world = {"device": "GPU X", "workload": "a target, its drafter, some prompts", "new_tokens": 128, "single": 8,
             "batches": [1, 16], "near_tie_nats": 1.0, "rounds": 3, "date": "2026-11-27", "torch": "2.14.1",
             "commit": "abc1234", "drafters": {"d": "/d"}}
    world.update({"engine": "vllm", "vllm": "0.33.0"} if engine == "vllm" else {"sglang": "0.5.23"})
    world["arms"] = {"plain": {"arm": "plain", "cells": plain}, **arms}
    return world


@pytest.fixture()
def runs():
    # plain decoding: SGLang 100 / 1000 tok/s, vLLM 80 / 1000, rounds spread 10 % (SGLang) and 20 % (vLLM)
    sglang_plain = {"batch1/greedy": cell([95, 100, 105]), "batch1/sampled": cell([95, 100, 105]),
                    "batch16/greedy": cell([950, 1000, 1050]), "batch16/sampled": cell([950, 1000, 1050])}
    vllm_plain = {"batch1/greedy": cell([72, 80, 88]), "batch1/sampled": cell([72, 80, 88]),
                  "batch16/greedy": cell([900, 1000, 1100]), "batch16/sampled": cell([900, 1000, 1100])}

    def arm(name, shape, values, accept):
        return {name: {"arm": name, "shape": shape, "cells": {
            f"batch{b}/{mode}": cell([v, v, v], accept, ttft=10.0) for (b, v) in zip((1, 16), values)
            for mode in ("greedy", "sampled")}}}

    sglang = run("sglang", sglang_plain, {**arm("d/chain/plugin", "chain 3/1/4", (80, 500), 2.0),
                                          **arm("d/wide/plugin", "wide 6/8/32", (90, 400), 2.5),
                                          **arm("d/chain/stock", "chain 3/1/4", (999, 9999), 2.0)})
    vllm = run("vllm", vllm_plain, {**arm("d/k3/vllm", "chain 3/1/4", (120, 600), 1.9),
                                    **arm("d/k1/vllm", "chain 1/1/2", (100, 700), 1.5)})
    return sglang, vllm


def test_best_arm_is_the_fastest_of_this_engine_never_stock(runs):
    sglang, vllm = runs
    assert vs_vllm.best_arm(sglang, "d", "batch1/greedy")[0] == "wide 6/8/32"  # 90 > 80; stock's 999 left out
    assert vs_vllm.best_arm(sglang, "d", "batch16/greedy")[0] == "chain 3/1/4"
    assert vs_vllm.best_arm(vllm, "d", "batch16/sampled")[0] == "chain 1/1/2"
    assert vs_vllm.best_arm(vllm, "other", "batch1/greedy") is None


def test_shapes_are_written_alike_in_both_engines_rows():
    """serve_bench names its chain-1 shape "chain1" (arm keys must differ); the pages write "chain 1/1/2" as
    vLLM's rows do, and leave names without a depth as they are."""
    assert vs_vllm.shape_of("d/chain1/plugin", {"shape": "chain1 1/1/2"}) == "chain 1/1/2"
    assert vs_vllm.shape_of("d/chain5/plugin", {"shape": "chain5 5/1/6"}) == "chain 5/1/6"
    assert vs_vllm.shape_of("d/stock-adaptive/plugin", {"shape": "stock-adaptive 3/1/4"}) == "stock-adaptive 3/1/4"
    assert vs_vllm.shape_of("d/wide/plugin", {}) == "d/wide/plugin"  # no recorded shape: the arm's name


def test_chain_lengths_and_parity_pairs(runs):
    assert [vs_vllm.chain_length(s) for s in ("chain 3/1/4", "chain1 1/1/2", "wide 6/8/32", "tree 5/4/8")] == \
        [3, 1, None, None]
    pairs = vs_vllm.parity_pairs(*runs, "d")
    assert [(k, a["arm"], b["arm"]) for k, a, b in pairs] == [(3, "d/chain/plugin", "d/k3/vllm")]


def test_markdown_figures(runs):
    text = vs_vllm.markdown(*runs)
    # SGLang's chain at batch 1: 80 tok/s, 0.80x its plain 100, acceptance 2.00; a step costs 100 x 2 / 80 plain steps
    assert "| SGLang 0.5.23 + this plugin | d | chain 3/1/4 | 80 (0.80x, 2.00) | 500 (0.50x, 2.00) |" in text
    assert "| SGLang 0.5.23 + this plugin | d | chain 3/1/4 | 2.50 | 4.00 |" in text
    # best shapes per cell: batch 1 wide 90 against vLLM's k3 120; batch 16 chain 500 against k1 700
    assert "| d | 0.75 (wide 6/8/32 / chain 3/1/4) | 0.71 (chain 3/1/4 / chain 1/1/2) |" in text
    assert "| plain decoding | 1.25 | 1.00 |" in text
    assert "| d | greedy | 3 | 2.00 / 1.90 | 2.00 / 1.90 |" in text
    assert "stock" not in text.replace("stock SGLang", "")


def test_runs_from_different_worlds_are_refused(runs):
    sglang, vllm = runs
    other = copy.deepcopy(vllm)
    other["device"] = "GPU Y"
    with pytest.raises(ValueError, match="device"):
        vs_vllm.markdown(sglang, other)
    other = copy.deepcopy(vllm)
    other["workload"] = "another target"
    with pytest.raises(ValueError, match="workload"):
        vs_vllm.markdown(sglang, other)
    del other["workload"]  # the page names each run's workload: a run that records none is refused
    with pytest.raises(ValueError, match="workload: not recorded in the vLLM 0.33.0 run"):
        vs_vllm.markdown(sglang, other)


def test_placement_is_said_as_recorded(runs):
    """Runs recorded on two GPUs of one host are said to be on two GPUs; runs that record no placement (before
    engines.run_environment recorded it), or one of two that does not, one after the other; runs of two hosts
    are refused."""
    sglang, vllm = copy.deepcopy(runs)
    assert "GPU X, one after the other on the same machine:" in vs_vllm.markdown(sglang, vllm)
    vllm.update(gpus="1", host="h1")
    assert "GPU X, one after the other on the same machine:" in vs_vllm.markdown(sglang, vllm)
    sglang.update(gpus="0", host="h1")
    assert "GPU X, on two GPUs of one machine (SGLang on GPU 0, vLLM on GPU 1):" in vs_vllm.markdown(sglang, vllm)
    vllm["host"] = "h2"
    with pytest.raises(ValueError, match="host: SGLang run 'h1', vLLM run 'h2'"):
        vs_vllm.markdown(sglang, vllm)


def test_runs_that_served_different_files_for_one_drafter_are_refused(runs):
    """Both runs record the drafter's files: equal, the page is made; one weight file's digest differs, refused;
    a run from before the files were recorded is not checked."""
    sglang, vllm = copy.deepcopy(runs)
    sglang["drafter_files"] = {"d": {"config.json": "aa", "model.safetensors": "bb"}}
    vllm["drafter_files"] = copy.deepcopy(sglang["drafter_files"])
    assert vs_vllm.markdown(sglang, vllm)
    vllm["drafter_files"]["d"]["model.safetensors"] = "cc"
    with pytest.raises(ValueError, match=r"drafter d: its files differ between the runs \(model\.safetensors; "
                                         r"drafter_files\)"):
        vs_vllm.markdown(sglang, vllm)
    del vllm["drafter_files"]
    assert vs_vllm.markdown(sglang, vllm)


def test_runs_that_took_turns_on_one_gpu_are_said_to(runs):
    """Both runs' arms record the turns they waited for: one GPU, taking turns; one run's alone does not say it."""
    sglang, vllm = copy.deepcopy(runs)
    sglang.update(gpus="0", host="h1")
    vllm.update(gpus="0", host="h1")
    sglang["arms"]["plain"]["turn_waits_s"] = {"start": 0.0, "measure": 29.1}
    assert "GPU X, one after the other on the same machine:" in vs_vllm.markdown(sglang, vllm)
    vllm["arms"]["d/k1/vllm"]["turn_waits_s"] = {"start": 22.8, "measure": 0.0}
    assert "GPU X, both engines on one GPU taking turns (an engine starts beside the other's start and measures " \
        "alone):" in vs_vllm.markdown(sglang, vllm)


def test_only_the_batch_sizes_both_runs_measured_are_compared(runs):
    """An SGLang run that also measured batch 4 (for the adaptive-shape pages) beside a vLLM run of 1 and 16:
    the page compares 1 and 16 and names them; a run with no batch size in common is refused."""
    sglang, vllm = copy.deepcopy(runs)
    sglang["batches"] = [1, 4, 16]
    for arm in sglang["arms"].values():
        arm["cells"]["batch4/greedy"] = cell([1.0, 1.0, 1.0], 2.0, ttft=1.0)
    text = vs_vllm.markdown(sglang, vllm)
    assert "batch 1: 8 prompts one at a time, batch 16: 64 requests in waves" in text
    assert "batch 4" not in text
    assert "| plain decoding | 1.25 | 1.00 |" in text
    assert "ahead in" in vs_vllm.where_faster(sglang, vllm) and "batch 4" not in vs_vllm.where_faster(sglang, vllm)
    vllm = copy.deepcopy(vllm)
    vllm["batches"] = [16]  # batch 1 not compared: not named
    assert "batch 16: 64 requests in waves of that size; the median" in vs_vllm.markdown(sglang, vllm)
    assert "batch 1:" not in vs_vllm.markdown(sglang, vllm)
    vllm["batches"] = [64]
    with pytest.raises(ValueError, match=r"batches: none in both \(SGLang run \[1, 4, 16\], vLLM run \[64\]\)"):
        vs_vllm.markdown(sglang, vllm)


def test_the_sglang_runs_attention_backend_is_named(runs):
    """Runs before serve_bench recorded it ran Triton attention; a recorded backend is named as recorded."""
    sglang, vllm = copy.deepcopy(runs)
    assert "SGLang 0.5.23 + this plugin (triton attention, torch 2.14.1" in vs_vllm.markdown(sglang, vllm)
    sglang["attention_backend"] = "fa3"
    assert "SGLang 0.5.23 + this plugin (fa3 attention, torch 2.14.1" in vs_vllm.markdown(sglang, vllm)
    assert "(fa3 attention, commit abc1234)" in vs_vllm.headline(sglang, vllm, ("a.json", "b.json"))


def test_where_faster_counts_leads_against_the_spread(runs):
    words = vs_vllm.where_faster(*runs)
    # 8 cells (plain + d, 2 modes x 2 batch sizes). vLLM leads d everywhere (0.75, 0.71 per mode): 4 cells, the
    # spread there 20 %, so every lead is past it. SGLang leads plain at batch 1 (1.25 > 1 + 20 %); at 16 a tie.
    assert "**vLLM ahead in 4 of 8**, 4 beyond the spread" in words
    assert "**SGLang + this plugin ahead in 2 of 8**, 2 beyond the spread: plain decoding greedy batch 1 (1.25); " \
           "plain decoding T 0.7 batch 1 (1.25)" in words
    assert "SGLang + this plugin 0.50-0.90x; vLLM 0.70-1.50x" in words


def test_a_lead_inside_the_noise_floor_is_not_beyond_it(runs):
    """Rounds that agree to the token/s (spread 0) do not make a 2 % lead real: the floor is 5 %."""
    sglang, vllm = copy.deepcopy(runs)
    for key in sglang["arms"]["plain"]["cells"]:
        sglang["arms"]["plain"]["cells"][key] = cell([98, 98, 98])
        vllm["arms"]["plain"]["cells"][key] = cell([100, 100, 100])
    words = vs_vllm.where_faster(sglang, vllm)
    # vLLM leads plain decoding in all 4 cells (0.98, inside the floor) and d in 4 (0.71-0.75, past it)
    assert "**vLLM ahead in 8 of 8**, 4 beyond the spread" in words
    assert "plain decoding greedy batch 1 (0.98)" in words and "(at least 5%)" in words


@pytest.mark.parametrize("page, sglang_run, vllm_run", [
    ("vs_vllm_h200.md", "serve_vs-vllm_h200_fa3_sglang-0.5.23.json", "vllm_h200_fa3-run_vllm-0.33.0.json"),
    ("vs_vllm.md", "serve_vs-vllm_h100_fa3_sglang-0.5.23.json", "vllm_h100_fa3-run_vllm-0.33.0.json"),
    ("vs_vllm_chain1.md", "serve_vs-vllm_h100_fa3-chain1_sglang-0.5.23.json",
     "vllm_h100_fa3-chain1-run_vllm-0.33.0.json"),
    ("vs_vllm_h200b.md", "serve_vs-vllm_h200-b_fa3_sglang-0.5.23.json", "vllm_h200-b_fa3-run_vllm-0.33.0.json"),
    ("vs_vllm_h200c.md", "serve_vs-vllm_h200-c_fa3_sglang-0.5.23.json", "vllm_h200-c_fa3-run_vllm-0.33.0.json"),
    ("vs_vllm_h200d.md", "serve_vs-vllm_h200-d_fa3_sglang-0.5.23.json", "vllm_h200-d_fa3-run_vllm-0.33.0.json"),
    ("vs_vllm_h200e.md", "serve_vs-vllm_h200-e_fa3_sglang-0.5.23.json", "vllm_h200-e_fa3-run_vllm-0.33.0.json"),
    ("vs_vllm_h200x2.md", "serve_vs-vllm_h200x2_fa3_sglang-0.5.23.json", "vllm_h200x2_fa3-run_vllm-0.33.0.json"),
    ("vs_vllm_8b.md", "serve_vs-vllm_8b-geometry_h100_fa3_sglang-0.5.23.json",
     "vllm_8b-geometry_h100_fa3-run_vllm-0.33.0.json"),
    ("vs_vllm_triton.md", "serve_vs-vllm_h100_sglang-0.5.23.json", "vllm_h100_vllm-0.33.0.json"),
    ("vs_vllm_8b_triton.md", "serve_vs-vllm_8b-geometry_h100_sglang-0.5.23.json",
     "vllm_8b-geometry_h100_vllm-0.33.0.json"),
])
def test_committed_page_is_generated_from_the_committed_runs(page, sglang_run, vllm_run):
    sglang = json.loads((RESULTS / sglang_run).read_text())
    vllm = json.loads((RESULTS / vllm_run).read_text())
    assert (RESULTS / page).read_text() == vs_vllm.markdown(sglang, vllm)


def test_parity_and_step_cost_in_words(runs):
    """Acceptance 2.0 / 1.9 at chain 3 in 4 cells; with an SGLang chain 1 of acceptance 1.6 at 60 / 700 tok/s
    (plain 100 / 1000; 1.75 at greedy batch 16): its step costs 100 x 1.6 / 60 = 2.67 and 1000 x 1.75 / 700 =
    2.50 plain steps, vLLM's chain 1 (1.5 at 100 / 700, plain 80 / 1000) 1.20 and 2.14; the largest acceptance
    gap 1.75 - 1.5 = 0.25 of 8 cells."""
    sglang, vllm = copy.deepcopy(runs)
    assert vs_vllm.parity_and_step_cost(sglang, vllm) == (
        "At equal chain length the two engines' acceptance lengths lie within 0.10 of each other in all 4 cells "
        "(every drafter, greedy and T 0.7).")  # no SGLang chain 1: no step cost said
    sglang["arms"]["d/chain1/plugin"] = {"arm": "d/chain1/plugin", "shape": "chain 1/1/2", "cells": {
        f"batch{b}/{mode}": cell([v, v, v], 1.75 if (b, mode) == (16, "greedy") else 1.6)
        for b, v in ((1, 60), (16, 700)) for mode in ("greedy", "sampled")}}
    sglang["arms"]["d/unshaped/plugin"] = {"arm": "d/unshaped/plugin", "cells": {}}  # no shape recorded: skipped
    assert vs_vllm.parity_and_step_cost(sglang, vllm) == (
        "At equal chain length the two engines' acceptance lengths lie within 0.25 of each other in all 8 cells "
        "(every drafter, greedy and T 0.7); a chain-1 step costs SGLang 0.5.23 + this plugin 2.50-2.67 and "
        "vLLM 0.33.0 1.20-2.14 plain decoding steps (greedy).")
