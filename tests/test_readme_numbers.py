"""README.md's generated figures equal what scripts/readme_numbers.py renders from the committed
results, so a result file changed without rerunning the script (or a hand-edited figure) fails."""

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


def test_check_fails_on_a_stale_figure(tmp_path, monkeypatch):
    """A copy of the README with one generated figure edited is reported stale (exit 1)."""
    script = load_script()
    readme = script.README.read_text(encoding="utf-8")
    shown = "<!-- generated:demo-cpu-acceptance:begin -->"
    start = readme.index(shown) + len(shown)
    edited = readme[:start] + "9.99" + readme[readme.index("<!--", start):]
    copy = tmp_path / "README.md"
    copy.write_text(edited, encoding="utf-8")
    monkeypatch.setattr(script, "README", copy)
    assert script.main(["--check"]) == 1
    assert copy.read_text(encoding="utf-8") == edited  # --check writes nothing


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
