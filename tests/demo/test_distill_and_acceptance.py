"""Distillation gives a drafter that the offline loop accepts; the loop is lossless."""

import pytest
import torch

from sglang_eagle_ext.reference.acceptance import DraftSettings, mean_accept_length, speculative_generate
from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.cli.eval_cmd import load
from sglang_eagle_ext.corpus import prompts
from sglang_eagle_ext.demo.distill import DistillSettings, build_tiny_drafter, built_with


def hf_greedy(model, prompt, count):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(count):
            ids = torch.cat([ids, model(ids).logits[:, -1:].argmax(-1)], 1)
    return ids[0, len(prompt):].tolist()


def fresh_prompts(tokenizer, count):
    return [tokenizer(t).input_ids for t in prompts(count, int(torch.randint(1 << 30, ())))]


def test_written_drafter_reads_back_and_is_reused(shared_target, shared_drafter):
    spec = read_drafter(shared_drafter, target=shared_target).spec
    assert spec.num_layers == 2 and spec.has_vocab_map and spec.draft_vocab_size == 256
    assert spec.aux_layers.hidden_state_indices(8) == (2, 4, 5)  # the default taps, written out
    assert built_with(shared_drafter) == DistillSettings()
    assert build_tiny_drafter(shared_drafter, shared_target) == shared_drafter  # reused


@pytest.mark.parametrize("settings", [DraftSettings(3, 1), DraftSettings(3, 3, 7)])
def test_greedy_speculation_equals_plain_greedy(shared_target, shared_drafter, settings):
    tokenizer, target, drafter = load(shared_target, shared_drafter, "cpu")
    prompt = fresh_prompts(tokenizer, 1)[0]
    result = speculative_generate(target, drafter, prompt, 20, settings)
    assert result.output == hf_greedy(target.model, prompt, len(result.output))
    assert sum(result.accept_lengths) == len(result.output) - 1
    assert all(1 <= n <= settings.tree_size + 1 for n in result.accept_lengths)


def test_trained_drafter_accepts_and_untrained_does_not(shared_target, shared_drafter):
    tokenizer, target, drafter = load(shared_target, shared_drafter, "cpu")
    chosen = fresh_prompts(tokenizer, 3)

    def accept_length():
        return mean_accept_length([speculative_generate(target, drafter, p, 32,
                                                        DraftSettings(3, 1)) for p in chosen])

    trained = accept_length()
    with torch.no_grad():
        for name, param in drafter.named_parameters():
            if name.startswith("layers.") or name.startswith("fc."):
                param.copy_(torch.randn_like(param) * 0.1)
    untrained = accept_length()
    assert trained >= 1.8 and untrained <= trained - 0.3, (trained, untrained)


def test_draft_settings_validation():
    with pytest.raises(ValueError, match="num_draft_tokens must be in"):
        DraftSettings(2, 2, num_draft_tokens=9)
    with pytest.raises(ValueError, match="temperature"):
        DraftSettings(temperature=-1)
