"""Read a drafter ``config.json`` of any dialect into plain facts (no tensors involved).

Each producer keeps the same facts in different places: speculators nests the decoder geometry
in ``transformer_layer_config``; ModelOpt and SpecForge nest aux ids in ``eagle_config``; NeMo
writes the *target's* config with its depth in ``num_hidden_layers``. This module knows where
each fact lives and what its integers mean; :mod:`.checkpoint` combines these facts with the
tensors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import Problem
from .spec import AuxLayers, Dialect, IdConvention

PARALLEL_DRAFTING_ARCHITECTURES = {
    "PEagleDraftModel", "PEagleSpeculator", "PeagleLlamaForCausalLM", "PeagleQwen3ForCausalLM"}
MLA_ARCHITECTURES = {"Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"}
FLAT_ARCHITECTURES = {"LlamaForCausalLMEagle3", "LlamaForCausalLM", "Eagle3Qwen3ForCausalLM"}
_MODELOPT_EAGLE_KEYS = {"use_input_layernorm_in_first_layer", "next_layer_regular",
                        "use_last_layernorm", "use_mtp_layernorm", "parallel_draft_step",
                        "parallel_draft_heads_num_layers"}
_PARALLEL_DRAFTING_KEYS = ("mask_token_id", "pard_token", "ptd_token_id")

PEAGLE_FIX = ("P-EAGLE (parallel drafting) heads cannot be served by SGLang's EAGLE3 worker; "
              "serve this head with vLLM (parallel drafting), or train a plain EAGLE-3 drafter")


@dataclass(frozen=True)
class ConfigFacts:
    """What the config says; ``None`` where it says nothing."""

    dialect: Dialect
    architecture: str
    declared_num_layers: int | None
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    hidden_act: str
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: str | None
    max_position_embeddings: int
    layer_kind: str
    attention_bias: bool
    sliding_window: int | None
    layer_types: tuple[str, ...] | None
    use_aux_hidden_state: bool
    declared_num_aux: int | None
    aux_layers: AuxLayers
    target_hidden_size: int
    fc_bias: bool
    fc_norm: bool
    norm_before_fc: bool
    norm_before_residual: bool
    norm_output: bool
    vocab_size: int
    draft_vocab_size: int | None
    tie_word_embeddings: bool
    notes: tuple[str, ...]


def detect_dialect(config: dict[str, Any], config_file: str) -> tuple[Dialect, list[Problem]]:
    """The producer of ``config``; P-EAGLE, MLA and unknown heads are problems."""
    architectures = config.get("architectures") or []
    architecture = architectures[0] if architectures else ""
    eagle_config = config.get("eagle_config") or {}
    parallel_reasons = []
    if architecture in PARALLEL_DRAFTING_ARCHITECTURES:
        parallel_reasons.append(f"architectures = {architecture!r}")
    if config.get("speculators_model_type") == "peagle":
        parallel_reasons.append("speculators_model_type = 'peagle'")
    if config.get("parallel_drafting"):
        parallel_reasons.append("parallel_drafting = true")
    if (eagle_config.get("parallel_draft_step") or 1) > 1:
        parallel_reasons.append(f"eagle_config.parallel_draft_step = {eagle_config['parallel_draft_step']}")
    parallel_reasons += [f"{key} is set" for key in _PARALLEL_DRAFTING_KEYS if config.get(key) is not None]
    if parallel_reasons:
        return Dialect.FLAT, [Problem(config_file, parallel_reasons[0].split(" ")[0],
                                      "this is a P-EAGLE / parallel-drafting head ("
                                      + "; ".join(parallel_reasons) + ")", PEAGLE_FIX)]
    if architecture in MLA_ARCHITECTURES:
        return Dialect.FLAT, [Problem(
            config_file, "architectures", f"{architecture} is an MLA (DeepSeek/Kimi) drafter",
            "serve it with SGLang's built-in Eagle3DeepseekV2ForCausalLM (disable this plugin with "
            "SGLANG_EAGLE_EXT=0); this package serves Llama/Qwen3-layer drafters")]
    if any(k in config for k in ("speculators_model_type", "speculators_config",
                                 "transformer_layer_config")):
        return Dialect.SPECULATORS, []
    if architecture == "LlamaEagle3DraftModel":
        return Dialect.NEMO, []
    if architecture == "Eagle3LlamaForCausalLM":
        return Dialect.ANGELSLIM, []
    if _MODELOPT_EAGLE_KEYS & set(eagle_config):
        return Dialect.MODELOPT, []
    if architecture in FLAT_ARCHITECTURES:
        return Dialect.FLAT, []
    known = sorted(FLAT_ARCHITECTURES | {"Eagle3LlamaForCausalLM", "LlamaEagle3DraftModel",
                                         "Eagle3Speculator", "Eagle3DraftModel"})
    return Dialect.FLAT, [Problem(
        config_file, "architectures", "not an EAGLE-3 drafter config this package can read",
        "point at an EAGLE-3 drafter directory (its config.json names one of the known "
        "architectures, or is a speculators config)",
        expected=" | ".join(known), found=repr(architecture or architectures))]


def _ids(value: Any, field: str, config_file: str, problems: list[Problem]) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        problems.append(Problem(config_file, field, "aux layer ids must be a non-empty list of integers",
                                "write the trained layer ids as a JSON list, or remove the key",
                                found=json.dumps(value)))
        return None
    ids = tuple(value)
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        problems.append(Problem(
            config_file, field, f"duplicate aux layer ids {duplicates}: the target would capture "
            "fewer hidden states than fc expects", "list each trained layer once",
            expected="distinct ids", found=str(list(ids))))
    if min(ids) < 0:
        problems.append(Problem(config_file, field, "negative aux layer id",
                                "use non-negative layer ids", found=str(list(ids))))
    return ids


def _aux_layers(config: dict, dialect: Dialect, config_file: str,
                problems: list[Problem]) -> AuxLayers:
    nested_field = "eagle_config.eagle_aux_hidden_state_layer_ids"
    nested = _ids((config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids"),
                  nested_field, config_file, problems)
    top = _ids(config.get("eagle_aux_hidden_state_layer_ids"),
               "eagle_aux_hidden_state_layer_ids", config_file, problems)
    # Top-level ids are vLLM's (speculators and vLLM-converted checkpoints): indices as-is.
    # Nested ids are SGLang/SpecForge/ModelOpt's: the output of layer j, i.e. index j + 1.
    if nested is not None and top is not None and tuple(j + 1 for j in nested) != top:
        problems.append(Problem(
            config_file, "eagle_aux_hidden_state_layer_ids",
            f"the top-level ids (vLLM convention: hidden-state indices) and {nested_field} "
            "(SGLang convention: output of layer j = index j+1) name different hidden states",
            "keep only the ids the drafter was trained with",
            expected=f"top-level {[j + 1 for j in nested]}", found=f"top-level {list(top)}"))
    if nested is not None:
        return AuxLayers(nested, IdConvention.LAYER_OUTPUT, nested_field)
    if top is not None:
        return AuxLayers(top, IdConvention.HIDDEN_STATE_INDEX, "eagle_aux_hidden_state_layer_ids")
    return AuxLayers(None, IdConvention.HIDDEN_STATE_INDEX, "default taps (no ids in config)")


def read_config_facts(config: dict[str, Any], dialect: Dialect, config_file: str,
                      problems: list[Problem]) -> ConfigFacts | None:
    """Collect the facts of ``config``; append every problem found. None if unusable."""
    notes: list[str] = []
    eagle_config = config.get("eagle_config") or {}
    layer = config
    if dialect is Dialect.SPECULATORS:
        layer = config.get("transformer_layer_config")
        if not isinstance(layer, dict):
            problems.append(Problem(config_file, "transformer_layer_config",
                                    "a speculators config needs the draft layer geometry",
                                    "re-export the drafter with speculators"))
            return None
    missing = [k for k in ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
               if layer.get(k) is None]
    if missing:
        prefix = "transformer_layer_config." if dialect is Dialect.SPECULATORS else ""
        problems.append(Problem(config_file, ", ".join(prefix + k for k in missing),
                                "required decoder geometry is missing",
                                "copy these keys from the config the drafter was trained with"))
        return None

    hidden_size = int(layer["hidden_size"])
    heads = int(layer["num_attention_heads"])
    rope_parameters = layer.get("rope_parameters") or {}
    rope_scaling = layer.get("rope_scaling")
    if rope_scaling is None and rope_parameters.get("rope_type", "default") != "default":
        rope_scaling = {k: v for k, v in rope_parameters.items() if k != "rope_theta"}
    architecture = (config.get("architectures") or [""])[0]
    qwen3_layer = (layer.get("model_type") == "qwen3" and dialect is Dialect.SPECULATORS) or \
        architecture == "Eagle3Qwen3ForCausalLM"

    sliding_window = None
    layer_types = layer.get("layer_types")
    if layer.get("use_sliding_window", True) and layer.get("sliding_window"):
        sliding_window = int(layer["sliding_window"])
    if layer_types is not None and "sliding_attention" in layer_types and sliding_window is None:
        problems.append(Problem(config_file, "sliding_window",
                                "layer_types has sliding layers but no window size",
                                "set sliding_window to the trained window"))

    if dialect is Dialect.SPECULATORS and "norm_before_residual" not in config:
        # vLLM's speculators adapter treats a missing key as True; match the engine these
        # checkpoints were validated on, and say so.
        norm_before_residual = True
        notes.append("norm_before_residual absent: assumed true, as vLLM's speculators reader does")
    else:
        norm_before_residual = bool(config.get("norm_before_residual", False))

    norm_before_fc = eagle_config.get("norm_before_fc", config.get("norm_before_fc", False))
    fc_norm = bool(config.get("fc_norm", False) or config.get("use_aux_norm", False))
    if fc_norm and norm_before_fc:
        problems.append(Problem(config_file, "fc_norm, norm_before_fc",
                                "per-aux norms and one pre-fc norm are mutually exclusive",
                                "keep the flag the drafter was trained with"))

    declared_num_layers = (layer.get("num_hidden_layers") if dialect is not Dialect.NEMO
                           else None)  # NeMo writes the target's depth there
    if dialect is Dialect.NEMO:
        notes.append(f"num_hidden_layers = {config.get('num_hidden_layers')} is the target's depth "
                     "(NeMo Automodel); the layer count is taken from the tensors")
    num_aux = config.get("num_aux_hidden_states")
    draft_vocab_size = config.get("draft_vocab_size", layer.get("draft_vocab_size"))
    target_hidden_size = config.get("target_hidden_size") or hidden_size
    return ConfigFacts(
        dialect=dialect,
        architecture=architecture,
        declared_num_layers=None if declared_num_layers is None else int(declared_num_layers),
        hidden_size=hidden_size,
        num_attention_heads=heads,
        num_key_value_heads=int(layer.get("num_key_value_heads") or heads),
        head_dim=int(layer.get("head_dim") or hidden_size // heads),
        intermediate_size=int(layer["intermediate_size"]),
        hidden_act=str(layer.get("hidden_act", "silu")),
        rms_norm_eps=float(layer.get("rms_norm_eps", 1e-6)),
        rope_theta=float(layer.get("rope_theta", rope_parameters.get("rope_theta", 10000.0))),
        rope_scaling=None if not rope_scaling else json.dumps(rope_scaling, sort_keys=True),
        max_position_embeddings=int(layer.get("max_position_embeddings", 2048)),
        layer_kind="qwen3" if qwen3_layer else "llama",
        attention_bias=bool(layer.get("attention_bias", False)),
        sliding_window=sliding_window,
        layer_types=None if layer_types is None else tuple(layer_types),
        use_aux_hidden_state=bool(eagle_config.get("use_aux_hidden_state", True)
                                  if eagle_config.get("use_aux_hidden_state") is not None else True),
        declared_num_aux=None if num_aux is None else int(num_aux),
        aux_layers=_aux_layers(config, dialect, config_file, problems),
        target_hidden_size=int(target_hidden_size),
        fc_bias=bool(config.get("bias", False)),
        fc_norm=fc_norm,
        norm_before_fc=bool(norm_before_fc),
        norm_before_residual=norm_before_residual,
        norm_output=bool(config.get("norm_output", False)),
        vocab_size=int(layer["vocab_size"]),
        draft_vocab_size=None if draft_vocab_size is None else int(draft_vocab_size),
        tie_word_embeddings=bool(layer.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        notes=tuple(notes),
    )
