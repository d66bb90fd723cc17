"""The EAGLE-3 drafter in plain PyTorch, built from a :class:`DrafterSpec` (no SGLang).

The module tree mirrors the canonical tensor names of :mod:`sglang_eagle_ext.drafter.spec`, so
``state_dict()`` *is* a canonical checkpoint and ``load_state_dict`` takes
``DrafterCheckpoint.load_tensors()`` unchanged. Forward semantics::

    layer 0   r = fc(aux)            (decode steps: r = carried hidden, no fc)
              h = hidden_norm(input_layernorm(r) if hidden_input_layernorm else r)
              r = h if norm_before_residual
              r = r + attn(cat[input_layernorm(embed(x)), h]);  r = r + mlp(post_norm(r))
    layer i   r = r + attn(norm_i(r));  r = r + mlp(post_norm(r))
    out       logits = lm_head(norm(r));  carried = norm(r) if norm_output else r

with ``fc`` optionally preceded by one RMSNorm per aux chunk (``fc_norm``) or one over the whole
concatenation (``norm_before_fc``), and ``norm_i`` either ``input_layernorm`` or SGLang's
``hidden_norm`` (:class:`LaterLayerNorm`). Drafted ids are draft-vocabulary ids; ``to_target_ids``
applies ``d2t``.

Attention takes an explicit visibility mask over ``[cached keys ; new keys]`` so the same code
serves prefill, chain and tree drafting and EAGLE-3's training-time test.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from sglang_eagle_ext.drafter.spec import DrafterSpec, LaterLayerNorm

_ACTIVATIONS = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
}  # the names of GATED_ACTIVATIONS


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in at least fp32 (as every engine does), then scale in the weight's dtype.
        compute = torch.promote_types(x.dtype, torch.float32)
        y = x.to(compute)
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(self.weight.dtype)


def _rope(spec: DrafterSpec) -> tuple[torch.Tensor, float]:
    """RoPE inverse frequencies (float64) and the factor on cos and sin, for ``spec``'s scaling:
    transformers' own initialisation (linear, llama3, yarn, longrope, dynamic...), the
    reference every engine is checked against."""
    scaling = json.loads(spec.rope_scaling) if spec.rope_scaling else {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        exponents = torch.arange(0, spec.head_dim, 2, dtype=torch.float64) / spec.head_dim
        return 1.0 / (spec.rope_theta ** exponents), 1.0
    from transformers import PretrainedConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if kind not in ROPE_INIT_FUNCTIONS:
        raise NotImplementedError(f"{spec.path}: rope scaling {kind!r} is not one transformers knows "
                                  f"({', '.join(sorted(ROPE_INIT_FUNCTIONS))})")
    config = PretrainedConfig(
        hidden_size=spec.num_attention_heads * spec.head_dim, num_attention_heads=spec.num_attention_heads,
        head_dim=spec.head_dim, max_position_embeddings=spec.max_position_embeddings,
        rope_parameters={**scaling, "rope_type": kind, "rope_theta": spec.rope_theta})
    inverse, attention_factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    return inverse.double(), float(attention_factor)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)  # neox / HF layout
    return x * cos + rotated * sin


@dataclass
class DraftCache:
    """Keys and values of every position the drafter has seen, per layer: ``[B, kv_heads, S, d]``."""

    keys: list[torch.Tensor | None] = field(default_factory=list)
    values: list[torch.Tensor | None] = field(default_factory=list)
    positions: torch.Tensor | None = None  # [S] positions of the cached entries

    def __len__(self) -> int:
        return 0 if self.positions is None else int(self.positions.numel())

    def crop(self, length: int) -> None:
        """Forget every entry after the first ``length`` (drafted tokens that were not kept)."""
        self.keys = [k[:, :, :length] for k in self.keys]
        self.values = [v[:, :, :length] for v in self.values]
        self.positions = self.positions[:length]


def causal_mask(cached: int, new: int, device=None) -> torch.Tensor:
    """``[new, cached + new]``: every new token sees all cached entries and earlier new tokens."""
    return torch.cat([torch.ones(new, cached, dtype=torch.bool, device=device),
                      torch.ones(new, new, dtype=torch.bool, device=device).tril()], dim=1)


class Attention(nn.Module):
    def __init__(self, spec: DrafterSpec, in_features: int, sliding_window: int | None):
        super().__init__()
        self.spec = spec
        q_out = spec.num_attention_heads * spec.head_dim
        kv_out = spec.num_key_value_heads * spec.head_dim
        self.q_proj = nn.Linear(in_features, q_out, bias=spec.attention_bias)
        self.k_proj = nn.Linear(in_features, kv_out, bias=spec.attention_bias)
        self.v_proj = nn.Linear(in_features, kv_out, bias=spec.attention_bias)
        self.o_proj = nn.Linear(q_out, spec.hidden_size, bias=spec.o_proj_bias)
        if spec.layer_kind == "qwen3":
            self.q_norm = RMSNorm(spec.head_dim, spec.rms_norm_eps)
            self.k_norm = RMSNorm(spec.head_dim, spec.rms_norm_eps)
        self.sliding_window = sliding_window

    def forward(self, x, cos, sin, positions, cache: DraftCache | None, layer: int, attend):
        spec = self.spec
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, spec.num_attention_heads, spec.head_dim)
        k = self.k_proj(x).view(b, t, spec.num_key_value_heads, spec.head_dim)
        v = self.v_proj(x).view(b, t, spec.num_key_value_heads, spec.head_dim)
        if spec.layer_kind == "qwen3":
            q, k = self.q_norm(q), self.k_norm(k)
        q = _rotate(q.transpose(1, 2), cos, sin)
        k = _rotate(k.transpose(1, 2), cos, sin)
        v = v.transpose(1, 2)
        key_positions = positions
        if cache is not None:
            if layer < len(cache.keys) and cache.keys[layer] is not None and cache.keys[layer].shape[2]:
                k = torch.cat([cache.keys[layer], k], dim=2)
                v = torch.cat([cache.values[layer], v], dim=2)
                key_positions = torch.cat([cache.positions, positions])
            if layer == len(cache.keys):
                cache.keys.append(None)
                cache.values.append(None)
            cache.keys[layer], cache.values[layer] = k, v
        visible = attend
        if self.sliding_window is not None:
            visible = visible & (positions[:, None] - key_positions[None, :] < self.sliding_window)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=spec.head_dim ** -0.5,
                                             enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, spec: DrafterSpec):
        super().__init__()
        if spec.hidden_act not in _ACTIVATIONS:
            raise NotImplementedError(f"{spec.path}: hidden_act {spec.hidden_act!r} is not one of "
                                      f"{sorted(_ACTIVATIONS)}")
        self.act = _ACTIVATIONS[spec.hidden_act]
        self.gate_proj = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=spec.mlp_bias)
        self.up_proj = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=spec.mlp_bias)
        self.down_proj = nn.Linear(spec.intermediate_size, spec.hidden_size, bias=spec.mlp_bias)

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    def __init__(self, spec: DrafterSpec, index: int):
        super().__init__()
        h, eps = spec.hidden_size, spec.rms_norm_eps
        self.index = index
        first = index == 0
        if first or spec.later_layer_norm is LaterLayerNorm.INPUT_LAYERNORM:
            self.input_layernorm = RMSNorm(h, eps)
        if first or spec.later_layer_norm is LaterLayerNorm.HIDDEN_NORM:
            self.hidden_norm = RMSNorm(h, eps)
        sliding = spec.layer_types[index] == "sliding_attention" if spec.layer_types else False
        self.self_attn = Attention(spec, 2 * h if first else h,
                                   spec.sliding_window if sliding else None)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.mlp = MLP(spec)
        self.norm_before_residual = spec.norm_before_residual
        self.hidden_input_layernorm = spec.hidden_input_layernorm
        # Which norm feeds attention in layers >= 1 (a name, not a second reference to the
        # module, which would duplicate its weight in state_dict).
        self.later_norm = (None if first else "input_layernorm"
                           if spec.later_layer_norm is LaterLayerNorm.INPUT_LAYERNORM else "hidden_norm")

    def forward(self, residual, embeds, cos, sin, positions, cache, attend):
        if self.index == 0:
            hidden = self.hidden_norm(self.input_layernorm(residual) if self.hidden_input_layernorm else residual)
            if self.norm_before_residual:
                residual = hidden
            x = torch.cat([self.input_layernorm(embeds), hidden], dim=-1)
        else:
            x = getattr(self, self.later_norm)(residual)
        residual = residual + self.self_attn(x, cos, sin, positions, cache, self.index, attend)
        return residual + self.mlp(self.post_attention_layernorm(residual))


@dataclass
class DraftOutput:
    logits: torch.Tensor  # [B, T, Vd] over the draft vocabulary
    carried: torch.Tensor  # [B, T, H] hidden state fed to the next draft step


class ReferenceDrafter(nn.Module):
    """One EAGLE-3 drafter; parameters are named exactly like the canonical tensors."""

    def __init__(self, spec: DrafterSpec):
        super().__init__()
        if spec.layer_kind not in ("llama", "qwen3"):
            raise NotImplementedError(f"{spec.path}: draft layer kind {spec.layer_kind!r}")
        self.spec = spec
        h = spec.hidden_size
        self.embed_tokens = nn.Embedding(spec.vocab_size, h)
        if spec.use_aux_hidden_state:
            self.fc = nn.Linear(spec.fc_in_features, h, bias=spec.fc_bias)
            if spec.norm_before_fc:
                self.input_norm = RMSNorm(spec.fc_in_features, spec.rms_norm_eps)
            if spec.fc_norm:
                self.fc_norm = nn.ModuleList(
                    RMSNorm(spec.target_hidden_size, spec.rms_norm_eps)
                    for _ in range(spec.num_aux_hidden_states))
        self.layers = nn.ModuleList(DraftLayer(spec, i) for i in range(spec.num_layers))
        self.norm = RMSNorm(h, spec.rms_norm_eps)
        if not spec.tie_word_embeddings:
            self.lm_head = nn.Linear(h, spec.draft_vocab_size, bias=False)
        if spec.has_vocab_map:
            self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.long))
        # Kept in float64 outside the module's tensors so that .to(dtype) never rounds it.
        self._inv_freq, self._rope_scale = _rope(spec)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_tensors(cls, spec: DrafterSpec, tensors: dict[str, torch.Tensor],
                     target_embed: torch.Tensor | None = None,
                     target_lm_head: torch.Tensor | None = None) -> "ReferenceDrafter":
        """Build from canonical tensors; the target supplies what the checkpoint leaves out."""
        model = cls(spec)
        tensors = dict(tensors)
        for name, needed, supplied in (
                ("embed_tokens.weight", spec.embed_tokens_from_target, target_embed),
                ("lm_head.weight", spec.lm_head_from_target, target_lm_head)):
            if needed:
                if supplied is None:
                    raise ValueError(f"{spec.path}: the drafter has no {name}; pass the target's")
                tensors[name] = supplied
        dtype = next(t for n, t in tensors.items() if n != "d2t").dtype
        model.to(dtype)
        model.load_state_dict(tensors, strict=True)
        return model

    def canonical_state_dict(self) -> dict[str, torch.Tensor]:
        """The tensors a checkpoint of this drafter holds (no target-owned ones)."""
        state = {k: v.detach() for k, v in self.state_dict().items()}
        if self.spec.embed_tokens_from_target:
            state.pop("embed_tokens.weight")
        if self.spec.lm_head_from_target:
            state.pop("lm_head.weight")
        return state

    # -- forward ------------------------------------------------------------------------------

    def _fc(self, aux: torch.Tensor) -> torch.Tensor:
        spec = self.spec
        if not spec.use_aux_hidden_state:
            return aux  # EAGLE-1-style head: the target's last hidden state enters directly
        if spec.norm_before_fc:
            aux = self.input_norm(aux)
        if spec.fc_norm:
            chunks = aux.split(spec.target_hidden_size, dim=-1)
            aux = torch.cat([norm(c) for norm, c in zip(self.fc_norm, chunks)], dim=-1)
        return self.fc(aux)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, *,
                aux: torch.Tensor | None = None, carried: torch.Tensor | None = None,
                cache: DraftCache | None = None, attend: torch.Tensor | None = None) -> DraftOutput:
        """Run ``T`` tokens per sequence: ``input_ids [B, T]`` (target-vocabulary ids, drafted tokens
        included: SGLang maps them through ``d2t`` before they go back in), ``positions [T]``.

        Exactly one of ``aux [B, T, A*T_target]`` (target features: prefill and draft-extend)
        and ``carried [B, T, H]`` (the drafter's own hidden: decode steps) is given. ``attend
        [T, len(cache) + T]`` says which cached and new keys each token sees (default: causal);
        new keys are appended to ``cache``.
        """
        if (aux is None) == (carried is None):
            raise ValueError("pass exactly one of aux= (target features) and carried=")
        cached = 0 if cache is None else len(cache)
        if attend is None:
            attend = causal_mask(cached, input_ids.shape[1], input_ids.device)
        residual = self._fc(aux) if aux is not None else carried
        embeds = self.embed_tokens(input_ids).to(residual.dtype)
        inv_freq = self._inv_freq.to(positions.device)
        angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)
        cos = (angles.cos() * self._rope_scale).to(residual.dtype)
        sin = (angles.sin() * self._rope_scale).to(residual.dtype)
        for layer in self.layers:
            residual = layer(residual, embeds, cos, sin, positions, cache, attend)
        if cache is not None:
            cache.positions = positions if cache.positions is None else torch.cat(
                [cache.positions, positions])
        normed = self.norm(residual)
        head = self.embed_tokens.weight if self.spec.tie_word_embeddings else self.lm_head.weight
        logits = normed @ head.t()
        return DraftOutput(logits=logits, carried=normed if self.spec.norm_output else residual)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary ids -> target ids (``target = draft + d2t[draft]``)."""
        if not self.spec.has_vocab_map:
            return draft_ids
        return draft_ids + self.d2t[draft_ids]
