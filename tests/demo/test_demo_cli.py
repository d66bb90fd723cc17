"""`sglang-eagle demo`, the README's main command, end to end on CPU: it reuses the session's
tiny models (built with the demo's own settings), serves them with stock SGLang and reports a
lossless output and an acceptance length above one token per verify step."""

import os
import re

from sglang_eagle_ext.cli import main


def test_demo_runs_and_is_lossless(shared_target, shared_drafter, tmp_path, capsys):
    workdir = tmp_path / "demo"
    workdir.mkdir()
    os.symlink(shared_target, workdir / "target")
    os.symlink(shared_drafter, workdir / "drafter-2layer")
    assert main(["demo", "--workdir", str(workdir), "--device", "cpu", "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert "output equals plain greedy decoding: yes" in out
    assert "served by sglang_eagle_ext.sglang.model.LlamaForCausalLMEagle3" in out
    accept = float(re.search(r"acceptance length: ([0-9.]+)", out).group(1))
    assert 1.0 < accept <= 4.0  # 3 draft steps: at most 4 tokens per verify


def test_demo_on_cuda_without_a_gpu_says_so(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["demo", "--workdir", str(tmp_path), "--device", "cuda"]) == 2
    assert "no CUDA GPU is visible" in capsys.readouterr().err


def test_gpu_engine_options_exist_in_the_installed_release():
    # ServerArgs turned from a dataclass into a msgspec Struct in SGLang 0.5.20 and its CUDA graph
    # options were renamed: every option the GPU demo passes must be one this release takes
    from sglang.srt.server_args import ServerArgs

    from sglang_eagle_ext.demo.run import PROMPTS, engine_options
    from sglang_eagle_ext.sglang.compat.runtime import server_option_names

    options = engine_options("cuda", "triton")
    names = server_option_names()
    assert "dtype" in names and set(options) <= names
    assert options["dtype"] == "bfloat16" and options["cuda_graph_max_bs_decode"] == len(PROMPTS)
    assert options["disable_prefill_cuda_graph"] and options["cuda_graph_bs_decode"] == [1, 2]
    ServerArgs(model_path="unused", **options)  # the release accepts them as given


def test_demo_on_a_given_target_checks_against_plain_sglang(shared_target, shared_drafter, capsys):
    # --target/--drafter: the path the GPU runs on SmolLM2 with a trained drafter, here on the tiny
    # models (no chat template: the prompts go as written); two SGLang runs, speculative and plain
    assert main(["demo", "--target", str(shared_target), "--drafter", str(shared_drafter), "--device", "cpu",
                 "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert out.count("against plain decoding: equal") == 3, out
    assert "output equals plain decoding: yes\n" in out
    accept = float(re.search(r"acceptance length: ([0-9.]+)", out).group(1))
    assert 1.0 < accept <= 4.0


def test_demo_target_needs_a_drafter_and_a_valid_one(shared_target, tmp_path, capsys):
    assert main(["demo", "--target", str(shared_target), "--device", "cpu"]) == 2
    assert "--target and --drafter go together" in capsys.readouterr().err
    (tmp_path / "config.json").write_text("{}")
    assert main(["demo", "--target", str(shared_target), "--drafter", str(tmp_path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "Traceback" not in err


def test_departures_from_plain_decoding_are_judged_by_plain_decodings_margin():
    from sglang_eagle_ext.demo.run import NEAR_TIE, ServedRun, agreement_with_plain

    def run(outputs):
        return ServedRun({}, outputs, [])

    plain = run([{"output_ids": [5, 6, 7], "top2": [[-0.1, -3.0], [-0.5, -0.5 - NEAR_TIE / 2], [-0.2, -4.0]]}] * 3)
    ours = run([{"output_ids": [5, 6, 7]}, {"output_ids": [5, 9, 7]}, {"output_ids": [5, 6, 8]}])
    verdicts = agreement_with_plain(ours, plain)
    assert verdicts[0] == "equal"
    assert verdicts[1].startswith("near-tie at token 1")
    assert verdicts[2] == "DIFFERS at token 2"
