"""The committed stock-vs-plugin results (docs/stock-sglang.md) are what scripts/stock_vs_plugin.py
computes on the installed SGLang release: stock's own loader and this package's class, each against
the reference drafter, on every layout of the table."""

import json
import math
from importlib.metadata import version

from tests.script_module import load_siblings

# what stock's loader did: deterministic for a given release and seeded layout
LOADING = ("checked", "loads", "refusal", "architectures", "resolves_to", "built_with", "built_class", "depth",
           "parameters", "never_loaded", "dropped", "redundant_dropped", "load_errors", "shared_from_target",
           "eagle_config_ids", "target_captures", "uninitialised")


def _close(a, b):
    if "NaN" in (a, b):
        return a == b
    return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-5)


def test_committed_results_are_what_the_script_computes(sglang_dist):
    _, script = load_siblings("scripts", "readme_numbers", "stock_vs_plugin")
    path = script.results_path(version("sglang"))
    assert path.exists(), f"{path}: no results for the installed SGLang; run python scripts/stock_vs_plugin.py"
    committed = json.loads(path.read_text(encoding="utf-8"))
    measured = script.measure()
    assert [row["layout"] for row in measured] == [row["layout"] for row in committed["rows"]]
    for now, then in zip(measured, committed["rows"]):
        assert now["ours"] == then["ours"], now["layout"]
        assert {k: now["stock"].get(k) for k in LOADING} == {k: then["stock"].get(k) for k in LOADING}, now["layout"]
        forward_now, forward_then = now["stock"].get("forward", {}), then["stock"].get("forward", {})
        for key in ("compared", "equal", "vocab_map_equal", "reason"):
            assert forward_now.get(key) == forward_then.get(key), (now["layout"], key)
        # never-loaded parameters that SGLang leaves uninitialised are NaN in the check: all deterministic
        if forward_now.get("compared"):
            assert forward_now["decode_argmax_equal"] == forward_then["decode_argmax_equal"], now["layout"]
            for key, value in forward_now["max_abs_diff"].items():
                assert _close(value, forward_then["max_abs_diff"][key]), (now["layout"], key)
    # issue 24's findings, so that a results file that lost them fails too
    rows = {row["layout"]: row for row in measured}
    assert all(row["ours"] == {"equal": True} for row in measured)
    assert "model_type" in rows["fixtures:F7-speculators-2-layers"]["stock"]["refusal"]
    assert rows["fixtures:F1-specforge"]["stock"]["forward"]["equal"] is True
    assert rows["code_layouts:specforge-eagle3.1"]["stock"]["forward"]["equal"] is False
    assert rows["code_layouts:nemo-eagle3.1"]["stock"]["depth"] == 12
    assert len(rows["code_layouts:nemo-eagle3.1"]["stock"]["uninitialised"]) == 11 * 4  # 4 linears per layer
    assert rows["producer_layouts:modelopt-hf-eagle3-2-layers"]["stock"]["never_loaded"] == [
        "model.layers.1.hidden_norm.weight"]
