"""scripts/stock_vs_plugin_acceptance.py runs its layouts in separate calls (a GPU call is bounded
in time): a run replaces its layouts' rows of a record served the same way and keeps the others."""

import json

from tests.script_module import load_siblings

SERVED = {"sglang": "0.5.23", "device": "NVIDIA H200", "target": {"name": "t", "likely_successor": 0.9},
          "drafting": {"kind": "tree", "num_steps": 3, "topk": 4, "draft_tokens": 8}, "prompts": 16,
          "new_tokens_per_prompt": 32}


def _row(layout: str, commit: str) -> dict:
    return {"layout": layout, "run": {"commit": commit}}


def test_a_run_replaces_its_layouts_and_keeps_the_others(tmp_path):
    _, script = load_siblings("scripts", "readme_numbers", "stock_vs_plugin_acceptance")
    committed = tmp_path / "committed.json"
    committed.write_text(json.dumps({**SERVED, "date": "2026-11-24", "note": "by hand",
                                     "rows": [_row("specforge", "old"), _row("sglang", "old")]}))
    out = tmp_path / "out.json"  # absent: the committed record is the one merged into
    record = {**SERVED, "date": "2026-11-25"}
    merged = script.merged(out, committed, record, [_row("nemo", "new"), _row("sglang", "new")])
    assert [(row["layout"], row["run"]["commit"]) for row in merged["rows"]] == [
        ("sglang", "new"), ("specforge", "old"), ("nemo", "new")]  # the order of LAYOUTS
    assert merged["note"] == "by hand" and merged["date"] == "2026-11-25"
    # a record in --out wins over the committed one
    out.write_text(json.dumps({**merged, "rows": merged["rows"][:1]}))
    assert [row["layout"] for row in script.merged(out, committed, record, [])["rows"]] == ["sglang"]


def test_a_record_served_another_way_is_not_merged_into(tmp_path):
    _, script = load_siblings("scripts", "readme_numbers", "stock_vs_plugin_acceptance")
    committed = tmp_path / "committed.json"
    committed.write_text(json.dumps({**SERVED, "prompts": 4, "rows": [_row("specforge", "old")]}))
    merged = script.merged(tmp_path / "out.json", committed, {**SERVED, "date": "d"}, [_row("nemo", "new")])
    assert [row["layout"] for row in merged["rows"]] == ["nemo"] and "note" not in merged
