"""benchmarks/results/fused_verify.md is what benchmarks/fused_verify_table.py makes of the committed runs."""

import subprocess
import sys


def test_fused_verify_table_is_current():
    result = subprocess.run([sys.executable, "benchmarks/fused_verify_table.py", "--check"], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
