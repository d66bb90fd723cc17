import json
import os

import pytest
import torch

from sglang_eagle_ext import cpu_shims
from sglang_eagle_ext.tiny.target import BUILD_RECORD, TinyTargetSettings, build_tiny_target

cpu_shims.install()


def test_build_is_deterministic_and_loadable(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    first = build_tiny_target(tmp_path / "a", TinyTargetSettings(num_layers=4))
    second = build_tiny_target(tmp_path / "b", TinyTargetSettings(num_layers=4))
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        with open(os.path.join(first, name), "rb") as a, open(os.path.join(second, name), "rb") as b:
            assert a.read() == b.read(), name
    tokenizer = AutoTokenizer.from_pretrained(first)
    model = AutoModelForCausalLM.from_pretrained(first)
    assert model.config.num_hidden_layers == 4
    assert model.config.vocab_size == len(tokenizer)
    text = "The old sailor counts seven tokens."
    ids = tokenizer(text).input_ids
    assert tokenizer.decode(ids) == text  # byte-level BPE round-trips
    with torch.no_grad():
        probs = model(torch.tensor([ids])).logits.softmax(-1)
    entropy = -(probs * probs.log()).sum(-1).mean().item()
    assert entropy < 0.7 * torch.log(torch.tensor(float(len(tokenizer)))).item()  # peaked


def test_reuse_and_refusal(tmp_path):
    settings = TinyTargetSettings(num_layers=3, seed=1)
    path = build_tiny_target(tmp_path / "t", settings)
    stamp = os.stat(os.path.join(path, "model.safetensors")).st_mtime_ns
    assert build_tiny_target(tmp_path / "t", settings) == path
    assert os.stat(os.path.join(path, "model.safetensors")).st_mtime_ns == stamp
    with open(os.path.join(path, BUILD_RECORD)) as handle:
        assert json.load(handle)["seed"] == 1
    with pytest.raises(FileExistsError, match="other settings"):
        build_tiny_target(tmp_path / "t", TinyTargetSettings(num_layers=3, seed=2))
    (tmp_path / "foreign").mkdir()
    with pytest.raises(FileExistsError, match="no build record"):
        build_tiny_target(tmp_path / "foreign", settings)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tiny-target-")] == []


def test_qwen3_family(tmp_path):
    from transformers import AutoModelForCausalLM

    path = build_tiny_target(tmp_path / "q", TinyTargetSettings(family="qwen3", num_layers=2))
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.model_type == "qwen3"
    assert hasattr(model.model.layers[0].self_attn, "q_norm")
