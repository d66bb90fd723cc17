"""`sglang-eagle inspect`: text and JSON output, exit status."""

from __future__ import annotations

import json

from sglang_eagle_ext.cli import main
from sglang_eagle_ext.sglang import stock_check
from tests.kit import fixtures, producer_layouts


def _target(tmp_path, **kwargs):
    path = tmp_path / "target.json"
    path.write_text(json.dumps(fixtures.target_config(**kwargs)))
    return str(path)


def test_multi_layer_speculators_drafter(tmp_path, capsys):
    fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"), seed=4)
    assert main(["inspect", "--no-stock-check", str(tmp_path / "d"), "--target", _target(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "dialect: speculators" in out
    assert "num_layers                1" not in out and '"input_layernorm"' in out
    assert "hidden-state indices (input of target layer k): [2, 6, 9]" in out
    assert "written for SGLang as eagle_config ids: [1, 5, 8]" in out
    assert "status: OK" in out


def test_stock_sglang_refusing_a_speculators_drafter_is_quoted(tmp_path, capsys):
    """Stock's own config loader runs on the drafter (plugin off) and its error is quoted."""
    fixtures.build("F8-speculators-4-aux", str(tmp_path / "d"), seed=4)
    assert main(["inspect", str(tmp_path / "d"), "--target", _target(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "hidden-state indices (input of target layer k): [2, 5, 9, 11]" in out
    assert "refuses it: ValueError: Unrecognized model in" in out and "`model_type`" in out
    assert "verdict: stock cannot serve it; this plugin can" in out


def test_stock_sglang_capturing_ids_written_out_of_order_agrees(tmp_path, capsys):
    """ModelOpt's Megatron export writes its taps in set order [1, 28, 15]: stock's target
    captures those layers in layer order, which is what the drafter expects; stock still serves
    it wrongly, because its loader drops every ``midlayer.{i}`` tensor."""
    layout = producer_layouts.LAYOUTS["modelopt-megatron-eagle3-deep"]
    directory = producer_layouts.build(layout, str(tmp_path / "d"), seed=4)
    target = tmp_path / "target.json"
    target.write_text(json.dumps(layout.target))
    assert main(["inspect", directory, "--target", str(target), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    stock = report["stock_sglang"]
    assert stock["eagle_config_ids"] == [1, 28, 15] and stock["target_captures"] == [2, 29, 16]
    assert sorted(stock["target_captures"]) == report["capture"]["hidden_state_indices"]
    assert "midlayer.0.self_attn.q_proj.weight" in stock["dropped"]
    assert "model.layers.1.hidden_norm.weight" in stock["never_loaded"]
    assert stock["forward"]["compared"] and not stock["forward"]["equal"]
    assert stock_check.same_as_plugin(stock, report["capture"]["hidden_state_indices"]) is False


def test_rejected_parallel_drafting_head(tmp_path, capsys):
    fixtures.build("F13-peagle-speculators", str(tmp_path / "d"), seed=4)
    assert main(["inspect", "--no-stock-check", str(tmp_path / "d")]) == 1
    out = capsys.readouterr().out
    assert "P-EAGLE" in out and "status: REJECTED" in out and "fix:" in out


def test_target_mismatch_exits_non_zero_but_still_describes(tmp_path, capsys):
    fixtures.build("F1-specforge", str(tmp_path / "d"), seed=4)
    assert main(["inspect", "--no-stock-check", str(tmp_path / "d"), "--target", _target(tmp_path, layers=8, vocab=600),
                 "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "rejected"
    assert report["description"]["dialect"] == "flat"
    assert {p["field"] for p in report["problems"]} == {"vocab_size"}


def test_problems_come_before_the_stock_line_that_refers_to_them(tmp_path, capsys):
    """A drafter this package refuses: the problems are listed, then the stock line that says
    stock's loader was not run on those files ("the problems above"), then the status."""
    fixtures.build("F13-peagle-speculators", str(tmp_path / "d"), seed=4)
    assert main(["inspect", str(tmp_path / "d")]) == 1
    lines = capsys.readouterr().out.splitlines()
    problems = next(i for i, line in enumerate(lines) if line.startswith("problems ("))
    stock = next(i for i, line in enumerate(lines) if line.startswith("stock SGLang: not checked"))
    assert problems < stock < lines.index("status: REJECTED") and "the problems above" in lines[stock]


def test_counts_are_spelt_in_the_singular_for_one():
    report = {"checked": True, "sglang": "0.5.23", "loads": True, "built_class": "X", "depth": 1,
              "never_loaded": ["model.norm.weight"], "dropped": ["a", "b"], "forward": {}}
    lines = stock_check.describe(report, None, 1)
    assert "  never loads 1 parameter: model.norm.weight" in lines
    assert "  drops 2 checkpoint tensors: a, b" in lines
