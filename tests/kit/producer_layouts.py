"""Real producers' drafter layouts beyond the format catalogue, each declared once.

A layout is what one producer's own export, conversion or training code writes: the keys of its
``config.json`` and the names of its tensors, read from that code (cited as repository@commit :
path). Each is rebuilt here as a tiny random checkpoint with :mod:`fixtures`' helpers, together
with what the package must make of it: the description fields that follow from the *producer's*
semantics (never from this package's reader), or the one error that refuses it.
``tests/drafter/test_producer_layouts.py`` checks both, and ``scripts/readme_numbers.py`` turns
these declarations into the README's table.

Tensors are generated under canonical names (:func:`fixtures.canonical_tensors`), then spelt the
producer's way; reading the checkpoint must give the canonical tensors back bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable

import torch

from sglang_eagle_ext.drafter.spec import Dialect, LaterLayerNorm
from tests.kit.fixtures import (Geometry, canonical_tensors, modelopt_config, rename, shrink, speculators_config,
                                target_config, template, write_checkpoint)


@dataclass(frozen=True)
class Source:
    """One file of a producer's repository, at the commit it was read."""

    repo: str
    commit: str
    path: str

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repo}/blob/{self.commit}/{self.path}"


@dataclass(frozen=True)
class Refusal:
    """The error a layout must get: a problem whose field contains ``field`` and whose message
    contains ``message``; ``reason`` is what the README says."""

    field: str
    message: str
    reason: str


@dataclass(frozen=True)
class Layout:
    """One producer layout and what the package must make of it.

    ``config`` / ``tensors`` build the checkpoint (tensors under canonical names, from a seed);
    ``spell`` renames them the producer's way. ``expected`` maps DrafterSpec fields to values
    (``aux_indices``: the hidden-state indices for the target's depth); a refused layout has
    ``refusal`` instead.
    """

    name: str
    producer: str
    summary: str
    sources: tuple[Source, ...]
    config: Callable[[], dict]
    tensors: Callable[[int], dict[str, torch.Tensor]]
    target: dict
    expected: dict[str, Any] | None = None
    refusal: Refusal | None = None
    template: str | None = None  # the drafter_configs/ copy the config starts from
    spell: Callable[[dict], dict] = lambda tensors: tensors

    def checkpoint_tensors(self, seed: int) -> dict[str, torch.Tensor]:
        """The tensors as the producer writes them."""
        return self.spell(self.tensors(seed))


# --- sources --------------------------------------------------------------------------------

SPECULATORS = "vllm-project/speculators", "c05b95b303f7d4f21e8d7624e0ffa1c2d9b4d73b"
MODELOPT = "NVIDIA/Model-Optimizer", "a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73"
SPECFORGE = "sgl-project/SpecForge", "a6b6b0230009d15ec2a97a57384e6f53f0f96946"
TORCHSPEC = "lightseekorg/TorchSpec", "6f21829cd0e333c3b54d9d2706a0b0c8dc10de9d"


def _in(repo_commit: tuple[str, str], *paths: str) -> tuple[Source, ...]:
    return tuple(Source(*repo_commit, path) for path in paths)


SPECULATORS_CONVERTER = _in(SPECULATORS, "src/speculators/convert/eagle/eagle3_converter.py",
                            "src/speculators/convert/eagle/eagle3_legacy_model.py")
MODELOPT_HF_EXPORT = _in(MODELOPT, "modelopt/torch/export/plugins/hf_spec_export.py",
                         "modelopt/torch/export/plugins/hf_spec_configs.py",
                         "modelopt/torch/speculative/eagle/default_config.py",
                         "modelopt/torch/speculative/plugins/modeling_eagle.py")
MODELOPT_MEGATRON_EXPORT = _in(MODELOPT, "modelopt/torch/export/unified_export_megatron.py",
                               "modelopt/torch/export/plugins/mcore_llama.py",
                               "modelopt/torch/speculative/plugins/megatron_eagle.py")
SPECFORGE_EXPORT = _in(SPECFORGE, "specforge/export/to_sglang.py", "specforge/modeling/draft/llama3_eagle.py")
TORCHSPEC_CONVERTER = _in(TORCHSPEC, "tools/convert_to_hf.py", "torchspec/models/draft/llama3_eagle.py")


# --- what every EAGLE-3 producer means unless its layout says otherwise ----------------------

def _expect(g: Geometry, dialect: Dialect, aux_indices: tuple[int, ...] | None, **fields: Any) -> dict:
    """Expected description: ``g``'s sizes (what the producer's shapes say), plain EAGLE-3
    semantics (one fc over A aux states, no extra norms or biases, SiLU, untied), then
    ``fields``."""
    expected = dict(
        dialect=dialect, aux_indices=aux_indices, num_layers=g.layers, hidden_size=g.hidden,
        num_attention_heads=g.heads, num_key_value_heads=g.kv_heads, head_dim=g.head_dim,
        intermediate_size=g.inter, vocab_size=g.vocab, draft_vocab_size=g.draft_vocab,
        num_aux_hidden_states=g.num_aux, target_hidden_size=g.target_hidden,
        use_aux_hidden_state=True, fc_bias=False, fc_norm=False, norm_before_fc=False,
        norm_before_residual=False, norm_output=False, attention_bias=False, o_proj_bias=False,
        mlp_bias=False, layer_kind="llama", hidden_act="silu", tie_word_embeddings=False,
        later_layer_norm=None, sliding_window=None, layer_types=("full_attention",) * g.layers, rope_scaling=None,
        has_vocab_map=g.draft_vocab < g.vocab, embed_tokens_from_target=not g.embed,
        lm_head_from_target=False)
    expected.update(fields)
    return expected


def _target(g: Geometry, layers: int, model_type: str) -> dict:
    return dict(target_config(hidden=g.target_hidden, layers=layers, vocab=g.vocab), model_type=model_type)


def _without_t2d(tensors: dict) -> dict:
    return {name: t for name, t in tensors.items() if name != "t2d"}


def _midlayer(tensors: dict) -> dict:
    return rename(tensors, midlayer=True)


def _numbered_midlayer(tensors: dict) -> dict:
    """ModelOpt's Megatron export of multi-layer heads: ``midlayer.{i}.`` for ``layers.{i}.``."""
    return {("midlayer." + name[len("layers."):]) if name.startswith("layers.") else name: t
            for name, t in tensors.items()}


def _shrunk_as_written(name: str, g: Geometry) -> dict:
    """A ``drafter_configs/`` template shrunk to ``g``, without the geometry keys the producer
    left out (their defaults are part of the layout)."""
    written = template(name)
    config = shrink(written, g)
    if "head_dim" not in written:
        config.pop("head_dim")
    return config


# --- NVIDIA ModelOpt: HF export (`export_hf_checkpoint.py`) and Megatron export ---------------

def default_modelopt_ids(num_target_layers: int) -> list[int]:
    """ModelOpt's HF default taps (layer-output ids): one near the start, middle and end."""
    n = num_target_layers
    return sorted({1, max(0, n // 2 - 1), max(0, n - 4)})


def _modelopt_hf(g: Geometry, num_target_layers: int, **eagle) -> dict:
    """What ``EagleExporter._export_config`` writes for the Llama decoder: the template's keys
    filled from the EAGLE config (``eagle`` overrides ``eagle_config``), and the YaRN scaling the
    export injects by default when training used plain RoPE."""
    eagle = dict(eagle_aux_hidden_state_layer_ids=default_modelopt_ids(num_target_layers),
                 parallel_draft_heads_num_layers=1, **eagle)
    config = modelopt_config(g, **eagle)
    config.update(rope_theta=10000, rope_scaling={"rope_type": "yarn", "factor": 32.0,
                                                   "original_max_position_embeddings": 2048},
                  attention_bias=False, attention_dropout=0.0, mlp_bias=False, pretraining_tp=1,
                  initializer_range=0.01, torch_dtype="bfloat16", bos_token_id=None,
                  eos_token_id=None, pad_token_id=None)
    return config


MODELOPT_YARN = {"factor": 32.0, "original_max_position_embeddings": 2048, "rope_type": "yarn"}
G_MODELOPT = Geometry()
G_MODELOPT_FULL = Geometry(draft_vocab=512)
G_MODELOPT_DEEP = Geometry(layers=2)
G_MEGATRON = Geometry(layers=2, later_norm="hidden_norm", heads=4, kv_heads=2, head_dim=16)
# Megatron's default taps are `list(set([1, N//2 - 1, N - 4]))`: for N = 32, CPython's set order
# writes them as [1, 28, 15]; every engine concatenates captured states in layer order.
MEGATRON_IDS = list({1, 32 // 2 - 1, 32 - 4})
LLAMA31_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_type": "llama3"}


def _megatron_config(g: Geometry) -> dict:
    """``GPTModelExporter``'s EAGLE-3 config: Llama-3.1-8B-Instruct's config updated with the
    draft geometry, the special tokens unset and ModelOpt's ``eagle_config``."""
    base = {"architectures": ["LlamaForCausalLMEagle3Deep"], "model_type": "llama", "hidden_act": "silu",
            "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "rope_scaling": LLAMA31_ROPE,
            "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "pretraining_tp": 1,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
            "bos_token_id": None, "eos_token_id": None, "pad_token_id": None, "sep_token_id": None,
            "draft_vocab_size": g.draft_vocab,
            "eagle_config": {"use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                             "use_mtp_layernorm": False, "use_aux_hidden_state": True,
                             "eagle_aux_hidden_state_layer_ids": MEGATRON_IDS, "next_layer_regular": True,
                             "parallel_draft_step": 1, "parallel_draft_heads_num_layers": 1}}
    return shrink(base, g)


def _medusa_tensors(g: Geometry, seed: int) -> dict:
    """An EagleMedusa export: the EAGLE head plus one Medusa head per extra draft step."""
    tensors = _without_t2d(canonical_tensors(g, seed))
    gen = torch.Generator().manual_seed(seed + 1)
    tensors["parallel_draft_heads.0.medusa_layers.0.linear.weight"] = torch.randn(g.hidden, g.hidden, generator=gen)
    tensors["parallel_draft_heads.0.medusa_layers.0.linear.bias"] = torch.randn(g.hidden, generator=gen)
    return tensors


def _kimik2_config(g: Geometry) -> dict:
    """``kimik2_eagle_template_config``'s identifying keys with MLA geometry."""
    return {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "hidden_size": g.hidden,
            "num_attention_heads": g.heads, "num_key_value_heads": g.heads, "num_hidden_layers": 1,
            "intermediate_size": g.inter, "vocab_size": g.vocab, "draft_vocab_size": g.draft_vocab,
            "kv_lora_rank": 16, "q_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
            "v_head_dim": 16, "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 5, 8], "use_aux_hidden_state": True,
                             "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                             "use_mtp_layernorm": False, "next_layer_regular": True,
                             "parallel_draft_step": 1, "parallel_draft_heads_num_layers": 1}}


def _kimik2_tensors(g: Geometry, seed: int) -> dict:
    """The names ``KIMIK2_EAGLE_SINGLE_LAYER`` requires (MLA attention), small random values."""
    gen = torch.Generator().manual_seed(seed)
    h, p = g.hidden, "layers.0."
    shapes = {"fc.weight": (h, 3 * h), "norm.weight": (h,), "lm_head.weight": (g.draft_vocab, h),
              p + "hidden_norm.weight": (h,), p + "input_layernorm.weight": (h,),
              p + "post_attention_layernorm.weight": (h,), p + "self_attn.q_a_proj.weight": (32, 2 * h),
              p + "self_attn.q_a_layernorm.weight": (32,), p + "self_attn.q_b_proj.weight": (g.heads * 24, 32),
              p + "self_attn.kv_a_proj_with_mqa.weight": (16 + 8, 2 * h),
              p + "self_attn.kv_a_layernorm.weight": (16,), p + "self_attn.kv_b_proj.weight": (g.heads * 32, 16),
              p + "self_attn.o_proj.weight": (h, g.heads * 16), p + "mlp.gate_proj.weight": (g.inter, h),
              p + "mlp.up_proj.weight": (g.inter, h), p + "mlp.down_proj.weight": (h, g.inter)}
    tensors = {name: torch.randn(*shape, generator=gen) * 0.05 for name, shape in shapes.items()}
    tensors["d2t"] = canonical_tensors(g, seed)["d2t"]
    return tensors


def _quantized_config(g: Geometry) -> dict:
    """An FP8 export: ``EagleExporter.export`` stores ModelOpt's own quant config, as written."""
    config = _modelopt_hf(g, 12)
    config["quantization_config"] = {"producer": {"name": "modelopt", "version": "0.40.0"},
                                     "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None,
                                                      "exclude_modules": ["lm_head"]}}
    return config


def _quantized_tensors(g: Geometry, seed: int) -> dict:
    tensors = _without_t2d(canonical_tensors(g, seed))
    for name in [n for n in tensors if n.startswith("layers.0.") and n.endswith("_proj.weight")]:
        stem = name[: -len("weight")]
        tensors[name] = tensors[name].to(torch.float8_e4m3fn)
        tensors[stem + "weight_scale"] = torch.tensor(0.01)
        tensors[stem + "input_scale"] = torch.tensor(0.02)
    return tensors


def _refused_modelopt(name: str, summary: str, paths: tuple[str, ...], config: Callable[[], dict],
                      tensors: Callable[[Geometry, int], dict], refusal: Refusal,
                      target_type: str = "llama") -> Layout:
    """A ModelOpt export (for a 12-layer target) that must be refused."""
    return Layout(name=name, producer="NVIDIA ModelOpt", summary=summary, sources=_in(MODELOPT, *paths),
                  config=config, tensors=lambda seed: tensors(G_MODELOPT, seed),
                  target=_target(G_MODELOPT, 12, target_type), refusal=refusal)


def _modelopt_hf_layout(name: str, g: Geometry, summary: str, tensors: Callable[[int], dict],
                       sources: tuple[Source, ...] = MODELOPT_HF_EXPORT, **expected: Any) -> Layout:
    """A ModelOpt HF export for a 32-layer Llama target (default taps [1, 15, 28] = indices
    2, 16, 29; ModelOpt's default RoPE base, norm eps and dtype; the injected YaRN)."""
    return Layout(name=name, producer="NVIDIA ModelOpt", summary=summary, sources=sources,
                  config=lambda: _modelopt_hf(g, 32), tensors=tensors, target=_target(g, 32, "llama"),
                  expected=_expect(g, Dialect.MODELOPT, (2, 16, 29), rope_theta=10000.0,
                                   rope_scaling=MODELOPT_YARN, rms_norm_eps=1e-5, torch_dtype="bfloat16",
                                   **expected))


MODELOPT_LAYOUTS = [
    _modelopt_hf_layout(
        "modelopt-hf-eagle3-yarn", G_MODELOPT,
        "HF export for a 32-layer Llama target: `layers.0.*`, `d2t` without `t2d`, the base `lm_head` "
        "copied in, default taps `[1, N/2-1, N-4]` in `eagle_config`, YaRN `rope_scaling` injected at "
        "export", lambda seed: _without_t2d(canonical_tensors(G_MODELOPT, seed)),
        sources=MODELOPT_HF_EXPORT + _in(MODELOPT, "modelopt/torch/speculative/config.py")),
    _modelopt_hf_layout(
        "modelopt-hf-eagle3-full-vocab", G_MODELOPT_FULL,
        "HF export with `draft_vocab_size` equal to the vocabulary: no `d2t` buffer, the base model's "
        "full `lm_head` exported", lambda seed: canonical_tensors(G_MODELOPT_FULL, seed)),
    _modelopt_hf_layout(
        "modelopt-hf-eagle3-2-layers", G_MODELOPT_DEEP,
        "HF export of a 2-layer head: layer 1 is a plain HF `LlamaDecoderLayer` (`input_layernorm`, "
        "no `hidden_norm`)", lambda seed: _without_t2d(canonical_tensors(G_MODELOPT_DEEP, seed)),
        later_layer_norm=LaterLayerNorm.INPUT_LAYERNORM),
    Layout(
        name="modelopt-megatron-eagle3-deep", producer="NVIDIA ModelOpt",
        summary="Megatron export of a 2-layer head (`LlamaForCausalLMEagle3Deep`): `midlayer.{i}.*`, "
                "later layers normalised by `hidden_norm`, Llama-3.1 config (llama3 RoPE), default "
                "taps written in set order `[1, 28, 15]`",
        sources=MODELOPT_MEGATRON_EXPORT,
        config=lambda: _megatron_config(G_MEGATRON),
        tensors=lambda seed: _without_t2d(canonical_tensors(G_MEGATRON, seed)),
        spell=_numbered_midlayer,
        target=_target(G_MEGATRON, 32, "llama"),
        expected=_expect(G_MEGATRON, Dialect.MODELOPT, (2, 16, 29), rope_theta=500000.0,
                         rope_scaling=LLAMA31_ROPE, rms_norm_eps=1e-5,
                         torch_dtype="bfloat16", later_layer_norm=LaterLayerNorm.HIDDEN_NORM)),
    _refused_modelopt(
        "modelopt-eagle-medusa", "`EagleMedusaExporter`: `parallel_draft_step` 2 with "
        "`parallel_draft_heads.*` Medusa heads", ("modelopt/torch/export/plugins/hf_spec_export.py",),
        lambda: _modelopt_hf(G_MODELOPT, 12, parallel_draft_step=2), _medusa_tensors,
        Refusal("eagle_config.parallel_draft_step", "EagleMedusa",
                "EagleMedusa head: several draft steps per forward")),
    _refused_modelopt(
        "modelopt-kimik2-mla", "HF export with `eagle_decoder_type: kimik2`: "
        "`Eagle3DeepseekV2ForCausalLM`, MLA attention tensors",
        ("modelopt/torch/export/plugins/hf_spec_export.py", "modelopt/torch/export/plugins/hf_spec_configs.py"),
        lambda: _kimik2_config(G_MODELOPT), _kimik2_tensors,
        Refusal("architectures", "MLA", "MLA attention: served by SGLang's own `Eagle3DeepseekV2ForCausalLM`"),
        target_type="kimi_k2"),
    _refused_modelopt(
        "modelopt-hf-eagle3-fp8", "HF export of a quantized head: FP8 projections with `weight_scale` / "
        "`input_scale`, ModelOpt's `quantization_config` in the config",
        ("modelopt/torch/export/plugins/hf_spec_export.py", "modelopt/torch/export/quant_utils.py"),
        lambda: _quantized_config(G_MODELOPT), _quantized_tensors,
        Refusal("quantization_config", "FP8", "quantized weights (FP8)")),
]


# --- vLLM speculators: `speculators convert --algorithm eagle3` ------------------------------

# The source-config keys `Eagle3Converter._create_transformer_config_from_eagle` copies into the
# LlamaConfig it writes as `transformer_layer_config`.
CONVERTER_LAYER_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "hidden_act", "max_position_embeddings", "initializer_range",
                        "rms_norm_eps", "attention_bias", "mlp_bias", "head_dim", "rope_theta",
                        "rope_scaling", "torch_dtype")


def _speculators_converted(source: dict, g: Geometry, **top) -> dict:
    """The config ``Eagle3Converter`` writes for a source checkpoint's ``config.json``: a
    LlamaConfig of the copied keys (never tied, the target's vocabulary), the draft vocabulary
    and norm flags of the source, and every flag stated."""
    layer = {key: source[key] for key in CONVERTER_LAYER_KEYS if source.get(key) is not None}
    layer.update(model_type="llama", tie_word_embeddings=False, use_cache=True)
    written = dict(architectures=["Eagle3Speculator"], norm_before_residual=False,
                   norm_before_fc=bool(source.get("norm_before_fc")), fc_norm=bool(source.get("fc_norm")),
                   norm_output=bool(source.get("norm_output")), target_hidden_size=source.get("target_hidden_size"),
                   eagle_aux_hidden_state_layer_ids=None, embed_requires_grad=False)
    written.update(top)
    return speculators_config(layer, g, **written)


G_CONVERTED = Geometry(heads=4, kv_heads=2, head_dim=16)
# Llama-4-Maverick (48 layers) as in the converter's own example script, tiny widths
G_MAVERICK = Geometry(draft_vocab=512)
G_MAVERICK_REDUCED = Geometry()
MAVERICK_IDS = [1, 23, 44]  # examples/convert/eagle3/apply_eagle3_llama4_maverick.sh
MAVERICK_VERIFIER = {"algorithm": "eagle3", "default_proposal_method": "greedy",
                     "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                     "verifier": {"name_or_path": "tiny-maverick",
                                  "architectures": ["Llama4ForConditionalGeneration"]}}


SPECULATORS_LAYOUTS = [
    Layout(
        name="speculators-convert-eagle3", producer="vLLM speculators",
        summary="`speculators convert` of a SpecForge/EAGLE-3 `midlayer` checkpoint (llama3 RoPE): "
                "speculators config, `layers.0.*`, `d2t` + `t2d` kept (the source has `t2d`), no "
                "embedding, `norm_before_residual: false` written out",
        sources=SPECULATORS_CONVERTER, template="sgl-project__SpecForge-configs-llama3-70B-ealge3",
        config=lambda: _speculators_converted(
            _shrunk_as_written("sgl-project__SpecForge-configs-llama3-70B-ealge3", G_CONVERTED), G_CONVERTED),
        tensors=lambda seed: canonical_tensors(G_CONVERTED, seed),
        target=_target(G_CONVERTED, 12, "llama"),
        expected=_expect(G_CONVERTED, Dialect.SPECULATORS, (2, 6, 9), rope_theta=500000.0,
                         rope_scaling={"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                       "original_max_position_embeddings": 4096, "rope_type": "llama3"},
                         rms_norm_eps=1e-5, torch_dtype="float16")),
    Layout(
        name="speculators-convert-modelopt-full-vocab", producer="vLLM speculators",
        summary="`speculators convert` of a ModelOpt Llama-4-Maverick head with `[1,23,44]` given "
                "(the converter's example): top-level ids (vLLM's hidden-state indices), full "
                "vocabulary so no `t2d`, hence no map written",
        sources=SPECULATORS_CONVERTER + _in(SPECULATORS, "examples/convert/eagle3/apply_eagle3_llama4_maverick.sh"),
        config=lambda: _speculators_converted(_modelopt_hf(G_MAVERICK, 48), G_MAVERICK,
                                              eagle_aux_hidden_state_layer_ids=MAVERICK_IDS,
                                              speculators_config=MAVERICK_VERIFIER),
        tensors=lambda seed: canonical_tensors(G_MAVERICK, seed),
        target=_target(G_MAVERICK, 48, "llama4_text"),
        expected=_expect(G_MAVERICK, Dialect.SPECULATORS, tuple(MAVERICK_IDS), rope_theta=10000.0,
                         rope_scaling=MODELOPT_YARN, rms_norm_eps=1e-5, torch_dtype="bfloat16")),
    Layout(
        name="speculators-convert-modelopt-reduced-vocab", producer="vLLM speculators",
        summary="`speculators convert` of a ModelOpt head with a reduced vocabulary: ModelOpt writes "
                "`d2t` without `t2d`, and the converter registers the map buffers only when `t2d` "
                "exists, so `d2t` is dropped",
        sources=SPECULATORS_CONVERTER + _in(MODELOPT, "modelopt/torch/export/plugins/hf_spec_export.py"),
        config=lambda: _speculators_converted(_modelopt_hf(G_MAVERICK_REDUCED, 12), G_MAVERICK_REDUCED),
        tensors=lambda seed: {n: t for n, t in canonical_tensors(G_MAVERICK_REDUCED, seed).items()
                              if n not in ("d2t", "t2d")},
        target=_target(G_MAVERICK_REDUCED, 12, "llama"),
        refusal=Refusal("d2t", "without a draft-to-target map",
                        "reduced draft vocabulary whose `d2t` the conversion dropped")),
]


# --- SpecForge: `export_to_sglang` of drafters for MoE and non-Llama targets ----------------

def _specforge_tensors(g: Geometry, identity_map: bool = False) -> Callable[[int], dict]:
    """SpecForge's draft keeps ``t2d``/``d2t`` buffers in every checkpoint; with the draft
    vocabulary equal to the target's, no map is ever computed and they stay at their initial
    identity (``d2t`` all 0, ``t2d`` all true)."""
    def tensors(seed: int) -> dict:
        out = canonical_tensors(g, seed)
        if identity_map:
            out["d2t"] = torch.zeros(g.draft_vocab, dtype=torch.int64)
            out["t2d"] = torch.ones(g.vocab, dtype=torch.bool)
        return out
    return tensors


def _rope_parameters_export(g: Geometry, mirrored: bool) -> dict:
    """A SpecForge export under transformers 5: ``rope_parameters`` (with ``rope_theta``) and
    ``dtype``; ``apply_legacy_rope_scaling`` mirrors them into ``rope_scaling`` / ``rope_theta``
    unless SPECFORGE_DISABLE_LEGACY_ROPE_SCALING is set."""
    config = _shrunk_as_written("sgl-project__SpecForge-configs-deepseek-v2-lite-eagle3", g)
    scaling, theta = config.pop("rope_scaling"), config.pop("rope_theta")
    config["dtype"] = config.pop("torch_dtype")
    config["rope_parameters"] = dict(scaling, rope_theta=theta)
    if mirrored:
        config.update(rope_scaling=scaling, rope_theta=theta)
    return config


G_QWEN3_MOE = Geometry()  # 4 heads x 32 = 128 = 2H, as 32 x 128 = 2 x 2048
G_GPT_OSS = Geometry()  # nh*d 128 != H 64, as 64 x 64 = 4096 != 2880
G_GEMMA3 = Geometry(heads=4, kv_heads=1, head_dim=8)  # nh*d 32 < H 64, as 4 x 256 = 1024 < 1152
G_SCOUT = Geometry(heads=4, kv_heads=2, head_dim=16)  # no head_dim written: H / heads
G_DEEPSEEK_LITE = Geometry(heads=4, kv_heads=4, head_dim=16)  # MHA, nh*d = H
G_LONGCAT = Geometry(draft_vocab=512)
G_LLAMA70B = Geometry(heads=4, kv_heads=2, head_dim=16)
DEEPSEEK_LITE_YARN = {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 40.0, "mscale": 0.707,
                      "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096, "rope_type": "yarn"}


def _specforge_layout(name: str, config_name: str, g: Geometry, depth: int, model_type: str, summary: str,
                      aux_indices: tuple[int, ...], *, identity_map: bool = False,
                      sources: tuple[Source, ...] = SPECFORGE_EXPORT, config: Callable[[], dict] | None = None,
                      **expected: Any) -> Layout:
    """A SpecForge ``export_to_sglang`` directory (``midlayer.*``, ``fc``, ``norm``, ``lm_head``,
    ``t2d``/``d2t``, no embedding) for a ``depth``-layer target, from one of its configs."""
    template_name = f"sgl-project__SpecForge-configs-{config_name}"
    return Layout(name=name, producer="SpecForge", summary=summary, sources=sources, template=template_name,
                  config=config or (lambda: _shrunk_as_written(template_name, g)),
                  tensors=_specforge_tensors(g, identity_map), spell=_midlayer,
                  target=_target(g, depth, model_type),
                  expected=_expect(g, Dialect.FLAT, aux_indices, **expected))


SPECFORGE_LAYOUTS = [
    _specforge_layout(
        "specforge-qwen3-30b-a3b", "qwen3-30B-A3B-eagle3", G_QWEN3_MOE, 48, "qwen3_moe",
        "Qwen3-30B-A3B (MoE) target: `head_dim` x heads twice the hidden size", (2, 24, 45),
        rope_theta=1e6, rms_norm_eps=1e-6, torch_dtype="bfloat16"),
    _specforge_layout(
        "specforge-gpt-oss-120b", "gpt-oss-120B-eagle3", G_GPT_OSS, 36, "gpt_oss",
        "gpt-oss-120B target: `eagle_config` ids `[1, 17, 33]` (layer outputs) of 36 layers, "
        "`head_dim` 64 x 64 heads != 2880", (2, 18, 34),
        rope_theta=10000.0, rms_norm_eps=1e-5, torch_dtype="bfloat16"),
    _specforge_layout(
        "specforge-gemma3-1b", "gemma3-1b-eagle3", G_GEMMA3, 26, "gemma3_text",
        "Gemma 3 1B target: `head_dim` x heads below the hidden size, `sliding_window` written but "
        "`use_sliding_window: false` (full attention)", (2, 13, 23),
        rope_theta=1e6, rms_norm_eps=1e-6, torch_dtype="bfloat16"),
    _specforge_layout(
        "specforge-llama4-scout", "llama4-scout-17B-16E-eagle3", G_SCOUT, 48, "llama4_text",
        "Llama 4 Scout target: no `head_dim` and no `rope_theta` written (LlamaConfig's defaults: "
        "hidden / heads, 10000)", (2, 24, 45),
        rope_theta=10000.0, rms_norm_eps=1e-5, torch_dtype="bfloat16"),
    _specforge_layout(
        "specforge-deepseek-v2-lite", "deepseek-v2-lite-eagle3", G_DEEPSEEK_LITE, 27, "deepseek_v2",
        "DeepSeek-V2-Lite target with a Llama draft layer: YaRN with `mscale` / `mscale_all_dim`",
        (2, 13, 24), rope_theta=10000.0, rope_scaling=DEEPSEEK_LITE_YARN, rms_norm_eps=1e-6,
        torch_dtype="bfloat16"),
    _specforge_layout(
        "specforge-longcat-flash-identity-map", "longcat-flash-eagle3", G_LONGCAT, 28, "longcat_flash",
        "LongCat-Flash target with `draft_vocab_size` equal to the vocabulary: identity `d2t` (all 0) "
        "and `t2d` (all true) saved", (2, 14, 25), identity_map=True,
        sources=SPECFORGE_EXPORT + _in(SPECFORGE, "specforge/training/assembly.py"),
        has_vocab_map=True, rope_theta=1e7, rms_norm_eps=1e-5, torch_dtype="bfloat16"),
    _specforge_layout(
        "specforge-llama3-70b", "llama3-70B-ealge3", G_LLAMA70B, 80, "llama",
        "Llama 3 70B target: `llama3` `rope_scaling`, fp16", (2, 40, 77), rope_theta=500000.0,
        rope_scaling={"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 4096, "rope_type": "llama3"},
        rms_norm_eps=1e-5, torch_dtype="float16"),
    _specforge_layout(
        "specforge-transformers5-rope-parameters", "deepseek-v2-lite-eagle3", G_DEEPSEEK_LITE, 27,
        "deepseek_v2", "export under transformers 5: `rope_parameters` and `dtype`, mirrored into "
        "`rope_scaling` / `rope_theta` by `apply_legacy_rope_scaling`", (2, 13, 24),
        sources=SPECFORGE_EXPORT + _in(SPECFORGE, "specforge/export/checkpoint_io.py"),
        config=lambda: _rope_parameters_export(G_DEEPSEEK_LITE, mirrored=True),
        rope_theta=10000.0, rope_scaling=DEEPSEEK_LITE_YARN, rms_norm_eps=1e-6, torch_dtype="bfloat16"),
    _specforge_layout(
        "specforge-transformers5-rope-parameters-only", "deepseek-v2-lite-eagle3", G_DEEPSEEK_LITE, 27,
        "deepseek_v2", "the same with SPECFORGE_DISABLE_LEGACY_ROPE_SCALING=1: only `rope_parameters` "
        "carries the RoPE base and scaling", (2, 13, 24),
        sources=SPECFORGE_EXPORT + _in(SPECFORGE, "specforge/export/checkpoint_io.py"),
        config=lambda: _rope_parameters_export(G_DEEPSEEK_LITE, mirrored=False),
        rope_theta=10000.0, rope_scaling=DEEPSEEK_LITE_YARN, rms_norm_eps=1e-6, torch_dtype="bfloat16"),
]


# --- TorchSpec: `tools/convert_to_hf.py` -------------------------------------------------------

def _torchspec_converted(name: str, g: Geometry) -> Callable[[], dict]:
    """The template as written, plus what the converter adds: ``draft_vocab_size``, its version
    and the weights' dtype."""
    return lambda: dict(_shrunk_as_written(f"lightseekorg__TorchSpec-configs-{name}", g),
                        draft_vocab_size=g.draft_vocab, _torchspec_version="0.1.0", torch_dtype="bfloat16")


G_TORCHSPEC_FULL = Geometry(heads=4, kv_heads=4, head_dim=32, draft_vocab=512, embed=True)  # MHA, as MiniMax
G_TORCHSPEC_PRUNED = Geometry(embed=True)

TORCHSPEC_LAYOUTS = [
    Layout(
        name="torchspec-hf-full-vocab", producer="TorchSpec",
        summary="`convert_to_hf.py` without pruning (MiniMax-M2.5 template, native names): "
                "`midlayer.*`, its own `embed_tokens`, full `lm_head`, no map buffers, "
                "`_torchspec_version` in the config",
        sources=TORCHSPEC_CONVERTER, template="lightseekorg__TorchSpec-configs-minimax_m25_eagle3",
        config=_torchspec_converted("minimax_m25_eagle3", G_TORCHSPEC_FULL),
        tensors=lambda seed: canonical_tensors(G_TORCHSPEC_FULL, seed), spell=_midlayer,
        target=_target(G_TORCHSPEC_FULL, 62, "minimax_m2"),
        expected=_expect(G_TORCHSPEC_FULL, Dialect.FLAT, (2, 31, 59), rope_theta=5e6, rms_norm_eps=1e-6,
                         torch_dtype="bfloat16")),
    Layout(
        name="torchspec-hf-pruned-vllm", producer="TorchSpec",
        summary="`convert_to_hf.py --prune-vocab` for vLLM (Qwen3-8B template): `layers.0.*`, own "
                "`embed_tokens`, pruned `lm_head`, `t2d` + `d2t`",
        sources=TORCHSPEC_CONVERTER + _in(TORCHSPEC, "torchspec/data/preprocessing.py"),
        template="lightseekorg__TorchSpec-configs-qwen3_8b_eagle3",
        config=_torchspec_converted("qwen3_8b_eagle3", G_TORCHSPEC_PRUNED),
        tensors=lambda seed: canonical_tensors(G_TORCHSPEC_PRUNED, seed),
        target=_target(G_TORCHSPEC_PRUNED, 36, "qwen3"),
        expected=_expect(G_TORCHSPEC_PRUNED, Dialect.FLAT, (2, 18, 33), rope_theta=1e6, rms_norm_eps=1e-6,
                         torch_dtype="bfloat16")),
]


LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in
                              MODELOPT_LAYOUTS + SPECULATORS_LAYOUTS + SPECFORGE_LAYOUTS + TORCHSPEC_LAYOUTS}


def build(layout: Layout, directory: str, seed: int) -> str:
    """Write ``layout`` as a tiny checkpoint into ``directory`` (a fresh directory)."""
    return write_checkpoint(directory, layout.config(), layout.checkpoint_tensors(seed))


# --- the README table ---------------------------------------------------------------------------

def config_sources() -> dict[str, tuple[str, str]]:
    """``drafter_configs/SOURCES.md``: template name (no ``.json``) -> (citation, URL)."""
    text = resources.files(__package__).joinpath("drafter_configs", "SOURCES.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[0].endswith(".json`"):
            rows[cells[0].strip("`")[: -len(".json")]] = (cells[1].replace("`", ""), cells[2])
    return rows


def _cited(sources: tuple[Source, ...]) -> list[str]:
    """One line per repository@commit, each file a link."""
    groups: dict[tuple[str, str], list[Source]] = {}
    for source in sources:
        groups.setdefault((source.repo, source.commit), []).append(source)
    return [f"{repo}@{commit[:8]}: " + ", ".join(f"[`{s.path}`]({s.url})" for s in group)
            for (repo, commit), group in groups.items()]


def markdown_table() -> str:
    """Producer, layout, status and sources of every layout, as a markdown table."""
    configs = config_sources()
    lines = ["| producer | layout | status | source |", "|---|---|---|---|"]
    for layout in LAYOUTS.values():
        status = "served" if layout.refusal is None else f"refused: {layout.refusal.reason}"
        cited = _cited(layout.sources)
        if layout.template is not None:
            citation, url = configs[layout.template]
            cited.append(f"config: [{citation}]({url})")
        lines.append(f"| {layout.producer} | `{layout.name}`: {layout.summary} | {status} | "
                     + "<br>".join(cited) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["LAYOUTS", "Layout", "Refusal", "Source", "build", "config_sources", "markdown_table"]
