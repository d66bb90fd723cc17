"""The generated figures of README.md and docs/*.md equal what scripts/readme_numbers.py renders from
the committed results, so a result file changed without rerunning the script (or a hand-edited
figure) fails."""

import subprocess
import sys

import pytest

from tests.script_module import ROOT, load

SCRIPT = ROOT / "scripts" / "readme_numbers.py"


def load_script():
    return load("scripts/readme_numbers.py", "readme_numbers")


def test_readme_figures_are_the_generated_ones():
    checked = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_a_block_without_a_renderer_is_an_error():
    script = load_script()
    readme = "x <!-- generated:no-such-block:begin -->old<!-- generated:no-such-block:end --> y"
    with pytest.raises(ValueError, match="no-such-block"):
        script.with_blocks(readme, script.BLOCKS)


def test_agreeing_measurements_show_one_value_else_the_range():
    script = load_script()
    assert script.value_or_range([2.531, 2.534], 2) == "2.53"
    assert script.value_or_range([1.160, 1.056], 3) == "1.056-1.160"
    assert script.value_or_range([131.2, 128.9], 0, " s") == "129-131 s"


def copy_pages(script, tmp_path, monkeypatch):
    """The README and docs/ copied under ``tmp_path``, the script pointed at the copies."""
    import shutil

    readme, docs = tmp_path / "README.md", tmp_path / "docs"
    shutil.copy(script.README, readme)
    shutil.copytree(script.DOCS, docs)
    monkeypatch.setattr(script, "README", readme)
    monkeypatch.setattr(script, "DOCS", docs)
    monkeypatch.setattr(script, "stale_test_count", lambda runs, collected: None)  # not what these test
    monkeypatch.setattr(script, "collected_tests", lambda: 0)
    return readme, docs


def edit_block(text: str, name: str, body: str) -> str:
    shown = f"<!-- generated:{name}:begin -->"
    start = text.index(shown) + len(shown)
    return text[:start] + body + text[text.index("<!--", start):]


def test_check_fails_on_a_stale_figure(tmp_path, monkeypatch):
    """A copy of the README with one generated figure edited is reported stale (exit 1)."""
    script = load_script()
    readme, _ = copy_pages(script, tmp_path, monkeypatch)
    edited = edit_block(readme.read_text(encoding="utf-8"), "real-target", "| 9.99x |")
    readme.write_text(edited, encoding="utf-8")
    assert script.main(["--check"]) == 1
    assert readme.read_text(encoding="utf-8") == edited  # --check writes nothing


def test_blocks_in_docs_pages_are_checked_and_rewritten(tmp_path, monkeypatch, capsys):
    """A stale block in a page of docs/ fails --check, naming the page; a plain run rewrites it."""
    script = load_script()
    readme, docs = copy_pages(script, tmp_path, monkeypatch)
    page = docs / "cli.md"
    fresh = page.read_text(encoding="utf-8")
    page.write_text(edit_block(fresh, "cli-serve", "\n| `--gone` |\n"), encoding="utf-8")
    assert script.main(["--check"]) == 1
    assert "docs/cli.md" in capsys.readouterr().err
    assert script.main([]) == 0
    assert page.read_text(encoding="utf-8") == fresh


def test_a_renderer_no_page_shows_is_an_error(tmp_path, monkeypatch, capsys):
    script = load_script()
    _, docs = copy_pages(script, tmp_path, monkeypatch)
    page = docs / "cli.md"
    page.write_text(page.read_text(encoding="utf-8").replace("generated:cli-eval:", "moved:cli-eval:"),
                    encoding="utf-8")
    assert script.main(["--check"]) == 2
    assert "cli-eval" in capsys.readouterr().err


def test_check_fails_when_the_suite_outgrew_its_record():
    script = load_script()
    runs = [{"date": "2026-11-23", "commit": "aaa", "passed": 440, "failed": 0, "skipped": 10},
            {"date": "2026-11-24", "commit": "bbb", "passed": 600, "failed": 1, "skipped": 15, "collected": 617}]
    assert script.stale_test_count(runs, 617) is None
    stale = script.stale_test_count(runs, 628)
    assert "617" in stale and "628" in stale and "--record-tests" in stale


def test_a_suite_log_becomes_a_record():
    script = load_script()
    log = ("...\nFAILED tests/test_x.py::test_y - AssertionError\n"
           "611 passed, 1 failed, 15 skipped, 1 deselected, 3 warnings in 559.12s (0:09:19)\n")
    record = script.suite_record(log, "0.5.23")
    assert (record["passed"], record["failed"], record["skipped"], record["collected"]) == (611, 1, 15, 628)
    assert record["sglang"] == "0.5.23" and "559 s" in record["note"]
    with pytest.raises(ValueError, match="summary"):
        script.suite_record("collected 3 items\ninterrupted\n", "0.5.23")


def test_the_tp2_cell_shows_rows_the_tp1_comparison_server_and_acceptance(tmp_path, monkeypatch):
    """The versions table's TP=2 cell: rows judged against the TP-2 baseline, the TP-2 baseline against
    TP 1's, and the server check and acceptance pair from benchmarks/results/tp/ of that release only."""
    import json

    script = load_script()
    row = {"output_digest": "abc", "exact": 4, "near_tie": 4, "mismatch": [], "prompts": 8}
    run = {"rows": [row, dict(row)], "tp_size": 2, "device": "GPU", "date": "2026-11-26 22:21 UTC", "commit": "c0ffee",
           "baseline_vs_tp1": {"exact": 1, "near_tie": 6, "mismatch": [{"prompt": 3}], "prompts": 8}}
    (tmp_path / "server_x_sglang-0.5.23.json").write_text(json.dumps({"identical": {"greedy": 8, "sampled": 7}}))
    (tmp_path / "server_x_sglang-0.5.21.json").write_text(json.dumps({"identical": {"greedy": 0}}))
    (tmp_path / "acceptance_x_sglang-0.5.23.json").write_text(json.dumps(
        {"long": {"tp1": {"accept_length": 2.571}, "tp2": {"accept_length": 2.5}}}))
    monkeypatch.setattr(script, "TP_RESULTS", tmp_path)
    assert script.tp2_cell([run], "0.5.23") == (
        "2/2 rows lossless, digest abc (against TP 1's baseline: 1/8 prompts equal, 6 first differ at a bf16 "
        "near-tie, 1 elsewhere); fused-verify server 15/16 identical; demo drafter acceptance 2.57 at TP 1, "
        "2.50 at TP 2; GPU x2, 2026-11-26, `c0ffee`")


def test_every_page_shows_what_its_sources_give():
    """Each generated figure equals what its result file gives now, checked apart from the suite's
    test count (the test above is left out while that record is renewed; this one still runs)."""
    script = load_script()
    stale = [script.page_name(page) for page, (now, generated) in script.generated_pages(script.BLOCKS).items()
             if now != generated]
    assert not stale, f"{stale}: run python scripts/readme_numbers.py"


def test_each_cpu_record_says_what_its_demo_printed():
    """A record's summary figures are the ones its demo's own output holds."""
    script = load_script()
    for build in script.cpu_builds():
        assert script.parse_demo(build["demo"]["stdout"]) == {
            key: build["demo"][key] for key in ("acceptance_length", "equals_plain_greedy")}
        assert script.first_loss(build) > 0


def with_figures(build: dict, acceptance=None, loss=None, lossless=True) -> dict:
    """``build`` with its demo's acceptance length and first loss (and the lossless verdict) replaced."""
    import copy
    import re

    build = copy.deepcopy(build)
    demo = build["demo"]
    if acceptance is not None:
        demo["acceptance_length"] = acceptance
    if loss is not None:
        demo["stdout"] = re.sub(r"(training step 1/\d+, loss )[0-9.]+", rf"\g<1>{loss:.3f}", demo["stdout"], count=1)
    demo["equals_plain_greedy"] = lossless
    return build


def test_a_fresh_build_passes_inside_the_range_the_cpus_measured_and_fails_outside():
    script = load_script()
    ranges = script.measured_ranges()
    measured = script.cpu_builds()
    assert ranges["demo acceptance length"][:2] == (2.53, 2.82)  # the Intel Xeon's and the AMD EPYC's
    assert all(script.judge(build, ranges) == [] for build in measured)
    build = measured[-1]
    assert script.judge(with_figures(build, acceptance=2.70, loss=23.85), ranges) == []
    # compared as the pages show them: 2.5251 shows as 2.53, 2.5249 as 2.52
    assert script.judge(with_figures(build, acceptance=2.5251), ranges) == []
    [outside] = script.judge(with_figures(build, acceptance=2.5249), ranges)
    assert outside == "demo acceptance length: 2.52, outside 2.53-2.82"
    [outside] = script.judge(with_figures(build, loss=24.5), ranges)
    assert outside == "distillation loss at step 1: 24.500, outside 23.778-23.938"
    assert script.judge(with_figures(build, lossless=False), ranges) == [
        "the demo's output differs from plain greedy decoding"]


def test_check_demo_judges_one_fresh_build_and_writes_nothing(monkeypatch, capsys):
    script = load_script()
    records = {path: path.read_bytes() for path in script.cpu_record_paths()}
    build = script.cpu_builds()[0]
    monkeypatch.setattr(script, "measure_build", lambda cli, label: build)
    assert script.main(["--check-demo"]) == 0
    assert "demo acceptance length: 2.53 (measured: 2.53-2.82)" in capsys.readouterr().out
    monkeypatch.setattr(script, "measure_build", lambda cli, label: with_figures(build, acceptance=3.1))
    assert script.main(["--check-demo"]) == 1
    assert "OUTSIDE: demo acceptance length: 3.10, outside 2.53-2.82" in capsys.readouterr().err
    assert records == {path: path.read_bytes() for path in script.cpu_record_paths()}


def test_measure_cpu_keeps_one_record_per_cpu_model():
    script = load_script()
    for path, record in zip(script.cpu_record_paths(), script.cpu_records()):
        assert script.record_path(record["machine"]["cpu_model"]) == path
    new = script.record_path("Intel(R) Core(TM) i7-9700 CPU @ 3.00GHz")
    assert new.name == "demo_eval_intel-core-i7-9700-3-00ghz.json" and new not in script.cpu_record_paths()


def test_the_eval_setup_gives_the_tokens_asked_for():
    """The eval asked 48 new tokens per prompt; a last verify step may take a prompt past that, so
    counting the tokens generated gave 49."""
    assert "8 prompts x 48 tokens" in load_script().eval_setup()


def test_the_real_target_summary_is_read_from_the_headline_run(tmp_path, monkeypatch):
    """Acceptance and speedup over this plugin's cells only, plain decoding's spread between its own
    rounds, and the greedy outputs' tally, from the headline's declared run (not a later one)."""
    import json

    script = load_script()
    greedy = {"requests": 8, "exact": 3, "near_tie": 4, "mismatch": [{"prompt": 2}]}
    run = {"date": "2026-11-28", "arms": {
        "plain": {"cells": {"batch1/greedy": {"tok_s": [90.0, 100.0, 110.0]},
                            "batch1/sampled": {"tok_s": [95.0, 100.0, 100.0]}}},
        "d/wide/plugin": {"cells": {"batch1/greedy": {"accept_length": 2.1, "speedup_best": 0.9, "vs_plain": greedy},
                                    "batch1/sampled": {"accept_length": 1.9, "speedup_best": 1.1}}},
        "d/wide/stock": {"cells": {"batch1/greedy": {"accept_length": 3.0, "speedup_best": 2.0}}}}}
    (tmp_path / "serve_headline.json").write_text(json.dumps(run))
    (tmp_path / "serve_later.json").write_text(json.dumps({"date": "2026-11-29", "arms": {}}))
    monkeypatch.setattr(script, "REAL_TARGET", tmp_path)
    monkeypatch.setattr(script, "REAL_TARGET_HEADLINE", tmp_path / "serve_headline.json")
    assert script.real_target_summary() == (
        "this plugin's drafters accept 1.90-2.10 tokens per verify step and run at 0.90-1.10x plain decoding's "
        "tokens/s, while plain decoding's own rounds spread by 5-20%; of 8 greedy outputs, 3 equal plain "
        "decoding's and 4 first depart from it at a bf16 near-tie, 1 elsewhere")


def test_a_drafter_stock_did_not_run_takes_its_stock_cell_from_a_later_edited_config_run():
    import importlib.util

    spec = importlib.util.spec_from_file_location("real_target_table", ROOT / "benchmarks" / "real_target" / "table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    cell = {"speedup_best": 0.8, "accept_length": 1.5}
    headline_run = {"drafters": {"d": "/d"}, "batches": [1], "device": "GPU", "sglang": "0.5.23", "date": "x",
                    "arms": {"plain": {"cells": {}}, "d/chain/plugin": {"shape": "chain 3/1/4", "cells": {
                        "batch1/greedy": cell, "batch1/sampled": cell}}}}
    later = {"arms": {"d/chain/stock-edit": {"shape": "chain 3/1/4", "cells": {
        "batch1/greedy": {"speedup_best": 0.7, "accept_length": 1.44}, "batch1/sampled": cell}}}}
    assert "| not run |" in table.headline(headline_run, "a.json")
    text = table.headline(headline_run, "a.json", ((later, "b.json"),))
    assert "refuses its config; rewritten as SGLang's flat format: 0.70x, 1.44 (chain 3/1/4, `b.json`)" in text
