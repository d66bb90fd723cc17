"""`sglang-eagle inspect`: text and JSON output, exit status."""

from __future__ import annotations

import json

from sglang_eagle_ext.cli import main
from sglang_eagle_ext.testing import fixtures


def _target(tmp_path, **kwargs):
    path = tmp_path / "target.json"
    path.write_text(json.dumps(fixtures.target_config(**kwargs)))
    return str(path)


def test_multi_layer_speculators_drafter(tmp_path, capsys):
    fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"), seed=4)
    assert main(["inspect", str(tmp_path / "d"), "--target", _target(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "dialect: speculators" in out
    assert "num_layers                1" not in out and '"input_layernorm"' in out
    assert "hidden-state indices (input of target layer k): [2, 6, 9]" in out
    assert "written for SGLang as eagle_config ids: [1, 5, 8]" in out
    assert "status: OK" in out


def test_disagreement_with_stock_sglang_is_shown(tmp_path, capsys):
    fixtures.build("F8-speculators-4-aux", str(tmp_path / "d"), seed=4)
    assert main(["inspect", str(tmp_path / "d"), "--target", _target(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["capture"]["hidden_state_indices"] == [2, 5, 9, 11]
    assert report["capture"]["stock_sglang_would_capture"] == [2, 6, 9]
    assert report["capture"]["stock_sglang_agrees"] is False
    assert report["description"]["num_aux_hidden_states"] == 4


def test_rejected_parallel_drafting_head(tmp_path, capsys):
    fixtures.build("F13-peagle-speculators", str(tmp_path / "d"), seed=4)
    assert main(["inspect", str(tmp_path / "d")]) == 1
    out = capsys.readouterr().out
    assert "P-EAGLE" in out and "status: REJECTED" in out and "fix:" in out


def test_target_mismatch_exits_non_zero_but_still_describes(tmp_path, capsys):
    fixtures.build("F1-specforge", str(tmp_path / "d"), seed=4)
    assert main(["inspect", str(tmp_path / "d"), "--target", _target(tmp_path, layers=8, vocab=600),
                 "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "rejected"
    assert report["description"]["dialect"] == "flat"
    assert {p["field"] for p in report["problems"]} == {"vocab_size"}
