import json
import os

import pytest
import torch

from sglang_eagle_ext import cpu_shims
from sglang_eagle_ext.tiny.markov import PairProcess
from sglang_eagle_ext.tiny.target import (BUILD_RECORD, TinyTargetSettings, _alphabet,
                                          build_tiny_target)

cpu_shims.install()
BRIEF = dict(train_steps=12)  # training is exercised, not converged, where only files matter


def test_build_is_deterministic_and_loadable(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    settings = TinyTargetSettings(num_layers=2, **BRIEF)
    first = build_tiny_target(tmp_path / "a", settings)
    second = build_tiny_target(tmp_path / "b", settings)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        with open(os.path.join(first, name), "rb") as a, open(os.path.join(second, name), "rb") as b:
            assert a.read() == b.read(), name
    tokenizer = AutoTokenizer.from_pretrained(first)
    model = AutoModelForCausalLM.from_pretrained(first)
    assert model.config.num_hidden_layers == 2
    assert model.config.vocab_size == len(tokenizer)
    text = "The old sailor counts seven tokens."
    assert tokenizer.decode(tokenizer(text).input_ids) == text  # byte-level BPE round-trips


def test_trained_target_continues_the_pair_process(shared_target):
    """Greedy next token = the likely successor of the last two tokens, on fresh process text,
    with top-1/top-2 margins far above bf16 rounding."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    settings = TinyTargetSettings()
    tokenizer = AutoTokenizer.from_pretrained(shared_target)
    model = AutoModelForCausalLM.from_pretrained(shared_target).eval()
    alphabet = _alphabet(tokenizer, settings.alphabet_size, settings.seed)
    process = PairProcess.random(alphabet, torch.Generator().manual_seed(settings.seed))
    text = process.sample(16, 72, torch.Generator().manual_seed(int(torch.randint(1 << 30, ()))))
    with torch.no_grad():
        logits = model(text).logits[:, 1:-1]
    index = torch.searchsorted(alphabet, text)
    likely = alphabet[process.successors[index[:, :-2], index[:, 1:-1], 0]]
    assert (logits.argmax(-1) == likely).float().mean() > 0.95
    top = logits.topk(2, dim=-1).values
    assert (top[..., 0] - top[..., 1]).median() > 1.5  # ln(0.9 / 0.1) = 2.2 when learnt exactly
    # The rule is second order: the current token alone leaves the next one open.
    successors_of_b = {int(b): set() for b in range(alphabet.numel())}
    for a in range(alphabet.numel()):
        for b in range(alphabet.numel()):
            successors_of_b[b].add(int(process.successors[a, b, 0]))
    assert min(len(s) for s in successors_of_b.values()) >= 4


def test_reuse_and_refusal(tmp_path):
    settings = TinyTargetSettings(num_layers=1, seed=1, **BRIEF)
    path = build_tiny_target(tmp_path / "t", settings)
    stamp = os.stat(os.path.join(path, "model.safetensors")).st_mtime_ns
    assert build_tiny_target(tmp_path / "t", settings) == path
    assert os.stat(os.path.join(path, "model.safetensors")).st_mtime_ns == stamp
    with open(os.path.join(path, BUILD_RECORD)) as handle:
        assert json.load(handle)["seed"] == 1
    with pytest.raises(FileExistsError, match="other settings"):
        build_tiny_target(tmp_path / "t", TinyTargetSettings(num_layers=1, seed=2, **BRIEF))
    (tmp_path / "foreign").mkdir()
    with pytest.raises(FileExistsError, match="no build record"):
        build_tiny_target(tmp_path / "foreign", settings)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tiny-target-")] == []


def test_qwen3_family(tmp_path):
    from transformers import AutoModelForCausalLM

    path = build_tiny_target(tmp_path / "q", TinyTargetSettings(family="qwen3", num_layers=2,
                                                                **BRIEF))
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.model_type == "qwen3"
    assert hasattr(model.model.layers[0].self_attn, "q_norm")
