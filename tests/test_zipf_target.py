"""The end-to-end benchmark's target (benchmarks/gpu/zipf_target.py) has the next-token
distributions it reports: after its rewrite of a dummy-initialised Llama, HF transformers' own
forward gives, after every token, the logits of that token's class profile."""

import math
import os
import statistics
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


@pytest.mark.parametrize("seed, hidden, dtype, atol", [
    (3, 128, torch.float32, 2e-3),
    (1234, 128, torch.float32, 2e-3),
    (5, 1024, torch.bfloat16, 0.08),  # as served: bf16 weights and activations (max error seen 0.047)
])
def test_logits_after_each_token_are_its_class_profile(seed, hidden, dtype, atol):
    vocab = 3000
    model = dummy_llama(vocab, hidden, layers=3)
    zipf_target.shape_target(model, seed)
    model = model.to(dtype)
    tokens = torch.randint(0, vocab, (2, 12), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        logits = model(input_ids=tokens).logits.float()  # [2, 12, vocab]
    profiles, _ = zipf_target.profiles_and_basis(hidden, vocab, seed, "cpu")
    expected = profiles[tokens % zipf_target.CLASSES]
    torch.testing.assert_close(logits, expected, atol=atol, rtol=0)


def test_profile_stats_match_a_float64_recount():
    hidden, vocab, seed, temperature = 64, 5000, 5, 0.7
    stats = zipf_target.profile_stats(hidden, vocab, seed=seed, temperature=temperature, device="cpu")
    profiles, _ = zipf_target.profiles_and_basis(hidden, vocab, seed, "cpu")
    entropy, top1, top50, nucleus = [], [], [], []
    for row in profiles.double():
        probs = sorted(torch.softmax(row / temperature, dim=-1).tolist(), reverse=True)
        entropy.append(-sum(p * math.log(p) for p in probs if p > 0))
        top1.append(probs[0])
        top50.append(sum(probs[:50]))
        total, size = 0.0, 0
        while total < 0.9:  # the smallest head holding 90 % of the mass
            total += probs[size]
            size += 1
        nucleus.append(size)
    assert stats["entropy_nats"]["mean"] == pytest.approx(statistics.mean(entropy), abs=1e-3)
    assert stats["entropy_nats"]["min"] == pytest.approx(min(entropy), abs=1e-3)
    assert stats["entropy_nats"]["max"] == pytest.approx(max(entropy), abs=1e-3)
    assert stats["top1_prob_mean"] == pytest.approx(statistics.mean(top1), abs=1e-3)
    assert stats["top50_mass_mean"] == pytest.approx(statistics.mean(top50), abs=1e-3)
    assert stats["top_p0.9_nucleus_median"] == statistics.median_low(nucleus)
