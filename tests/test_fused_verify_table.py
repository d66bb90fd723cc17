"""benchmarks/results/fused_verify.md is what benchmarks/fused_verify_table.py makes of the committed runs."""

import subprocess
import sys

import pytest

from tests.script_module import load


def test_fused_verify_table_is_current():
    result = subprocess.run([sys.executable, "benchmarks/fused_verify_table.py", "--check"], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr


def test_a_step_run_stopped_in_its_timing_says_so_and_a_text_run_must_name_its_seam():
    """A step run that recorded 2 of its 21 timed cells: the table shows those two and says it stopped, with no
    greedy-rows line (no greedy row was timed); a text run whose first line names no seam is refused by name."""
    table = load("benchmarks/fused_verify_table.py", "fused_verify_table")
    cell = {"filters": "T0.7 top-p0.9", "tree": [1, 3, 4], "ms_stock": 0.7, "ms_fused": 0.6, "speedup": 0.7 / 0.6,
            "mem_stock": 4 << 20, "mem_fused": 0, "entropy_nats": 2.5}
    run = {"device": "GPU X", "release": "0.5.23", "torch": "2.14.1", "date": "2026-11-29", "vocab": 128256,
           "zipf": 1.25, "identical": [{"identical": 1, "requests": 1}], "timing_cells": 21,
           "distribution": [{"filters": "T0.7 top-p0.9", "arm": "stock", "tokens": 100, "support": 8, "chi2": 1.0,
                             "dof": 7, "p": 0.99}],
           "timing": [dict(cell, bs=1), dict(cell, bs=16)]}
    lines = table.step_table("step_h200_sglang-0.5.23.json", run)
    assert "Stopped by its time limit after 2 of its 21 timed cells: the table holds those." in lines
    assert not any(line.startswith("Greedy rows") for line in lines)
    assert sum(line.startswith("| T0.7 top-p0.9 | 1/3/4 |") for line in lines) == 2
    whole = dict(run, timing=run["timing"] * 10 + [dict(cell, filters="greedy", bs=64)])
    lines = table.step_table("step_h200_sglang-0.5.23.json", whole)
    assert not any(line.startswith("Stopped") for line in lines) and any(line.startswith("Greedy rows")
                                                                         for line in lines)
    with pytest.raises(ValueError, match=r"run\.txt: its first line names no '\(seam: FUNCTION'"):
        table.step_text_table("run.txt", "# fused_verify_step.py --quick on SGLang 0.5.23\nrelease 0.5.23 GPU X\n")
