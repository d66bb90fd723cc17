import json
import os

import pytest
import torch

from sglang_eagle_ext.sglang.compat import cpu as cpu_shims
from sglang_eagle_ext.demo.markov import LaggedPairProcess
from sglang_eagle_ext.demo.tiny_target import (BUILD_RECORD, TinyTargetSettings, _alphabet,
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


def test_trained_target_continues_the_process(shared_target):
    """Greedy next token = the likely successor of the two tokens before the current one, on
    fresh process text, with top-1/top-2 margins far above bf16 rounding."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    settings = TinyTargetSettings()
    tokenizer = AutoTokenizer.from_pretrained(shared_target)
    model = AutoModelForCausalLM.from_pretrained(shared_target).eval()
    alphabet = _alphabet(tokenizer, settings.alphabet_size, settings.seed)
    process = LaggedPairProcess.random(alphabet, torch.Generator().manual_seed(settings.seed),
                                      settings.likely_successor)
    text = process.sample(16, 72, torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(text).logits[:, 2:-1]  # position t predicts token t + 1
    index = torch.searchsorted(alphabet, text)
    likely = alphabet[process.successors[index[:, :-3], index[:, 1:-2], 0]]
    assert (logits.argmax(-1) == likely).float().mean() > 0.95
    top = logits.topk(2, dim=-1).values
    assert (top[..., 0] - top[..., 1]).median() > 1.5  # ln(0.9 / 0.1) = 2.2 when learnt exactly
    # The later token of the pair alone leaves the successor open: all K of them are possible.
    for later in range(alphabet.numel()):
        assert process.successors[:, later, 0].unique().numel() == alphabet.numel()


def test_context_reaches_only_the_layers_after_the_context_layer(shared_target):
    """Hidden states up to index context_layer are functions of the position's own token (the
    same as for that token alone); from context_layer + 1 on they carry its neighbours."""
    from transformers import AutoModelForCausalLM

    from sglang_eagle_ext.reference.capture import CapturingTarget

    settings = TinyTargetSettings()
    model = AutoModelForCausalLM.from_pretrained(shared_target).eval()
    depth = settings.num_layers
    capture = CapturingTarget(model, range(depth + 1))
    # any token but the pad token, whose embedding is zero (no relative difference at index 0)
    tokens = torch.randint(0, model.config.vocab_size - 1, (3, 24), generator=torch.Generator().manual_seed(8))
    tokens += tokens >= model.config.pad_token_id
    with torch.no_grad():
        in_context = capture(tokens).aux.view(3, 24, depth + 1, -1)
        alone = capture(tokens.reshape(-1, 1)).aux.view(3, 24, depth + 1, -1)
    difference = ((in_context - alone).norm(dim=-1) / alone.norm(dim=-1)).amax((0, 1))
    local = settings.context_layer + 1
    assert difference[:local].max() < 1e-5, difference
    assert difference[local:].min() > 0.1, difference


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
