"""The end-to-end benchmark's target (benchmarks/gpu/zipf_target.py) has the next-token
distributions it reports: after its rewrite of a dummy-initialised Llama, HF transformers' own
forward gives, after every token, the logits of that token's class profile."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "gpu"))

import zipf_target  # noqa: E402


def dummy_llama(vocab: int, hidden: int, layers: int):
    """A Llama with every weight drawn as SGLang's ``dummy`` loader draws them (uniform +-1e-3)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         rms_norm_eps=1e-5, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.rand(parameter.shape, generator=gen) * 2e-3 - 1e-3)
    return model


@pytest.mark.parametrize("seed", [3, 1234])
def test_logits_after_each_token_are_its_class_profile(seed):
    vocab, hidden = 3000, 128
    model = dummy_llama(vocab, hidden, layers=3)
    zipf_target.shape_target(model, seed)
    tokens = torch.randint(0, vocab, (2, 12), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        logits = model(input_ids=tokens).logits  # [2, 12, vocab]
    profiles, _ = zipf_target.profiles_and_basis(hidden, vocab, seed, "cpu")
    expected = profiles[tokens % zipf_target.CLASSES]
    torch.testing.assert_close(logits, expected, atol=2e-3, rtol=1e-4)
    # the profiles differ between classes: the context (the last token) matters
    assert not torch.allclose(profiles[0], profiles[1])


def test_profile_stats_reports_the_entropy_of_those_logits():
    stats = zipf_target.profile_stats(64, 5000, seed=5, temperature=0.7, device="cpu")
    profiles, _ = zipf_target.profiles_and_basis(64, 5000, 5, "cpu")
    probs = torch.softmax(profiles.double() / 0.7, dim=-1)
    entropy = -(probs * probs.log()).sum(-1)
    assert stats["entropy_nats"]["mean"] == pytest.approx(float(entropy.mean()), abs=1e-3)
    assert stats["entropy_nats"]["min"] == pytest.approx(float(entropy.min()), abs=1e-3)
    assert stats["top1_prob_mean"] == pytest.approx(float(probs.max(-1).values.mean()), abs=1e-3)
