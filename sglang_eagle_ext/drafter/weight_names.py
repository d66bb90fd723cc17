"""One mapping from every dialect's tensor names to canonical names, and the canonical shapes.

Canonical names (``i`` = draft layer, ``j`` = aux chunk)::

    embed_tokens.weight                   [V, H]        only when the checkpoint has one
    fc.weight / fc.bias                   [H, A*T] / [H] absent when use_aux_hidden_state is False
    input_norm.weight                     [A*T]         norm_before_fc
    fc_norm.{j}.weight                    [T]           fc_norm
    layers.0.input_layernorm.weight       [H]           normalises the token embedding
    layers.0.hidden_norm.weight           [H]           normalises fc(aux) / the carried hidden
    layers.{i}.input_layernorm.weight     [H]           i >= 1, LaterLayerNorm.INPUT_LAYERNORM
    layers.{i}.hidden_norm.weight         [H]           i >= 1, LaterLayerNorm.HIDDEN_NORM
    layers.{i}.self_attn.{q,k,v}_proj.weight  [nh*d | nkv*d, 2H for i == 0 else H]
    layers.{i}.self_attn.{q,k,v}_proj.bias    [nh*d | nkv*d]  attention_bias
    layers.{i}.self_attn.o_proj.weight    [H, nh*d]
    layers.{i}.self_attn.o_proj.bias      [H]           o_proj_bias
    layers.{i}.self_attn.{q,k}_norm.weight [d]          layer_kind == "qwen3"
    layers.{i}.post_attention_layernorm.weight [H]
    layers.{i}.mlp.{gate,up}_proj.weight  [I, H]
    layers.{i}.mlp.down_proj.weight       [H, I]
    layers.{i}.mlp.{gate,up,down}_proj.bias [I | H]     mlp_bias
    norm.weight                           [H]
    lm_head.weight                        [Vd, H]       only when the checkpoint has one
    d2t                                   [Vd] int64    offsets, only when Vd < V

Dialect spellings mapped onto these: a leading ``model.`` (NeMo Automodel), ``midlayer.`` for
``layers.0.`` (SafeAILab, SpecForge, AngelSlim, TorchSpec, ModelOpt before 2026-03),
``midlayer.{i}.`` for ``layers.{i}.`` (ModelOpt's Megatron export of multi-layer heads), ``aux_norm_{low,mid,high}`` for
``fc_norm.{0,1,2}`` (legacy SGLang), fused ``qkv_proj`` / ``gate_up_proj`` (split on load).
"""

from __future__ import annotations

import re

from sglang_eagle_ext.drafter.spec import DrafterSpec, LaterLayerNorm

# Tensors that some producers save but no engine uses at inference. Reading them is noted,
# never an error: `t2d` is the inverse of `d2t`, the `verifier_*` pair is speculators'
# training-only copy of the target head.
IGNORED_TENSORS = {
    "t2d": "target-to-draft membership mask; inference uses d2t only (it is checked against d2t)",
    "verifier_norm.weight": "speculators training-only copy of the target's final norm",
    "verifier_lm_head.weight": "speculators training-only copy of the target's lm_head",
}

# Tensors that only a parallel-drafting (P-EAGLE) head has.
PARALLEL_DRAFTING_TENSORS = ("mask_hidden",)

_LEGACY_AUX_NORMS = {"aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1",
                     "aux_norm_high": "fc_norm.2"}
_LAYER_RE = re.compile(r"^layers\.(\d+)\.")
_MIDLAYER_RE = re.compile(r"^midlayer\.(\d+)\.")

# fused name -> (canonical parts in concatenation order)
FUSED_PROJECTIONS = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}


def canonical_name(raw: str) -> str:
    """Map a tensor name of any dialect to its canonical spelling (fused names stay fused)."""
    name = raw[len("model."):] if raw.startswith("model.") else raw
    numbered = _MIDLAYER_RE.match(name)  # ModelOpt's Megatron export of multi-layer heads
    if numbered:
        name = f"layers.{numbered.group(1)}." + name[numbered.end():]
    elif name.startswith("midlayer."):
        name = "layers.0." + name[len("midlayer."):]
    for legacy, canonical in _LEGACY_AUX_NORMS.items():
        if name.startswith(legacy + "."):
            name = canonical + name[len(legacy):]
    return name


def fused_parts(name: str) -> tuple[str, ...] | None:
    """The canonical parts of a fused projection name, in concatenation order (None otherwise)."""
    for fused, parts in FUSED_PROJECTIONS.items():
        if name.endswith(f".{fused}.weight") and layer_index(name) is not None:
            prefix = name[: -len(f"{fused}.weight")]
            return tuple(f"{prefix}{part}.weight" for part in parts)
    return None


def layer_index(name: str) -> int | None:
    """The draft layer a canonical name belongs to, or None for model-level tensors."""
    match = _LAYER_RE.match(name)
    return int(match.group(1)) if match else None


def expected_shapes(spec: DrafterSpec) -> dict[str, tuple[int, ...]]:
    """Every canonical tensor the checkpoint must contain for ``spec``, with its shape."""
    h, t, a = spec.hidden_size, spec.target_hidden_size, spec.num_aux_hidden_states
    q_out = spec.num_attention_heads * spec.head_dim
    kv_out = spec.num_key_value_heads * spec.head_dim
    inter = spec.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"norm.weight": (h,)}
    if not spec.embed_tokens_from_target:
        shapes["embed_tokens.weight"] = (spec.vocab_size, h)
    if not spec.lm_head_from_target and not spec.tie_word_embeddings:
        shapes["lm_head.weight"] = (spec.draft_vocab_size, h)
    if spec.has_vocab_map:
        shapes["d2t"] = (spec.draft_vocab_size,)
    if spec.use_aux_hidden_state:
        shapes["fc.weight"] = (h, a * t)
        if spec.fc_bias:
            shapes["fc.bias"] = (h,)
        if spec.norm_before_fc:
            shapes["input_norm.weight"] = (a * t,)
        if spec.fc_norm:
            shapes.update({f"fc_norm.{j}.weight": (t,) for j in range(a)})
    for i in range(spec.num_layers):
        p = f"layers.{i}."
        in_features = 2 * h if i == 0 else h
        if i == 0 or spec.later_layer_norm is LaterLayerNorm.INPUT_LAYERNORM:
            shapes[p + "input_layernorm.weight"] = (h,)
        if i == 0 or spec.later_layer_norm is LaterLayerNorm.HIDDEN_NORM:
            shapes[p + "hidden_norm.weight"] = (h,)
        for proj, out in (("q_proj", q_out), ("k_proj", kv_out), ("v_proj", kv_out)):
            shapes[f"{p}self_attn.{proj}.weight"] = (out, in_features)
            if spec.attention_bias:
                shapes[f"{p}self_attn.{proj}.bias"] = (out,)
        shapes[p + "self_attn.o_proj.weight"] = (h, q_out)
        if spec.o_proj_bias:
            shapes[p + "self_attn.o_proj.bias"] = (h,)
        if spec.layer_kind == "qwen3":
            shapes[p + "self_attn.q_norm.weight"] = (spec.head_dim,)
            shapes[p + "self_attn.k_norm.weight"] = (spec.head_dim,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes[p + "mlp.gate_proj.weight"] = (inter, h)
        shapes[p + "mlp.up_proj.weight"] = (inter, h)
        shapes[p + "mlp.down_proj.weight"] = (h, inter)
        if spec.mlp_bias:
            shapes.update({p + "mlp.gate_proj.bias": (inter,), p + "mlp.up_proj.bias": (inter,),
                           p + "mlp.down_proj.bias": (h,)})
    return shapes
