"""stock_check says "not checked" (never a traceback, never a guess) when stock's code cannot run.

What it finds when it can run is checked against the reference drafter in
tests/test_stock_vs_plugin.py and tests/cli/test_inspect.py."""

from sglang_eagle_ext.sglang import stock_check
from tests.kit import fixtures


def test_no_sglang_installed_is_not_checked(monkeypatch, tmp_path):
    monkeypatch.setattr(stock_check, "_installed_sglang", lambda: None)
    report = stock_check.stock_report(str(tmp_path), None)
    assert report == {"checked": False, "reason": "SGLang is not installed"}
    assert stock_check.describe(report, [2, 6, 9], 1) == ["stock SGLang: not checked (SGLang is not installed)"]
    assert stock_check.same_as_plugin(report, [2, 6, 9]) is None


def test_release_outside_the_supported_range_is_not_checked(monkeypatch, tmp_path):
    monkeypatch.setattr(stock_check, "_installed_sglang", lambda: "0.5.24")
    report = stock_check.stock_report(str(tmp_path), None)
    assert not report["checked"] and "SGLang 0.5.24 is outside" in report["reason"]


def test_time_bound_is_not_checked(tmp_path):
    directory = fixtures.build("F1-specforge", str(tmp_path / "d"), seed=3)
    report, = stock_check.check_many([(directory, None)], time_limit_s=0.5)
    assert report == {"checked": False, "reason": "stock SGLang's check took longer than 0.5 s"}


def test_order_of_captured_layers_never_makes_stock_disagree():
    report = {"checked": True, "loads": True, "never_loaded": [], "dropped": [], "target_captures": [2, 29, 16],
              "eagle_config_ids": [1, 28, 15], "forward": {"compared": True, "equal": True}}
    assert stock_check.same_as_plugin(report, [2, 16, 29]) is True
    assert stock_check.same_as_plugin({**report, "target_captures": [2, 29, 15]}, [2, 16, 29]) is False


def test_an_operator_without_a_cpu_kernel_is_the_hosts_limit_not_stocks_failure():
    # A GPU build of sgl_kernel registers rmsnorm for CUDA only: torch's dispatcher refuses CPU tensors.
    import torch

    library = torch.library.Library("stock_check_test", "DEF")
    library.define("rmsnorm(Tensor x) -> Tensor")
    library.impl("rmsnorm", lambda x: x, "Meta")
    try:
        torch.ops.stock_check_test.rmsnorm(torch.randn(2, generator=torch.Generator().manual_seed(0)))
    except NotImplementedError as exc:
        missing_kernel = exc
    finally:
        del library
    forward = stock_check.forward_failure(missing_kernel)
    assert forward["compared"] is False and "stock_check_test::rmsnorm" in forward["reason"]
    report = {"checked": True, "sglang": "0.5.23", "loads": True, "built_class": "LlamaForCausalLMEagle3", "depth": 1,
              "never_loaded": [], "dropped": [], "forward": forward}
    lines = stock_check.describe(report, None, 1)
    assert not any("fails" in line for line in lines) and lines[-1] == "  verdict: not fully checked"
    assert stock_check.same_as_plugin(report, None) is None

    # stock's own code raising is a failure of stock, with its error quoted
    failed = stock_check.forward_failure(RuntimeError("shape '[4, 2, 16]' is invalid for input of size 96"))
    assert failed["compared"] is True and failed["equal"] is False and "is invalid" in failed["error"]
    assert any(line.startswith("  forward fails: RuntimeError") for line in
               stock_check.describe({**report, "forward": failed}, None, 1))


def test_the_architecture_stock_builds_with_is_an_edit_of_the_drafters_config(tmp_path):
    """Stock refuses NeMo's architecture; its report names the config.json edit that makes it build
    its EAGLE-3 class (``--json-model-override-args`` would change the target's config too), and
    stock's own loader, run on a copy with that edit written, builds the same class with it."""
    import json

    from tests.kit import code_layouts
    from tests.script_module import load_siblings

    _, acceptance = load_siblings("scripts", "readme_numbers", "stock_vs_plugin_acceptance")
    directory = code_layouts.build("nemo-eagle3.1", str(tmp_path / "nemo"), seed=4)
    edit = {"architectures": [stock_check.BUILTIN_DRAFT]}
    edited = acceptance.with_config_edit(directory, edit)
    report, on_edited = stock_check.check_many([(directory, None), (edited, None)])
    assert json.loads(report["built_with"]) == edit and report["resolves_to"].startswith("TransformersForCausalLM")
    assert "built_with" not in on_edited and on_edited["resolves_to"] == stock_check.BUILTIN_DRAFT
    for key in ("built_class", "depth", "never_loaded", "dropped"):
        assert on_edited[key] == report[key], key


def test_without_a_target_the_embedding_stock_takes_from_it_is_not_called_never_loaded(tmp_path):
    """SGLang's EAGLE worker gives the draft the target's embedding; with no target to hand the
    check shares a stand-in of the shape the draft's config names, so a SpecForge 1-layer drafter
    (no ``embed_tokens`` in its file) is not called misread: with the forward not compared, the
    verdict is "not fully checked"."""
    directory = fixtures.build("F1-specforge", str(tmp_path / "specforge"), seed=3)
    report, = stock_check.check_many([(directory, None)])
    assert report["never_loaded"] == [] and report["shared_from_target"] == ["model.embed_tokens.weight"]
    assert stock_check.same_as_plugin(report, None) is None
    assert stock_check.describe(report, None, 1)[-1] == "  verdict: not fully checked"


def test_a_failure_on_this_packages_side_is_not_checked_never_stocks(tmp_path, monkeypatch, no_grad):
    """When the reference drafter (this package's side of the forward check) raises, the forward is
    "not checked" with the cause, stock's forward is not run, and the verdict blames no one."""
    from sglang_eagle_ext.sglang import draft_forward

    def broken(checkpoint, gen):
        raise RuntimeError("expected m1 and m2 to have the same dtype")

    monkeypatch.setattr(draft_forward, "worker_inputs", broken)
    directory = fixtures.build("F1-specforge", str(tmp_path / "specforge"), seed=3)
    target = dict(source="<config object>", model_type="llama", num_layers=fixtures.TARGET_LAYERS,
                  hidden_size=64, vocab_size=fixtures.target_config()["vocab_size"])
    report = stock_check.stock_report(directory, target)
    forward = report["forward"]
    assert forward["compared"] is False and forward["reason"].startswith("not checked: this package's side")
    assert "same dtype" in forward["reason"]
    lines = stock_check.describe(report, None, 1)
    assert lines[-1] == "  verdict: not fully checked" and not any("WRONGLY" in line for line in lines)


def test_a_drafter_stock_serves_right_only_after_the_architecture_edit_is_not_called_misread():
    """AngelSlim's `Eagle3LlamaForCausalLM` resolves to SGLang's Transformers fallback; built as its
    EAGLE-3 class (the config.json edit) stock computes the reference: the verdict says it cannot
    serve it as written, not that it serves it wrongly."""
    report = {"checked": True, "sglang": "0.5.23", "architectures": ["Eagle3LlamaForCausalLM"],
              "resolves_to": "TransformersForCausalLM (fallback)", "built_with": '{"architectures": ["X"]}',
              "loads": True, "built_class": "X", "depth": 1, "never_loaded": [], "dropped": [],
              "target_captures": [2, 4, 5], "eagle_config_ids": None, "forward": {"compared": True, "equal": True}}
    lines = stock_check.describe(report, [2, 4, 5], 1)
    assert lines[-1] == ("  verdict: stock cannot serve it as written; with the config.json edit above, the same "
                         "as this plugin")
    assert stock_check.same_as_plugin(report, [2, 4, 5]) is False  # as written, stock does not serve it
    differs = {**report, "forward": {"compared": True, "equal": False, "vocab_map_equal": True,
                                     "decode_argmax_equal": False, "max_abs_diff": dict.fromkeys(
                                         ("prefill_logits", "prefill_carried", "decode_logits", "decode_carried"),
                                         0.5)}}
    assert "WRONGLY" in stock_check.describe(differs, [2, 4, 5], 1)[-1]
