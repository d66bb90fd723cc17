"""Distillation gives a drafter that the offline loop accepts; the loop is lossless."""

import dataclasses

import pytest
import torch

from sglang_eagle_ext import cpu_shims
from sglang_eagle_ext.acceptance import DraftSettings, mean_accept_length, speculative_generate
from sglang_eagle_ext.checkpoint import read_drafter
from sglang_eagle_ext.cli.eval_cmd import load
from sglang_eagle_ext.tiny.distill import DistillSettings, build_tiny_drafter, built_with
from sglang_eagle_ext.tiny.target import TinyTargetSettings, build_tiny_target

cpu_shims.install()
FAST = DistillSettings(num_sequences=96, new_tokens=40, train_steps=120, batch_size=16)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill")
    target = build_tiny_target(str(root / "target"), TinyTargetSettings(num_layers=8))
    drafter = build_tiny_drafter(str(root / "drafter"), target, FAST)
    return target, drafter


def hf_greedy(model, prompt, count):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(count):
            ids = torch.cat([ids, model(ids).logits[:, -1:].argmax(-1)], 1)
    return ids[0, len(prompt):].tolist()


def test_written_drafter_reads_back_and_is_reused(models):
    target, drafter = models
    spec = read_drafter(drafter, target=target).spec
    assert spec.num_layers == 2 and spec.has_vocab_map and spec.draft_vocab_size == 256
    assert spec.aux_layers.hidden_state_indices(8) == (2, 4, 5)  # the default taps, written out
    assert built_with(drafter) == FAST
    assert build_tiny_drafter(drafter, target, FAST) == drafter  # reused, not retrained


@pytest.mark.parametrize("settings", [DraftSettings(3, 1), DraftSettings(3, 3, 7)])
def test_greedy_speculation_equals_plain_greedy(models, settings):
    target_dir, drafter_dir = models
    tokenizer, target, drafter = load(target_dir, drafter_dir, "cpu")
    prompt = tokenizer("The river remembers a paper boat.").input_ids
    result = speculative_generate(target, drafter, prompt, 20, settings)
    assert result.output == hf_greedy(target.model, prompt, len(result.output))
    assert sum(result.accept_lengths) == len(result.output) - 1
    assert all(1 <= n <= settings.tree_size + 1 for n in result.accept_lengths)


def test_trained_drafter_beats_untrained(models):
    target_dir, drafter_dir = models
    tokenizer, target, drafter = load(target_dir, drafter_dir, "cpu")
    prompts = [tokenizer(t).input_ids for t in ("The server accepts seven tokens.",
                                                 "My neighbour's cat draws the morning!")]
    trained = mean_accept_length([speculative_generate(target, drafter, p, 32, DraftSettings(3, 1))
                                  for p in prompts])
    with torch.no_grad():
        for name, param in drafter.named_parameters():
            if name.startswith("layers.") or name.startswith("fc."):
                param.copy_(torch.randn_like(param) * 0.1)
    untrained = mean_accept_length([speculative_generate(target, drafter, p, 32,
                                                         DraftSettings(3, 1)) for p in prompts])
    assert trained > untrained + 0.05, (trained, untrained)


def test_draft_settings_validation():
    with pytest.raises(ValueError, match="num_draft_tokens must be in"):
        DraftSettings(2, 2, num_draft_tokens=9)
    with pytest.raises(ValueError, match="temperature"):
        DraftSettings(temperature=-1)
