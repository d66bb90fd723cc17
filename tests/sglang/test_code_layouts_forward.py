"""Drafters laid out as producers' own code writes them (tests/kit/code_layouts.py), served through
SGLang's loader on CPU: equal to the reference drafter, and, for EAGLE 3.1's ``norm_output``, equal
to a forward written here from each producer's training code, independently of the package.

SpecForge (sgl-project/SpecForge@a6b6b023, specforge/algorithms/eagle3/model.py:386-400 and
specforge/modeling/draft/llama3_eagle.py:1772-1777) carries the draft layer's output to the next
step as it is and applies the final norm only in front of lm_head; NeMo Automodel
(NVIDIA-NeMo/Automodel@36044ad3, nemo_automodel/components/speculative/eagle/draft_llama.py:934-941
and 870-872) carries the normed state and feeds the same to lm_head.
"""

import pytest
import torch
import torch.nn.functional as F

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.drafter.target import read_target
from tests.kit import code_layouts, fixtures
from sglang_eagle_ext.sglang.draft_forward import TOKENS, DraftRunner
from tests.kit.sglang_forward import assert_forward_matches_reference, build_draft


def _target(name):
    config = fixtures.target_config()
    config["model_type"] = "gpt_oss" if "gpt-oss" in name else "llama"
    return read_target(config)


@pytest.mark.parametrize("name", sorted(code_layouts.SERVED))
def test_served_layouts_match_the_reference(name, tmp_path, sglang_dist, no_grad):
    directory = code_layouts.build(name, str(tmp_path / "drafter"), seed=len(name))
    assert_forward_matches_reference(directory, _target(name), seed=len(name) + 1)


# ----------------------------------------------------------- norm_output, computed independently


def _rms(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate(x, positions, theta):
    """Rotary embedding of HF Llama (rotate_half over the two halves of each head)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv[None]
    cos, sin = torch.cat([angles.cos()] * 2, -1).float(), torch.cat([angles.sin()] * 2, -1).float()
    half = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos[:, None] + half * sin[:, None]


class ProducerDraft:
    """EAGLE 3.1's single draft layer over one sequence, written from the producers' code:
    ``h' = h + attn([input_layernorm(embed); hidden_norm(h)])``, ``out = h' + mlp(post_norm(h'))``;
    ``carry_normed`` picks what the next step gets (and what lm_head reads, through the norm)."""

    def __init__(self, w, spec, embed, carry_normed):
        self.w, self.spec, self.embed, self.carry_normed = w, spec, embed, carry_normed
        self.keys, self.values = [], []

    def _attention(self, x, positions):
        s, w = self.spec, self.w
        q = (x @ w["layers.0.self_attn.q_proj.weight"].T).view(len(x), s.num_attention_heads, s.head_dim)
        k = (x @ w["layers.0.self_attn.k_proj.weight"].T).view(len(x), s.num_key_value_heads, s.head_dim)
        v = (x @ w["layers.0.self_attn.v_proj.weight"].T).view(len(x), s.num_key_value_heads, s.head_dim)
        q, k = _rotate(q, positions, s.rope_theta), _rotate(k, positions, s.rope_theta)
        self.keys.append(k)
        self.values.append(v)
        keys, values = torch.cat(self.keys), torch.cat(self.values)
        group = s.num_attention_heads // s.num_key_value_heads
        keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", q, keys) / s.head_dim ** 0.5
        past = len(keys) - len(x)
        visible = torch.arange(len(keys))[None, :] <= (past + torch.arange(len(x)))[:, None]
        probs = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        out = torch.einsum("hqk,khd->qhd", probs, values).reshape(len(x), -1)
        return out @ w["layers.0.self_attn.o_proj.weight"].T

    def step(self, ids, positions, hidden):
        w, eps = self.w, self.spec.rms_norm_eps
        x = torch.cat([_rms(self.embed[ids], w["layers.0.input_layernorm.weight"], eps),
                       _rms(hidden, w["layers.0.hidden_norm.weight"], eps)], -1)
        h = hidden + self._attention(x, positions)
        m = _rms(h, w["layers.0.post_attention_layernorm.weight"], eps)
        out = h + (F.silu(m @ w["layers.0.mlp.gate_proj.weight"].T) * (m @ w["layers.0.mlp.up_proj.weight"].T)
                   ) @ w["layers.0.mlp.down_proj.weight"].T
        normed = _rms(out, w["norm.weight"], eps)
        return normed @ w["lm_head.weight"].T, normed if self.carry_normed else out

    def fc(self, aux):
        chunks = aux.chunk(3, -1)
        normed = [_rms(c, self.w[f"fc_norm.{j}.weight"], self.spec.rms_norm_eps) for j, c in enumerate(chunks)]
        return torch.cat(normed, -1) @ self.w["fc.weight"].T


@pytest.mark.parametrize("name, carry_normed", [("specforge-eagle3.1", False), ("specforge-no-norm-output-key", False),
                                                ("nemo-eagle3.1", True)])
def test_norm_output_follows_each_producer(name, carry_normed, tmp_path, sglang_dist, no_grad):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    seed = 5  # the same weights under each producer's names and config
    directory = code_layouts.build(name, str(tmp_path / "drafter"), seed=seed)
    target = _target(name)
    checkpoint = read_drafter(directory, target=target)
    spec = checkpoint.spec
    assert spec.norm_output is carry_normed
    weights = checkpoint.load_tensors()
    gen = torch.Generator().manual_seed(seed)
    embed = weights.get("embed_tokens.weight", torch.randn(spec.vocab_size, spec.hidden_size, generator=gen))
    ids = torch.randint(0, spec.vocab_size, (TOKENS + 1,), generator=gen)
    aux = torch.randn(TOKENS, 3 * spec.target_hidden_size, generator=gen)

    producer = ProducerDraft(weights, spec, embed, carry_normed)
    logits, carried = producer.step(ids[:TOKENS], torch.arange(TOKENS), producer.fc(aux))
    decode_logits, decode_carried = producer.step(ids[TOKENS:], torch.tensor([TOKENS]), carried[-1:])

    model = build_draft(directory, target)
    model.set_embed(embed)
    runner = DraftRunner(spec)
    vocab = spec.draft_vocab_size
    prefill = runner.forward(model, ForwardMode.EXTEND, ids[:TOKENS], aux, prefix=0)
    torch.testing.assert_close(prefill.next_token_logits[0, :vocab], logits[-1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(prefill.hidden_states, carried, rtol=1e-5, atol=1e-5)
    decode = runner.forward(model, ForwardMode.DECODE, ids[TOKENS:], prefill.hidden_states[-1:], prefix=TOKENS)
    torch.testing.assert_close(decode.next_token_logits[0, :vocab], decode_logits[-1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(decode.hidden_states, decode_carried, rtol=1e-5, atol=1e-5)

    # the other producer's reading of the same weights drafts something else from the second step on
    other = ProducerDraft(weights, spec, embed, not carry_normed)
    _, other_carried = other.step(ids[:TOKENS], torch.arange(TOKENS), other.fc(aux))
    other_logits, _ = other.step(ids[TOKENS:], torch.tensor([TOKENS]), other_carried[-1:])
    assert not torch.allclose(other_logits, decode_logits, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", ["angelslim-tied-config", "angelslim-tied-config-with-embed"])
def test_angelslim_drafts_with_its_own_lm_head(name, tmp_path, sglang_dist, no_grad):
    """Its config says tie_word_embeddings: true, but AngelSlim's draft model never ties: the head
    SGLang builds is the checkpoint's lm_head, not the embedding (own or the target's)."""
    directory = code_layouts.build(name, str(tmp_path / "drafter"), seed=9)
    head = read_drafter(directory).load_tensors()["lm_head.weight"]
    model = build_draft(directory, _target(name))
    model.set_embed(torch.randn(512, 64, generator=torch.Generator().manual_seed(9)))
    assert model.lm_head is not model.model.embed_tokens
    assert torch.equal(model.lm_head.weight[: head.shape[0]], head)
