"""benchmarks/results/step_profile.md is what benchmarks/step_profile_table.py makes of the committed run,
and its rows split each recorded step's GPU period without gap or overlap."""

import random
import subprocess
import sys

import pytest

from tests.script_module import ROOT, load

TABLE = ROOT / "benchmarks" / "step_profile_table.py"


def load_table():
    return load("benchmarks/step_profile_table.py", "step_profile_table")


def test_step_profile_table_is_current():
    result = subprocess.run([sys.executable, str(TABLE), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_partition_the_step_period(seed):
    """Nested spans drawn at random (each phase inside its parent, the parents inside the step): the
    rows add up to the period, and each leaf phase is its own row."""
    rng = random.Random(seed)
    draft_forward, tree_build = rng.uniform(0.1, 5), rng.uniform(0.01, 0.1)
    draft = draft_forward + tree_build + rng.uniform(0.0, 0.1)
    prepare, target, sample = rng.uniform(0.01, 0.1), rng.uniform(5, 60), rng.uniform(0.03, 7)
    verify = prepare + target + sample + rng.uniform(0.0, 1)
    extend = rng.uniform(0.2, 4)
    step = draft + verify + extend + rng.uniform(0.0, 0.05)
    period = step + rng.uniform(0.0, 0.1)
    graph = rng.choice(["draft_forward_graph", "draft_forward_eager"])
    recorded = {"gpu_ms": {"step": step, "draft": draft, graph: draft_forward, "tree_build": tree_build,
                           "verify": verify, "verify_prepare": prepare, "target_forward": target, "sample": sample,
                           "draft_extend": extend}, "gpu_period_ms": period}
    rows = load_table().step_rows(recorded)
    assert sum(rows.values()) == pytest.approx(period, rel=1e-12)
    assert (rows["draft steps"], rows["tree build"], rows["target forward"], rows["verify sampling"],
            rows["draft extend"]) == (draft_forward, tree_build, target, sample, extend)
    assert min(rows.values()) >= -1e-12
