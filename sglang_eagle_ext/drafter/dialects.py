"""Read a drafter ``config.json`` of any dialect into checked values (no tensors involved).

Each producer keeps the same facts in different places: speculators nests the decoder geometry
in ``transformer_layer_config``; ModelOpt and SpecForge nest aux ids in ``eagle_config``; NeMo
writes the *target's* config with its depth in ``num_hidden_layers``. Where each fact lives is
declared once, on the fields of :class:`~.spec.DrafterSpec`; this module detects the producer,
reads every declared key with its type and range checked, and reports keys it does not know
(a near-miss of a key it reads is an error: a misspelt flag would otherwise silently take its
default). NeMo Automodel keeps the aux ids it trained with in its run config beside the weights
instead (:func:`with_run_config`). :mod:`.reader` combines these values with the tensors.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import typing
from dataclasses import dataclass, field, replace
from typing import Any

from sglang_eagle_ext.drafter.spec import (REQUIRED, AuxLayers, Dialect, DrafterSpec, IdConvention,
                                           Key, Place, aux_ids_fix, declarations, default_of)
from sglang_eagle_ext.drafter.tensors import JSON_FILE_LIMIT
from sglang_eagle_ext.errors import Problem

PARALLEL_DRAFTING_ARCHITECTURES = frozenset({
    "PEagleDraftModel", "PEagleSpeculator", "PeagleLlamaForCausalLM", "PeagleQwen3ForCausalLM"})
MLA_ARCHITECTURES = frozenset({"Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"})
FLAT_ARCHITECTURES = frozenset({"LlamaForCausalLMEagle3", "LlamaForCausalLM", "Eagle3Qwen3ForCausalLM",
                                "LlamaForCausalLMEagle3Deep"})  # the last: ModelOpt's Megatron multi-layer export
# ModelOpt's Megatron export: its training normalises layer 0's hidden input once (megatron_eagle.py's
# TransformerLayer input_layernorm), unlike its HF EAGLE module.
MEGATRON_ARCHITECTURES = frozenset({"LlamaForCausalLMEagle3Deep"})
# `model_type`s of MLA targets: NeMo saves their MLA drafters under its Llama drafter's name.
MLA_MODEL_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k3", "kimi_k25"})
# `architectures[0]` -> dialect, for the producers that name their own class.
_NAMED_ARCHITECTURES = {"LlamaEagle3DraftModel": Dialect.NEMO, "Eagle3LlamaForCausalLM": Dialect.ANGELSLIM,
                        "Eagle3Speculator": Dialect.SPECULATORS, "Eagle3DraftModel": Dialect.SPECULATORS}
# Architectures only EAGLE-3 drafters use (SafeAILab's `LlamaForCausalLM` is told apart from a
# target by its `draft_vocab_size`, see `is_drafter_config`).
DRAFTER_ARCHITECTURES = frozenset(FLAT_ARCHITECTURES - {"LlamaForCausalLM"}) | frozenset(_NAMED_ARCHITECTURES)
_SPECULATORS_KEYS = ("speculators_model_type", "speculators_config", "transformer_layer_config")
_MODELOPT_EAGLE_KEYS = frozenset({"use_input_layernorm_in_first_layer", "next_layer_regular",
                                  "use_last_layernorm", "use_mtp_layernorm", "parallel_draft_step",
                                  "parallel_draft_heads_num_layers"})
_PARALLEL_DRAFTING_KEYS = ("mask_token_id", "pard_token", "ptd_token_id")

# Producers whose trainers concatenate the aux states in the order the ids are written (SGLang and
# vLLM capture them in layer order), with the line that does it.
WRITTEN_ORDER_TRAINERS = {
    Dialect.ANGELSLIM: "AngelSlim's trainer (angelslim==0.5.0 angelslim/compressor/speculative/train/models/"
                       "target/target_model_wrapper.py:627)",
    Dialect.NEMO: "NeMo Automodel's trainer (nemo-automodel==0.7.0 nemo_automodel/components/speculative/eagle/"
                  "target.py:361)",
}

PEAGLE_FIX = ("P-EAGLE (parallel drafting) heads cannot be served by SGLang's EAGLE3 worker; "
              "serve this head with vLLM (parallel drafting), or train a plain EAGLE-3 drafter")

# Keys that producers write and no engine reads for a drafter (HF config boilerplate, producer
# bookkeeping, the target facts NeMo copies). Known, so not reported as misspellings.
_BOILERPLATE = frozenset({
    "_name_or_path", "architectures", "model_type", "transformers_version", "attention_dropout",
    "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "mlp_bias", "pretraining_tp",
    "use_cache", "max_window_layers", "use_sliding_window", "chunk_size_feed_forward", "id2label",
    "label2id", "is_encoder_decoder", "output_attentions", "output_hidden_states", "problem_type",
    "return_dict", "tie_word_embeddings", "auto_map", "quantization_config",
    "speculators_model_type", "speculators_version", "speculators_config", "transformer_layer_config",
    "has_no_defaults_at_init", "target_model_type", "parallel_drafting", "eagle_config",
    *_MODELOPT_EAGLE_KEYS})
_CLOSE_MATCH = 0.85  # difflib ratio from which an unknown key counts as a misspelling
# Largest vocabulary accepted: 16 times the largest released tokenizer (Gemma's 262,144). The
# vocabulary map, the one tensor read while checking a drafter, is sized by it, so the memory a
# check can take stays bounded whatever a config claims.
MAX_VOCAB = 1 << 22
_MAXIMA = {"vocab_size": MAX_VOCAB, "draft_vocab_size": MAX_VOCAB}


def detect_dialect(config: dict[str, Any], config_file: str) -> tuple[Dialect, list[Problem]]:
    """The producer of ``config``; P-EAGLE, MLA and unknown heads are problems."""
    architecture = _architecture(config)
    eagle_config = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    parallel_reasons = []
    if architecture in PARALLEL_DRAFTING_ARCHITECTURES:
        parallel_reasons.append(("architectures", f"architectures = {architecture!r}"))
    if config.get("speculators_model_type") == "peagle":
        parallel_reasons.append(("speculators_model_type", "speculators_model_type = 'peagle'"))
    if config.get("parallel_drafting") is True:
        parallel_reasons.append(("parallel_drafting", "parallel_drafting = true"))
    parallel_reasons += [(key, f"{key} is set") for key in _PARALLEL_DRAFTING_KEYS if config.get(key) is not None]
    if parallel_reasons:
        return Dialect.FLAT, [Problem(config_file, parallel_reasons[0][0], "this is a P-EAGLE / parallel-"
                                      "drafting head (" + "; ".join(r for _, r in parallel_reasons) + ")",
                                      PEAGLE_FIX)]
    step = eagle_config.get("parallel_draft_step")
    if isinstance(step, int) and not isinstance(step, bool) and step > 1:
        return Dialect.MODELOPT, [Problem(
            config_file, "eagle_config.parallel_draft_step", f"a ModelOpt EagleMedusa head ({step} parallel "
            "draft steps with Medusa heads)", "SGLang's EAGLE3 worker serves one draft step per forward; export "
            "the head with parallel_draft_step: 1, or serve it with TensorRT-LLM")]
    if architecture in MLA_ARCHITECTURES or (architecture == "LlamaEagle3DraftModel"
                                             and config.get("model_type") in MLA_MODEL_TYPES):
        return Dialect.FLAT, [Problem(
            config_file, "architectures" if architecture in MLA_ARCHITECTURES else "model_type",
            f"an MLA (DeepSeek/Kimi) drafter ({architecture}, model_type {config.get('model_type')!r})",
            "serve it with SGLang's built-in Eagle3DeepseekV2ForCausalLM (disable this plugin with "
            "SGLANG_EAGLE_EXT=0); this package serves Llama/Qwen3-layer drafters")]
    quantization = config.get("quantization_config")
    if quantization is not None:
        method = _quantization_method(quantization)
        return Dialect.FLAT, [Problem(
            config_file, "quantization_config", f"a quantized drafter ({method!r})", "serve the unquantized "
            "export of this drafter: its weight scales are not read by this package")]
    if any(k in config for k in _SPECULATORS_KEYS):
        return Dialect.SPECULATORS, []
    if architecture in _NAMED_ARCHITECTURES:
        return _NAMED_ARCHITECTURES[architecture], []
    if "parallel_drafting" in config:  # NeMo writes it into every config, also after its serve helpers
        return Dialect.NEMO, []         # rename the architecture (the config stays the target's)
    if _MODELOPT_EAGLE_KEYS & set(eagle_config):
        return Dialect.MODELOPT, []
    if architecture in FLAT_ARCHITECTURES:
        return Dialect.FLAT, []
    known = sorted(FLAT_ARCHITECTURES | set(_NAMED_ARCHITECTURES))
    return Dialect.FLAT, [Problem(
        config_file, "architectures", "not an EAGLE-3 drafter config this package can read",
        "point at an EAGLE-3 drafter directory (its config.json names one of the known "
        "architectures, or is a speculators config)",
        expected=" | ".join(known), found=json.dumps(config.get("architectures")))]


def _quantization_method(quantization: Any) -> Any:
    """HF's ``quant_method``, or the ``quantization.quant_algo`` of the quant config that
    ModelOpt's EAGLE exporter stores as it is (no ``quant_method`` there)."""
    if not isinstance(quantization, dict):
        return quantization
    nested = quantization.get("quantization")
    if quantization.get("quant_method") is None and isinstance(nested, dict):
        return nested.get("quant_algo")
    return quantization.get("quant_method")


def is_drafter_config(config: Any) -> bool:
    """True for an EAGLE-3 drafter config of any dialect (P-EAGLE and MLA heads included, so that
    they are refused clearly), False for a target model's config."""
    if not isinstance(config, dict):
        return False
    architecture = _architecture(config)
    return (architecture in DRAFTER_ARCHITECTURES | PARALLEL_DRAFTING_ARCHITECTURES | MLA_ARCHITECTURES
            or any(k in config for k in _SPECULATORS_KEYS)
            or (architecture == "LlamaForCausalLM" and "draft_vocab_size" in config))


def _architecture(config: dict[str, Any]) -> str:
    architectures = config.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return architectures[0]
    return ""


@dataclass
class ConfigValues:
    """What ``config.json`` says, checked: ``values`` per declared field (defaults filled in),
    ``stated`` the fields the file states itself, with the key each was read from."""

    dialect: Dialect
    file: str
    values: dict[str, Any] = field(default_factory=dict)
    stated: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class _Places:
    """The dicts of one config that keys are looked up in."""

    def __init__(self, config: dict, dialect: Dialect, config_file: str, problems: list[Problem]):
        self.dialect = dialect
        self.dicts = {Place.TOP: config, Place.LAYER: config, Place.EAGLE: {}}
        for place, key in ((Place.EAGLE, "eagle_config"), (Place.LAYER, "transformer_layer_config")):
            if key == "transformer_layer_config" and dialect is not Dialect.SPECULATORS:
                continue
            value = config.get(key)
            if isinstance(value, dict):
                self.dicts[place] = value
            elif value is not None or place is Place.LAYER:
                problems.append(Problem(config_file, key, "must be a JSON object",
                                        "write it as the producer does: an object of settings",
                                        found=_shown(value)))

    def lookup(self, key: Key) -> tuple[bool, Any]:
        value: Any = self.dicts[key.place]
        for part in key.name.split("."):
            if not isinstance(value, dict) or part not in value:
                return False, None
            value = value[part]
        return True, value


def read_config_values(config: Any, config_file: str, problems: list[Problem]) -> ConfigValues | None:
    """Detect the dialect and read every declared field of ``config``; append every problem.

    Returns None when the dialect itself is refused (P-EAGLE, MLA, unknown) or the file is not a
    JSON object; other problems leave the values partial and are reported together.
    """
    if not isinstance(config, dict):
        problems.append(Problem(config_file, "<top level>", "a drafter config must be a JSON object of "
                                "settings", "restore the config.json written with the checkpoint (re-download "
                                "or re-export it)", found=f"a JSON {type(config).__name__}"))
        return None
    dialect, refused = detect_dialect(config, config_file)
    if refused:
        problems.extend(refused)
        return None
    places = _Places(config, dialect, config_file, problems)
    result = ConfigValues(dialect, config_file)
    hints = typing.get_type_hints(DrafterSpec)
    for name, declaration in declarations().items():
        found = [(key, value) for key in declaration.keys if key.read_by(dialect)
                 for present, value in [places.lookup(key)] if present and value is not None]
        parser = _SPECIAL.get(name)
        if parser is not None:
            value = parser(found, places, result, problems)
        elif found:
            key, raw = found[0]
            value = _checked(raw, hints[name], key.path(dialect), config_file, problems)
        elif declaration.default is REQUIRED and declaration.keys:
            problems.append(Problem(config_file, " / ".join(k.path(dialect) for k in declaration.keys),
                                    "required decoder geometry is missing",
                                    "copy this key from the config the drafter was trained with"))
            value = None
        else:
            value = None if declaration.tensors or declaration.default is REQUIRED else \
                default_of(declaration, result.values)
        if found:
            result.stated[name] = found[0][0].path(dialect)
            maximum = _MAXIMA.get(name)
            if maximum is not None and isinstance(value, int) and value > maximum:
                problems.append(Problem(config_file, result.stated[name], "larger than any tokenizer's "
                                        "vocabulary", "write the vocabulary size the drafter was trained "
                                        "with", expected=f"at most {maximum}", found=str(value)))
                value = None
        result.values[name] = value
    _check_unknown_keys(places, config_file, problems, result.notes)
    return result


def _shown(value: Any) -> str:
    return json.dumps(value)[:80] if not isinstance(value, str) else repr(value)[:80]


def _checked(raw: Any, hint: Any, path: str, config_file: str, problems: list[Problem]) -> Any:
    """``raw`` as the field's type (``int``, ``float``, ``bool``, ``str``, optionally ``| None``);
    sizes must be positive, floats finite and positive."""
    kinds = [k for k in typing.get_args(hint) if k is not type(None)] or [hint]
    kind = kinds[0]
    ok = {int: isinstance(raw, int) and not isinstance(raw, bool),
          float: isinstance(raw, (int, float)) and not isinstance(raw, bool),
          bool: isinstance(raw, bool), str: isinstance(raw, str)}.get(kind, True)
    if not ok:
        problems.append(Problem(config_file, path, f"must be {_KIND_NAMES[kind]}",
                                f"write {path} as a JSON {_KIND_NAMES[kind]}, as the producer does",
                                expected=_KIND_NAMES[kind], found=f"{_shown(raw)} ({type(raw).__name__})"))
        return None
    if kind is int and raw < 1 or kind is float and not (math.isfinite(raw) and raw > 0):
        problems.append(Problem(config_file, path, "out of range", "write the value the drafter was "
                                "trained with", expected="a positive number", found=_shown(raw)))
        return None
    return float(raw) if kind is float else raw


_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


# --- fields whose reading is more than "first key present, checked type" ---------------------

def _architecture_value(found, places, result, problems):
    return _architecture(places.dicts[Place.TOP])


def _layer_kind(found, places, result, problems):
    qwen3 = result.values["architecture"] == "Eagle3Qwen3ForCausalLM" or (
        result.dialect is Dialect.SPECULATORS and places.dicts[Place.LAYER].get("model_type") == "qwen3")
    return "qwen3" if qwen3 else "llama"


def _rope_scaling(found, places, result, problems):
    """``rope_scaling``, or transformers 5's ``rope_parameters`` when it is not plain RoPE."""
    for key, raw in found:
        path = key.path(result.dialect)
        if not isinstance(raw, dict):
            problems.append(Problem(result.file, path, "must be a JSON object", "write the RoPE "
                                    "settings the drafter was trained with", found=_shown(raw)))
            return None
        scaling = {k: v for k, v in raw.items() if k != "rope_theta"}
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind != "default":
            return json.dumps(scaling, sort_keys=True)
    return None


def _sliding_window(found, places, result, problems):
    if not found or places.dicts[Place.LAYER].get("use_sliding_window", True) is False:
        return None
    key, raw = found[0]
    return _checked(raw, int, key.path(result.dialect), result.file, problems)


def _layer_types(found, places, result, problems):
    """As written (checked against the layer count by the reader); None when absent."""
    if not found:
        return None
    key, raw = found[0]
    allowed = ("full_attention", "sliding_attention")
    if not isinstance(raw, list) or not all(t in allowed for t in raw):
        problems.append(Problem(result.file, key.path(result.dialect), "must list one attention type "
                                "per draft layer", "use the values " + " / ".join(allowed), found=_shown(raw)))
        return None
    if "sliding_attention" in raw and result.values["sliding_window"] is None:
        problems.append(Problem(result.file, "sliding_window", "layer_types has sliding layers but no "
                                "window size", "set sliding_window to the trained window"))
    return tuple(raw)


def _ids(raw: Any, path: str, result: ConfigValues, problems: list[Problem]) -> tuple[int, ...] | None:
    if not isinstance(raw, list) or not raw or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in raw):
        problems.append(Problem(result.file, path, "aux layer ids must be a non-empty list of integers",
                                "write the trained layer ids as a JSON list, or remove the key",
                                found=_shown(raw)))
        return None
    ids = tuple(raw)
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        problems.append(Problem(
            result.file, path, f"duplicate aux layer ids {duplicates}: the target would capture "
            "fewer hidden states than fc expects", "list each trained layer once",
            expected="distinct ids", found=str(list(ids))))
    if min(ids) < 0:
        problems.append(Problem(result.file, path, "negative aux layer id",
                                "use non-negative layer ids", found=str(list(ids))))
    return ids


def _aux_layers(found, places, result, problems):
    """Each key's integers read with that key's convention (:attr:`Key.ids`): nested ids are
    SGLang / SpecForge / ModelOpt / NeMo's (output of layer j = index j+1), top-level
    ``eagle_aux_hidden_state_layer_ids`` are vLLM's (speculators and vLLM-converted checkpoints:
    indices as they are), AngelSlim's ``aux_hidden_states_layer_ids`` are layer outputs (its
    trainer taps ``hidden_states[id + 1]``). Several keys must name the same hidden states."""
    if result.values["use_aux_hidden_state"] is False:  # ModelOpt writes [] for heads without aux states
        found = [(key, raw) for key, raw in found if raw != []]
    read = [(key, ids) for key, raw in found
            for ids in [_ids(raw, key.path(result.dialect), result, problems)] if ids is not None]
    if not read:
        return default_of(declarations()["aux_layers"], result.values)
    layers = [AuxLayers(ids, key.ids, key.path(result.dialect)) for key, ids in read]
    first = layers[0]
    _check_concatenation_order(result.dialect, first, result.file, problems)
    for other in layers[1:]:
        if first.hidden_state_indices() != other.hidden_state_indices():
            problems.append(Problem(
                result.file, other.source,
                f"{first.source} ({_convention_words(first.convention)}) and {other.source} "
                f"({_convention_words(other.convention)}) name different hidden states",
                "keep only the ids the drafter was trained with; " + aux_ids_fix(),
                expected=f"hidden states {list(first.hidden_state_indices())}",
                found=f"hidden states {list(other.hidden_state_indices())}"))
    return first


def _check_concatenation_order(dialect: Dialect, layers: AuxLayers, file: str, problems: list[Problem]) -> None:
    """A trainer that concatenated the aux states in the order its ids are written trained fc on
    permuted inputs wherever that order is not ascending (SGLang captures in layer order)."""
    if dialect in WRITTEN_ORDER_TRAINERS and list(layers.declared) != sorted(layers.declared):
        problems.append(Problem(
            file, layers.source, f"{WRITTEN_ORDER_TRAINERS[dialect]} concatenates the aux hidden "
            f"states into fc in the order the ids are written ({list(layers.declared)}), but SGLang's target "
            "captures them in layer order, so fc would take its inputs permuted",
            "serve a drafter trained with the ids in ascending order (this package does not reorder fc's "
            "weights, and reordering the ids alone would feed fc the wrong states)",
            expected="ascending ids", found=str(list(layers.declared))))


def _convention_words(convention: IdConvention) -> str:
    return ("id j = output of layer j = hidden state j+1" if convention is IdConvention.LAYER_OUTPUT
            else "id k = hidden state k, the input of layer k")


def _norm_before_residual(found, places, result, problems):
    if found:
        key, raw = found[0]
        return _checked(raw, bool, key.path(result.dialect), result.file, problems)
    if result.dialect is Dialect.SPECULATORS:
        # vLLM's speculators adapter treats a missing key as true; match the engine these
        # checkpoints were validated on, and say so.
        result.notes.append("norm_before_residual absent: assumed true, as vLLM's speculators reader does")
        return True
    return False


def _hidden_input_layernorm(found, places, result, problems):
    if found:
        return _first_checked(found, bool, result, problems)
    if result.dialect is Dialect.MODELOPT and result.values["architecture"] not in MEGATRON_ARCHITECTURES:
        result.notes.append("layer 0's hidden input is normalised by input_layernorm, then hidden_norm, as "
                            "ModelOpt's HF EAGLE module trains it (stock SGLang applies hidden_norm alone)")
        return True
    return False


def _norm_output(found, places, result, problems):
    """Whether the carried state is the final-normed one (see the field's declaration): the
    package's own ``carry_normed_state`` wherever written; ``norm_output`` as its producer means
    it, which for the flat layout is SpecForge's final-norm-before-lm_head switch."""
    if not found:
        return False
    key, raw = found[0]
    path = key.path(result.dialect)
    value = _checked(raw, bool, path, result.file, problems)
    if value is None or key.name != "norm_output" or result.dialect is not Dialect.FLAT:
        return value
    if not value:
        problems.append(Problem(
            result.file, path, "SpecForge's norm_output: false trains lm_head on the hidden state "
            "without the final norm; SGLang and vLLM always apply the final norm before lm_head, so "
            "the drafts would not be the ones trained", "retrain with norm_output: true (SpecForge's "
            "default); if the drafter comes from speculators or NeMo Automodel, keep the config that "
            "producer wrote (their norm_output means a post-norm carried state)",
            expected="true, or the key absent", found="false"))
        return None
    result.notes.append("norm_output = true read as SpecForge's: the final norm feeds lm_head and the "
                        "carried hidden state is the pre-norm one (as SpecForge trains it)")
    return False


def _num_layers_claim(found, places, result, problems):
    if result.dialect is Dialect.NEMO:
        depth = places.dicts[Place.TOP].get("num_hidden_layers")
        result.notes.append(f"num_hidden_layers = {depth} is the target's depth (NeMo Automodel); the "
                            "layer count is taken from the tensors")
    return _first_checked(found, int, result, problems)


def _first_checked(found, kind, result, problems):
    if not found:
        return None
    key, raw = found[0]
    return _checked(raw, kind, key.path(result.dialect), result.file, problems)


def _int_claim(found, places, result, problems):
    return _first_checked(found, int, result, problems)


_SPECIAL = {
    "architecture": _architecture_value,
    "num_layers": _num_layers_claim,
    "layer_kind": _layer_kind,
    "rope_scaling": _rope_scaling,
    "sliding_window": _sliding_window,
    "layer_types": _layer_types,
    "aux_layers": _aux_layers,
    "num_aux_hidden_states": _int_claim,
    "draft_vocab_size": _int_claim,
    "norm_before_residual": _norm_before_residual,
    "hidden_input_layernorm": _hidden_input_layernorm,
    "norm_output": _norm_output,
}


# --- keys nobody declared ----------------------------------------------------------------------

def _declared_names(place: Place, dialect: Dialect) -> set[str]:
    """First segments of the declared keys a dialect keeps in ``place`` (a flat config keeps
    the decoder geometry at the top level)."""
    places = {place, Place.LAYER} if place is Place.TOP and dialect is not Dialect.SPECULATORS else {place}
    return {key.name.split(".")[0] for declaration in declarations().values() for key in declaration.keys
            if key.place in places and key.read_by(dialect)}


def _check_unknown_keys(places: _Places, config_file: str, problems: list[Problem], notes: list[str]) -> None:
    """Near-misses of a declared key are errors ("did you mean"); other unknown keys are notes."""
    checked = [(Place.TOP, "")] + [(p, prefix) for p, prefix in
                                   ((Place.LAYER, "transformer_layer_config."), (Place.EAGLE, "eagle_config."))
                                   if places.dicts[p] is not places.dicts[Place.TOP]]
    for place, prefix in checked:
        declared = _declared_names(place, places.dialect)
        known = declared | _BOILERPLATE
        ignored = []
        for key in places.dicts[place]:
            if not isinstance(key, str) or key in known:
                continue
            near = difflib.get_close_matches(key, sorted(declared), n=1, cutoff=_CLOSE_MATCH)
            if near and near[0] in _id_key_names():
                problems.append(Problem(config_file, prefix + key, "unknown key, close to an aux-layer-id key: "
                                        "not read, so the target would capture the default layers",
                                        aux_ids_fix(_listed_ints(places.dicts[place][key])),
                                        found=prefix + key))
            elif near and near[0] not in places.dicts[place]:
                problems.append(Problem(config_file, prefix + key, "unknown key: no producer writes it, "
                                        "so the setting it was meant for would silently take its default",
                                        f"did you mean {prefix + near[0]!r}? rename the key",
                                        expected=prefix + near[0], found=prefix + key))
            else:
                near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=_CLOSE_MATCH)
                ignored.append(key + (f" (did you mean {near[0]!r}?)" if near else ""))
        if ignored:
            notes.append(f"keys no engine reads, ignored: {prefix}" + f", {prefix}".join(ignored))


def _id_key_names() -> set[str]:
    """Names of the keys whose integers mean layers by a convention of their place."""
    return {key.name for declaration in declarations().values() for key in declaration.keys if key.ids}


def _listed_ints(value: Any) -> list[int] | None:
    return value if isinstance(value, list) and all(isinstance(v, int) for v in value) else None

# --- NeMo's run config: trained settings kept beside the weights, not in config.json -------------
# NeMo Automodel's EAGLE-3 recipe saves the target's ``config.json`` (with its draft keys over it) and
# records the aux layer ids it trained with only in the run config it dumps next to the weights:
# ``epoch_*_step_*/config.yaml``, ``recipe_args.aux_layer_ids`` (nemo-automodel==0.7.0
# nemo_automodel/recipes/llm/train_eagle3.py:1681 -> components/checkpoint/checkpointing.py:2410),
# absent when the run used its default ``[1, N//2-1, N-4]``. Its ids are layer outputs (a forward hook
# on layer j's output, components/speculative/eagle/target.py:278,285), concatenated in the order
# written (target.py:361). The weights sit in ``model/consolidated/`` (or ``model/``) under that folder.

NEMO_RUN_CONFIG = "config.yaml"
_NEMO_IDS_PATH = ("recipe_args", "aux_layer_ids")
_FIELD = ".".join(_NEMO_IDS_PATH)


def _find_nemo_run_config(directory: str) -> str | None:
    """The run config of the NeMo checkpoint whose weights are in ``directory`` (the folder itself,
    ``model/`` or ``model/consolidated/`` of a step folder)."""
    folder = directory
    for _ in range(3):
        path = os.path.join(folder, NEMO_RUN_CONFIG)
        if os.path.isfile(path):
            return path
        folder = os.path.dirname(folder)
    return None


def _nemo_aux_layers(directory: str, config_file: str, stated_in_config: bool,
                    problems: list[Problem]) -> tuple[AuxLayers | None, str | None]:
    """The aux layers NeMo trained with, from its run config: ``(layers, run config path)``.
    ``layers`` is None where the run config names none (NeMo's default taps, the package's) or
    where ``config.json`` states the ids itself; a missing or unreadable run config is a problem
    unless ``config.json`` states them."""
    path = _find_nemo_run_config(directory)
    if path is None:
        if not stated_in_config:
            problems.append(Problem(
                config_file, "aux layer ids", "a NeMo Automodel checkpoint whose run config (config.yaml, which "
                f"holds the trained {_FIELD}) is not beside its weights, and config.json names no aux layers: the "
                "taps it was trained with are unknown", "serve the step folder as NeMo wrote it (epoch_*_step_*/, "
                "holding config.yaml and model/), or " + aux_ids_fix() + f" (NeMo's {_FIELD}; [1, N//2-1, N-4] "
                "if the run set none)"))
        return None, None
    run_config = _load_yaml(path, problems)
    if run_config is None:
        return None, path
    ids: Any = run_config
    for part in _NEMO_IDS_PATH:
        ids = ids.get(part) if isinstance(ids, dict) else None
    if ids is None:
        return None, path
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                       for i in ids) or len(set(ids)) != len(ids):
        problems.append(Problem(path, _FIELD, "must list distinct non-negative layer ids",
                                "restore the run config NeMo wrote with this checkpoint", found=repr(ids)[:80]))
        return None, path
    return AuxLayers(tuple(ids), IdConvention.LAYER_OUTPUT, f"{NEMO_RUN_CONFIG}: {_FIELD}"), path


def _load_yaml(path: str, problems: list[Problem]) -> dict | None:
    import yaml

    try:
        if os.path.getsize(path) > JSON_FILE_LIMIT:
            raise ValueError(f"{os.path.getsize(path)} bytes, far larger than a run config")
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
        if not isinstance(data, dict):
            raise ValueError(f"a YAML {type(data).__name__}, not a mapping of settings")
    except (OSError, ValueError, yaml.YAMLError) as exc:
        problems.append(Problem(path, NEMO_RUN_CONFIG, f"unreadable run config ({str(exc).splitlines()[0]})",
                                "restore the config.yaml NeMo wrote with this checkpoint"))
        return None
    return data


def nemo_run_config_text(aux_layer_ids: list[int] | None) -> str:
    """A run config as NeMo's recipe dumps it, holding only what this package reads (for writers of
    NeMo's layout); ``None``: the run used NeMo's default ids, which it then does not write."""
    lines = ["recipe_args:", "  ttt_steps: 1"]
    if aux_layer_ids is not None:
        lines += ["  aux_layer_ids:"] + [f"  - {i}" for i in aux_layer_ids]
    return "\n".join(lines) + "\n"


def with_run_config(directory: str, config: ConfigValues) -> tuple[ConfigValues, str | None, list[Problem]]:
    """``config`` with NeMo's trained aux ids from the run config beside its weights (config.json,
    the target's, names none); the run config's path where one was read, and its problems."""
    if config.dialect is not Dialect.NEMO:
        return config, None, []
    problems: list[Problem] = []
    stated = "aux_layers" in config.stated
    layers, path = _nemo_aux_layers(directory, config.file, stated, problems)
    if layers is None:
        if path is not None and not stated:
            note = f"{path} names no aux_layer_ids: NeMo's default taps (the run set none)"
            return replace(config, notes=[*config.notes, note]), path, problems
        return config, path, problems
    if stated and config.values["aux_layers"].hidden_state_indices() != layers.hidden_state_indices():
        problems.append(Problem(config.file, config.stated["aux_layers"], "names other aux layers than the run "
                                f"config NeMo trained with ({path}: {layers.source})", aux_ids_fix(layers.declared)
                                + "; NeMo's run config holds the ids it trained with (layer outputs)",
                                expected=f"hidden states {list(layers.hidden_state_indices())}",
                                found=f"hidden states {list(config.values['aux_layers'].hidden_state_indices())}"))
        return config, path, problems
    _check_concatenation_order(config.dialect, layers, path, problems)
    return replace(config, values={**config.values, "aux_layers": layers},
                   stated={**config.stated, "aux_layers": layers.source}), path, problems
