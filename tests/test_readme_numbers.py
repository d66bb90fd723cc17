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
