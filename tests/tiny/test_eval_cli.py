"""`sglang-eagle eval`: a distilled drafter against copies with wrong aux ids / vocab map."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from sglang_eagle_ext import cpu_shims
from sglang_eagle_ext.cli import main
from sglang_eagle_ext.tiny.distill import DistillSettings, build_tiny_drafter
from sglang_eagle_ext.tiny.target import TinyTargetSettings, build_tiny_target

cpu_shims.install()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    target = build_tiny_target(str(root / "target"), TinyTargetSettings(num_layers=8))
    right = build_tiny_drafter(str(root / "right"), target, DistillSettings(
        num_sequences=64, new_tokens=32, train_steps=80, batch_size=16, ttt_steps=1))
    wrong_map = str(root / "wrong_map")
    shutil.copytree(right, wrong_map)
    tensors = load_file(f"{wrong_map}/model.safetensors")
    ids = torch.arange(tensors["d2t"].numel()) + tensors["d2t"]
    shuffled = ids[torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(0))]
    tensors["d2t"] = shuffled - torch.arange(ids.numel())
    save_file(tensors, f"{wrong_map}/model.safetensors")
    return target, right, wrong_map


def evaluate(capsys, target, draft, *extra):
    assert main(["eval", "--target", target, "--draft", draft, "--num-prompts", "3",
                 "--max-new-tokens", "24", "--topk", "2", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_right_drafter_accepts_and_wrong_ones_collapse(models, capsys):
    target, right, wrong_map = models
    good = evaluate(capsys, target, right)
    assert set(good["rows"]) == {"chain greedy", "chain sampled", "tree greedy", "tree sampled"}
    assert good["aux_indices"] == [2, 4, 5]
    wrong_aux = evaluate(capsys, target, right, "--aux-layers", "1,6,8")
    shuffled = evaluate(capsys, target, wrong_map)
    # The CI-sized drafter (80 steps) is too weak to separate right from wrong aux ids reliably;
    # the override must reach the capture, and a shuffled vocabulary map must collapse.
    assert wrong_aux["aux_indices"] == [1, 6, 8]
    for row in ("chain greedy", "tree greedy"):
        assert shuffled["rows"][row]["accept_length"] < 1.1, (row, shuffled)
        assert good["rows"][row]["verify_steps"] > 0


def test_table_and_failures(models, capsys, tmp_path):
    target, right, _ = models
    assert main(["eval", "--target", target, "--draft", right, "--num-prompts", "1",
                 "--max-new-tokens", "6", "--num-steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "accept length" in out and "tree sampled" in out
    assert main(["eval", "--target", target, "--draft", str(tmp_path)]) == 1
    assert "config.json" in capsys.readouterr().err
    assert main(["eval", "--target", target, "--draft", right, "--aux-layers", "1,2,99"]) == 1
    assert "do not exist" in capsys.readouterr().err
