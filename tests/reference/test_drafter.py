"""The reference drafter against an independent float64 computation written here.

The float64 version below shares no code with the package: it works on plain tensors with
per-head loops, recomputes the whole sequence for every step (no KV cache) and builds RoPE from
the textbook formula. Every norm variant, multi-layer and k-aux layout is covered.
"""

import dataclasses
import json
import math

import pytest
import torch

from sglang_eagle_ext.reference.drafter import DraftCache, ReferenceDrafter, causal_mask
from sglang_eagle_ext.drafter.spec import AuxLayers, Dialect, DrafterSpec, IdConvention, LaterLayerNorm
from sglang_eagle_ext.drafter.spec import expected_shapes

H, T_TARGET, V = 32, 32, 96


def make_spec(**overrides) -> DrafterSpec:
    """A small speculators-style spec; every field not given here is at its declared default."""
    base = dict(
        path="<test>", dialect=Dialect.SPECULATORS, architecture="Eagle3DraftModel", num_layers=1,
        hidden_size=H, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=48,
        max_position_embeddings=256, aux_layers=AuxLayers((1, 2, 3), IdConvention.HIDDEN_STATE_INDEX, "<test>"),
        target_hidden_size=T_TARGET, vocab_size=V)
    base.update(overrides)
    return DrafterSpec.from_values(**base)


VARIANTS = {
    "one_layer": {},
    "three_layers_input_layernorm_vocab_map": dict(
        num_layers=3, later_layer_norm=LaterLayerNorm.INPUT_LAYERNORM, draft_vocab_size=40,
        has_vocab_map=True, embed_tokens_from_target=True),
    "two_layers_hidden_norm_fc_norm_norm_output": dict(
        num_layers=2, later_layer_norm=LaterLayerNorm.HIDDEN_NORM, fc_norm=True, norm_output=True),
    "four_aux_cross_width_norm_before_fc_residual_biases": dict(
        num_aux_hidden_states=4, target_hidden_size=24, norm_before_fc=True,
        norm_before_residual=True, attention_bias=True, fc_bias=True,
        aux_layers=AuxLayers((0, 1, 2, 4), IdConvention.HIDDEN_STATE_INDEX, "<test>")),
    "qwen3_sliding_llama3_rope": dict(
        num_layers=2, later_layer_norm=LaterLayerNorm.INPUT_LAYERNORM, layer_kind="qwen3",
        sliding_window=3, layer_types=("full_attention", "sliding_attention"),
        rope_scaling=json.dumps({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8})),
    "no_aux_tied_linear_rope": dict(
        use_aux_hidden_state=False, num_aux_hidden_states=1, tie_word_embeddings=True,
        rope_scaling=json.dumps({"type": "linear", "factor": 2.0}), hidden_act="gelu"),
    "lm_head_from_target": dict(lm_head_from_target=True, embed_tokens_from_target=True),
}


def random_tensors(spec: DrafterSpec, generator: torch.Generator) -> dict[str, torch.Tensor]:
    tensors = {}
    for name, shape in expected_shapes(spec).items():
        if name == "d2t":
            chosen = torch.randperm(spec.vocab_size, generator=generator)[:shape[0]].sort().values
            tensors[name] = chosen - torch.arange(shape[0])
        elif name.endswith("norm.weight") or name.endswith("layernorm.weight") or ".fc_norm." in \
                name or name.startswith("fc_norm."):
            tensors[name] = (1 + 0.3 * torch.randn(shape, generator=generator, dtype=torch.float64))
        else:
            tensors[name] = 0.3 * torch.randn(shape, generator=generator, dtype=torch.float64)
    return tensors


# ---------------------------------------------------------------- independent float64 version


def rms(x, w, eps):
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def rope_frequencies(spec):
    d = spec.head_dim
    freqs = [spec.rope_theta ** (-(2.0 * i) / d) for i in range(d // 2)]
    scaling = json.loads(spec.rope_scaling) if spec.rope_scaling else {}
    kind = scaling.get("rope_type", scaling.get("type"))
    out = []
    for f in freqs:
        if kind == "linear":
            f = f / scaling["factor"]
        elif kind == "llama3":
            wavelength = 2 * math.pi / f
            ctx, lo, hi = (scaling["original_max_position_embeddings"], scaling["low_freq_factor"],
                           scaling["high_freq_factor"])
            if wavelength > ctx / lo:
                f = f / scaling["factor"]
            elif wavelength >= ctx / hi:
                s = (ctx / wavelength - lo) / (hi - lo)
                f = (1 - s) * f / scaling["factor"] + s * f
        out.append(f)
    return out


def rope(vec, position, freqs):
    half = len(freqs)
    result = vec.clone()
    for i, f in enumerate(freqs):
        c, s = math.cos(position * f), math.sin(position * f)
        a, b = vec[i], vec[i + half]
        result[i], result[i + half] = a * c - b * s, b * c + a * s
    return result


def act(spec, x):
    return torch.nn.functional.silu(x) if spec.hidden_act == "silu" else torch.nn.functional.gelu(x)


def float64_sequence(spec, w, tokens, inputs, kinds, positions, visible):
    """Run the whole sequence from scratch. ``kinds[i]`` is 'aux' or 'carried' for the vector
    ``inputs[i]``; ``visible[i][j]`` says whether token i attends to token j. Returns the logits
    and carried hidden state of every token."""
    eps, n = spec.rms_norm_eps, len(tokens)
    embed = w["embed_tokens.weight"]
    head = embed if spec.tie_word_embeddings else w["lm_head.weight"]
    freqs = rope_frequencies(spec)
    d, nh, nkv = spec.head_dim, spec.num_attention_heads, spec.num_key_value_heads
    residual = []
    for vec, kind in zip(inputs, kinds):
        if kind == "carried" or not spec.use_aux_hidden_state:
            residual.append(vec)
            continue
        if spec.norm_before_fc:
            vec = rms(vec, w["input_norm.weight"], eps)
        if spec.fc_norm:
            t = spec.target_hidden_size
            vec = torch.cat([rms(vec[j * t:(j + 1) * t], w[f"fc_norm.{j}.weight"], eps)
                             for j in range(spec.num_aux_hidden_states)])
        out = w["fc.weight"] @ vec
        if spec.fc_bias:
            out = out + w["fc.bias"]
        residual.append(out)
    for layer in range(spec.num_layers):
        p = f"layers.{layer}."
        xs = []
        for i in range(n):
            if layer == 0:
                hidden = rms(residual[i], w[p + "hidden_norm.weight"], eps)
                if spec.norm_before_residual:
                    residual[i] = hidden
                xs.append(torch.cat([rms(embed[tokens[i]], w[p + "input_layernorm.weight"], eps),
                                     hidden]))
            else:
                name = ("input_layernorm" if spec.later_layer_norm is LaterLayerNorm.INPUT_LAYERNORM
                        else "hidden_norm")
                xs.append(rms(residual[i], w[p + name + ".weight"], eps))
        window = spec.sliding_window if spec.layer_types[layer] == "sliding_attention" else None

        def project(kind, x, heads):
            out = w[p + f"self_attn.{kind}_proj.weight"] @ x
            if spec.attention_bias:
                out = out + w[p + f"self_attn.{kind}_proj.bias"]
            return out.view(heads, d)

        qs, ks, vs = [], [], []
        for i in range(n):
            q, k, v = project("q", xs[i], nh), project("k", xs[i], nkv), project("v", xs[i], nkv)
            if spec.layer_kind == "qwen3":
                q = torch.stack([rms(q[h], w[p + "self_attn.q_norm.weight"], eps) for h in range(nh)])
                k = torch.stack([rms(k[h], w[p + "self_attn.k_norm.weight"], eps) for h in range(nkv)])
            qs.append(torch.stack([rope(q[h], positions[i], freqs) for h in range(nh)]))
            ks.append(torch.stack([rope(k[h], positions[i], freqs) for h in range(nkv)]))
            vs.append(v)
        for i in range(n):
            heads = []
            for h in range(nh):
                kv_head = h // (nh // nkv)
                keys = [j for j in range(n) if visible[i][j]
                        and (window is None or positions[i] - positions[j] < window)]
                scores = torch.stack([qs[i][h] @ ks[j][kv_head] for j in keys]) / math.sqrt(d)
                weights = torch.softmax(scores, 0)
                heads.append(sum(wt * vs[j][kv_head] for wt, j in zip(weights, keys)))
            residual[i] = residual[i] + w[p + "self_attn.o_proj.weight"] @ torch.cat(heads)
            x = rms(residual[i], w[p + "post_attention_layernorm.weight"], eps)
            mlp = w[p + "mlp.down_proj.weight"] @ (act(spec, w[p + "mlp.gate_proj.weight"] @ x)
                                                   * (w[p + "mlp.up_proj.weight"] @ x))
            residual[i] = residual[i] + mlp
    normed = [rms(r, w["norm.weight"], eps) for r in residual]
    logits = [head @ x for x in normed]
    carried = normed if spec.norm_output else residual
    return logits, carried


# ---------------------------------------------------------------- the tests


def check(actual, expected, tolerance):
    assert torch.allclose(actual.double(), expected, atol=tolerance, rtol=tolerance), \
        (actual.double() - expected).abs().max().item()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-10), (torch.float32, 2e-4)])
def test_prefill_chain_and_tree_steps_match_float64(variant, dtype, tolerance):
    spec = make_spec(**VARIANTS[variant])
    if spec.rope_scaling is not None:  # transformers computes scaled RoPE frequencies in float32
        tolerance = max(tolerance, 1e-6)
    generator = torch.Generator().manual_seed(sum(map(ord, variant)))
    weights = random_tensors(spec, generator)
    target_embed = 0.3 * torch.randn(V, H, generator=generator, dtype=torch.float64)
    target_head = 0.3 * torch.randn(V, H, generator=generator, dtype=torch.float64)
    full = dict(weights)
    if spec.embed_tokens_from_target:
        full["embed_tokens.weight"] = target_embed
    if spec.lm_head_from_target:
        full["lm_head.weight"] = target_head
    model = ReferenceDrafter.from_tensors(
        spec, {k: v if k == "d2t" else v.to(dtype) for k, v in weights.items()},
        target_embed=target_embed.to(dtype), target_lm_head=target_head.to(dtype))
    state = model.canonical_state_dict()
    assert set(state) == set(weights)

    width = spec.fc_in_features if spec.use_aux_hidden_state else H
    prefill = 5
    tokens = torch.randint(0, V, (prefill,), generator=generator).tolist()
    aux = torch.randn(prefill, width, generator=generator, dtype=torch.float64)
    cache = DraftCache()
    out = model(torch.tensor([tokens]), torch.arange(prefill), aux=aux[None].to(dtype), cache=cache)

    seq_tokens, seq_inputs, kinds, positions = list(tokens), list(aux), ["aux"] * prefill, \
        list(range(prefill))
    causal = [[j <= i for j in range(64)] for i in range(64)]
    ref_logits, ref_carried = float64_sequence(spec, full, seq_tokens, seq_inputs, kinds,
                                               positions, causal)
    check(out.logits[0], torch.stack(ref_logits), tolerance)
    check(out.carried[0], torch.stack(ref_carried), tolerance)

    # Three chain decode steps: the drafted token and the previous carried hidden go in.
    carried = out.carried[0, -1]
    logits = out.logits[0, -1]
    for step in range(3):
        draft = int(logits.argmax()) % V  # a draft-vocab id is a valid embedding index too
        position = prefill + step
        out = model(torch.tensor([[draft]]), torch.tensor([position]), carried=carried[None, None],
                    cache=cache)
        seq_tokens.append(draft)
        seq_inputs.append(ref_carried[-1])
        kinds.append("carried")
        positions.append(position)
        ref_logits, ref_carried = float64_sequence(spec, full, seq_tokens, seq_inputs, kinds,
                                                   positions, causal)
        check(out.logits[0, 0], ref_logits[-1], tolerance)
        check(out.carried[0, 0], ref_carried[-1], tolerance)
        carried, logits = out.carried[0, 0], out.logits[0, 0]

    # A tree step: two siblings at the same position, each seeing the prefix and itself only.
    cache.crop(prefill + 2)
    siblings = torch.randint(0, V, (2,), generator=generator).tolist()
    hidden = torch.randn(2, H, generator=generator, dtype=torch.float64)
    attend = causal_mask(len(cache), 2)
    attend[1, -2] = False  # the second sibling must not see the first
    out = model(torch.tensor([siblings]), torch.tensor([prefill + 2] * 2),
                carried=hidden[None].to(dtype), cache=cache, attend=attend)
    for b in range(2):
        ref_logits, ref_carried = float64_sequence(
            spec, full, seq_tokens[:prefill + 2] + [siblings[b]],
            seq_inputs[:prefill + 2] + [hidden[b]], kinds[:prefill + 2] + ["carried"],
            positions[:prefill + 2] + [prefill + 2], causal)
        check(out.logits[0, b], ref_logits[-1], tolerance)
        check(out.carried[0, b], ref_carried[-1], tolerance)

    if spec.has_vocab_map:
        ids = torch.arange(spec.draft_vocab_size)
        assert torch.equal(model.to_target_ids(ids), ids + weights["d2t"])


def test_rejects_ambiguous_inputs():
    model = ReferenceDrafter(make_spec())
    with pytest.raises(ValueError, match="exactly one"):
        model(torch.tensor([[1]]), torch.tensor([0]))


def test_missing_target_embedding_is_reported():
    spec = make_spec(embed_tokens_from_target=True)
    weights = random_tensors(spec, torch.Generator().manual_seed(3))
    with pytest.raises(ValueError, match="embed_tokens.weight.*pass the target's"):
        ReferenceDrafter.from_tensors(spec, weights)


def test_unknown_rope_scaling_is_reported():
    spec = make_spec(rope_scaling=json.dumps({"rope_type": "stretched", "factor": 4.0}))
    with pytest.raises(NotImplementedError, match="stretched"):
        ReferenceDrafter(spec)


def test_spec_variants_are_distinct():
    # Guard against a variant silently collapsing to the default (the test would then prove less).
    specs = {name: make_spec(**kw) for name, kw in VARIANTS.items()}
    assert len({dataclasses.astuple(s) for s in specs.values()}) == len(specs)
