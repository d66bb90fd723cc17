"""Counts read as English wherever the package prints them: one parameter, two parameters (issue 36
found `inspect` printing "never loads 1 parameters"). Each message that counts goes through
``errors.counted``."""

import json

import pytest

from sglang_eagle_ext.cli import main
from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.errors import DrafterError, Problem, counted
from sglang_eagle_ext.sglang import stock_check
from tests.kit import fixtures


def test_counted_is_singular_for_one_only():
    assert [counted(n, "parameter") for n in (0, 1, 2)] == ["0 parameters", "1 parameter", "2 parameters"]


def test_one_problem():
    assert str(DrafterError([Problem("f", "k", "m", "fix")])).startswith("drafter checkpoint rejected (1 problem):")


@pytest.mark.parametrize("count", [1, 2])
def test_stock_verdict_counts(count):
    """The stock check's lines on a drafter stock builds with ``count`` layers, parameters it never
    loads (holding uninitialised memory) and checkpoint tensors it drops."""
    names = [f"model.layers.{i}.hidden_norm.weight" for i in range(count)]
    report = {"checked": True, "sglang": "0.5.23", "loads": True, "built_class": "LlamaForCausalLMEagle3",
              "depth": count, "never_loaded": names, "uninitialised": names, "dropped": names}
    text = "\n".join(stock_check.describe(report, None, count))
    plural = "" if count == 1 else "s"
    assert f"with {count} layer{plural}\n" in text
    assert f"never loads {count} parameter{plural}:" in text
    assert f"{count} of them {'holds' if count == 1 else 'hold'} uninitialised memory" in text
    assert f"drops {count} checkpoint tensor{plural}:" in text


def test_a_config_claiming_one_layer_of_two(tmp_path):
    directory = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    config_file = tmp_path / "d" / "config.json"
    config = json.loads(config_file.read_text())
    config["transformer_layer_config"]["num_hidden_layers"] = 1
    config_file.write_text(json.dumps(config))
    with pytest.raises(DrafterError, match="the config says 1 draft layer, the weights hold 2"):
        read_drafter(directory)


def test_serve_names_one_layer(tmp_path, capsys):
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(fixtures.target_config()))
    draft = fixtures.build("F1-specforge", str(tmp_path / "d"))
    assert main(["serve", "--target", str(target), "--draft", draft, "--device", "cpu", "--print-only"]) == 0
    drafter_line = next(line for line in capsys.readouterr().out.splitlines() if " dialect, " in line)
    assert ", 1 layer, " in drafter_line


def test_the_demos_result_line():
    from sglang_eagle_ext.demo.run import ServedRun

    one = ServedRun({}, [{"completion_tokens": 1, "spec_verify_ct": 1}], [])
    assert one.acceptance_line(1) == "acceptance length: 1.00 tokens per verify step (1 token, 1 draft step, chain)"
    two = ServedRun({}, [{"completion_tokens": 6, "spec_verify_ct": 2}] * 2, [])
    assert two.acceptance_line(3).endswith("(12 tokens, 3 draft steps, chain)")
