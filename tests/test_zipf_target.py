"""The end-to-end benchmark's target (benchmarks/gpu/zipf_target.py) has the next-token
distributions it reports: after its rewrite of a dummy-initialised Llama, HF transformers' own
forward gives, after every token, the logits of that token's class profile. Its drafter
(benchmarks/gpu/zipf_drafter.py), read by this package and run by the float64 reference drafter on
the aux states HF captures, drafts those same profiles, in prefill, chain and tree steps."""

import json
import math
import statistics
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from tests.script_module import ROOT, load_siblings

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.reference.acceptance import DraftSettings, speculative_generate
from sglang_eagle_ext.reference.capture import CapturingTarget
from sglang_eagle_ext.reference.drafter import DraftCache, ReferenceDrafter, _rope, _rotate
from tests.kit.matched_drafter import build_matched_drafter

# zipf_drafter imports zipf_target, which imports verify_workload, all by bare name
_, zipf_target, zipf_drafter = load_siblings("benchmarks/gpu", "verify_workload", "zipf_target", "zipf_drafter")


def dummy_llama(vocab: int, hidden: int, layers: int, heads: int = 4, kv_heads: int = 2):
    """A Llama with every weight drawn as SGLang's ``dummy`` loader draws them (uniform +-1e-3)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
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


def test_tensor_parallel_shards_hold_the_whole_models_rows():
    """Under tensor parallelism each rank's embedding and lm_head hold a slice of the vocabulary
    (SGLang's ``shard_indices``, padded rows after it): the shards rewritten rank by rank are the
    unsharded rewrite's rows, and the padding is left alone."""
    vocab, hidden, seed, ranks = 3000, 64, 7, 2
    whole = dummy_llama(vocab, hidden, layers=1)
    zipf_target.shape_target(whole, seed)
    per_rank, padded = vocab // ranks, vocab // ranks + 8
    for rank in range(ranks):
        start, end = rank * per_rank, (rank + 1) * per_rank
        indices = SimpleNamespace(org_vocab_start_index=start, org_vocab_end_index=end)
        layers = {name: SimpleNamespace(weight=torch.full((padded, hidden), 5.0), shard_indices=indices)
                  for name in ("embed", "head")}
        model = SimpleNamespace(config=SimpleNamespace(vocab_size=vocab), lm_head=layers["head"],
                                model=SimpleNamespace(embed_tokens=layers["embed"], norm=SimpleNamespace(
                                    weight=torch.zeros(hidden))))
        zipf_target.shape_target(model, seed)
        torch.testing.assert_close(layers["embed"].weight[:per_rank], whole.model.embed_tokens.weight[start:end])
        torch.testing.assert_close(layers["head"].weight[:per_rank], whole.lm_head.weight[start:end])
        assert (layers["head"].weight[per_rank:] == 5.0).all() and (layers["embed"].weight[per_rank:] == 5.0).all()
        assert (model.model.norm.weight == 1.0).all()


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


def zipf_pair(tmp_path, seed: int, vocab=3000, hidden=256, heads=8, kv_heads=4, layers=4, draft_vocab=1000,
              drafter_layers=1):
    """The zipf target (HF, float32) and its drafter as this package reads it, run in float64."""
    target = dummy_llama(vocab, hidden, layers, heads, kv_heads)
    zipf_target.shape_target(target, seed)
    target_dir = tmp_path / "target"
    target_dir.mkdir()
    (target_dir / "config.json").write_text(target.config.to_json_string())
    path = build_matched_drafter(str(tmp_path / "drafter"), str(target_dir), layers=drafter_layers, num_aux=3,
                                 fc_norm=False,
                                 dialect="specforge", draft_vocab=draft_vocab,
                                 shape=zipf_drafter.shaper(seed, "cpu"))
    checkpoint = read_drafter(path, target=str(target_dir))
    drafter = ReferenceDrafter.from_tensors(checkpoint.spec, checkpoint.load_tensors(torch.float64),
                                            target_embed=target.model.embed_tokens.weight.detach().double())
    indices = checkpoint.spec.aux_layers.hidden_state_indices(layers)
    return CapturingTarget(target, indices), drafter


def profile_over_draft_vocab(drafter, seed, hidden, vocab, tokens):
    profiles, _ = zipf_target.profiles_and_basis(hidden, vocab, seed, "cpu")
    draft_ids = drafter.to_target_ids(torch.arange(drafter.spec.draft_vocab_size))
    return profiles[tokens % zipf_target.CLASSES][..., draft_ids].double()


@pytest.mark.parametrize("seed, drafter_layers", [(3, 1), (1234, 1), (11, 3)])
def test_zipf_drafter_drafts_the_profile_of_the_token_it_continues(tmp_path, seed, drafter_layers):
    hidden, vocab = 256, 3000
    target, drafter = zipf_pair(tmp_path, seed, drafter_layers=drafter_layers)
    ids = torch.randint(0, vocab, (2, 40), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        captured = target(ids)
        cache = DraftCache()
        # prefill as SGLang runs it: position p holds the target's state there and the next token
        out = drafter(ids[:, 1:], torch.arange(39), aux=captured.aux[:, :-1].double(), cache=cache)
        # position 0 has no previous token to cancel (never drafted from)
        expected = profile_over_draft_vocab(drafter, seed, hidden, vocab, ids[:, 2:])
        torch.testing.assert_close(out.logits[:, 1:], expected, atol=2e-3, rtol=0)
        # a tree step: two children of the last token at one position, each seeing only the prefix
        children = torch.tensor([[5, 70]]).expand(2, 2)  # classes 5 and 6
        carried = out.carried[:, -1:].expand(2, 2, hidden)
        sees = torch.cat([torch.ones(2, len(cache), dtype=torch.bool), torch.eye(2, dtype=torch.bool)], dim=1)
        step = drafter(children, torch.tensor([39, 39]), carried=carried, cache=cache, attend=sees)
        torch.testing.assert_close(step.logits, profile_over_draft_vocab(drafter, seed, hidden, vocab, children),
                                   atol=2e-3, rtol=0)
        # their children one position on, each seeing the prefix and its own parent
        grandchildren = torch.tensor([[131, 2]]).expand(2, 2)  # classes 3 and 2
        sees = torch.cat([torch.ones(2, len(cache) - 2, dtype=torch.bool), torch.eye(2, dtype=torch.bool),
                          torch.eye(2, dtype=torch.bool)], dim=1)
        step = drafter(grandchildren, torch.tensor([40, 40]), carried=step.carried, cache=cache, attend=sees)
        torch.testing.assert_close(step.logits,
                                   profile_over_draft_vocab(drafter, seed, hidden, vocab, grandchildren),
                                   atol=2e-3, rtol=0)


def test_zipf_drafter_is_accepted_greedily(tmp_path):
    """The reference speculative loop (the target verifies greedily): a chain is accepted whole at
    every step; in a tree the first level's best draft always is (deeper greedy paths may fall
    outside a 5-node tree)."""
    target, drafter = zipf_pair(tmp_path, seed=5)
    chain = speculative_generate(target, drafter, list(range(100, 116)), 24, DraftSettings(num_steps=3))
    assert chain.accept_lengths and chain.accept_lengths == [4] * len(chain.accept_lengths)
    tree = speculative_generate(target, drafter, list(range(200, 216)), 24,
                                DraftSettings(num_steps=3, topk=2, num_draft_tokens=6))
    assert min(tree.accept_lengths) >= 2 and max(tree.accept_lengths) == 4


def test_zipf_drafter_attention_peaks_beat_every_other_key_by_the_margin():
    """q and k as the drafter writes them, rotated by the reference's own RoPE: the self head peaks at
    distance 0 and the previous-token head at distance 1, SCORE_MARGIN above any key up to MAX_DISTANCE."""
    head_dim = 128  # the served geometry's
    inverse, factor = _rope(SimpleNamespace(rope_scaling=None, rope_theta=zipf_drafter.ROPE_THETA, head_dim=head_dim))
    positions = torch.arange(zipf_drafter.MAX_DISTANCE + 1, dtype=torch.float64)
    angles = torch.cat([positions[:, None] * inverse] * 2, dim=-1)
    cos, sin = angles.cos() * factor, angles.sin() * factor
    q_self, q_previous, key = zipf_drafter.query_key_vectors(head_dim)
    keys = _rotate(key.expand(len(positions), head_dim), cos, sin)
    last = len(positions) - 1
    for query, peak in ((q_self, last), (q_previous, last - 1)):
        scores = keys @ _rotate(query[None], cos[last:], sin[last:])[0] / math.sqrt(head_dim)
        others = torch.cat([scores[:peak], scores[peak + 1:]])
        assert int(scores.argmax()) == peak
        assert float(scores[peak] - others.max()) >= zipf_drafter.SCORE_MARGIN - 1e-6


def test_checkpoint_files_are_the_target_any_engine_loads(tmp_path):
    """zipf_checkpoint.py's files, the side-by-side's target for an engine without SGLang's plugin, read
    by HF transformers' own loader: after every token the logits are its class profile (to bf16 rounding),
    every other weight lies in the dummy loader's range, the index names every weight, and the drafter
    beside it is one this package reads, over the target's vocabulary."""
    from transformers import LlamaForCausalLM

    run = subprocess.run([sys.executable, "benchmarks/gpu/zipf_checkpoint.py", str(tmp_path), "--smoke",
                          "--device", "cpu"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    target = tmp_path / "models" / "target"
    config = json.loads((target / "config.json").read_text())
    model = LlamaForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    vocab, hidden = config["vocab_size"], config["hidden_size"]
    tokens = torch.randint(0, vocab, (2, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        logits = model(input_ids=tokens).logits
    profiles, _ = zipf_target.profiles_and_basis(hidden, vocab, 1234, "cpu")  # fused_verify_e2e.SEED
    torch.testing.assert_close(logits, profiles[tokens % zipf_target.CLASSES], atol=0.08, rtol=0)
    index = json.loads((target / "model.safetensors.index.json").read_text())
    weights = dict(model.named_parameters())
    assert set(index["weight_map"]) == set(weights)
    rewritten = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    for name, weight in weights.items():
        if name not in rewritten:
            assert 0 < weight.abs().max() <= 1.01e-3 and weight.std() > 1e-4, name
    drafter = read_drafter(str(tmp_path / "models" / "drafter"))
    assert drafter.spec.vocab_size == vocab and drafter.spec.draft_vocab_size == 1024
