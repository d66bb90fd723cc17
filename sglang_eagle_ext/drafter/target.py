"""The few facts about the target model a drafter must agree with, and the agreement checks."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Mapping

from sglang_eagle_ext.errors import DrafterError, Problem
from sglang_eagle_ext.drafter.spec import DrafterSpec, aux_ids_fix
from sglang_eagle_ext.drafter.tensors import JSON_FILE_LIMIT


@dataclass(frozen=True)
class TargetInfo:
    source: str  # config file path, or "<config object>"
    model_type: str
    num_layers: int  # N: hidden-state indices run from 0 (embeddings) to N
    hidden_size: int
    vocab_size: int


# Where target configs keep the three facts, first present wins: the canonical name, then the
# aliases SGLang's and transformers' decoder config classes accept for it (their
# ``attribute_map`` or ``__init__``): ``num_layers`` (SGLang's LongcatFlashConfig derives
# num_hidden_layers from it; ChatGLM, EXAONE, GPT-Neo), ``n_layers`` (DBRX, MPT), ``n_layer``
# (GPT-2, GPT-J, CodeGen, BLOOM); ``d_model`` (DBRX, MPT), ``n_embd`` (GPT-2, GPT-J, CodeGen),
# ``n_embed`` (BLOOM's published configs); ``padded_vocab_size`` (ChatGLM).
TARGET_KEYS = {
    "num_layers": ("num_hidden_layers", "num_layers", "n_layers", "n_layer"),
    "hidden_size": ("hidden_size", "d_model", "n_embd", "n_embed"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
}
# Multimodal configs keep the language model's config in one of these, in SGLang's order of
# preference (``get_hf_text_config``); Qwen-Omni nests it once more in thinker_config.text_config.
_TEXT_CONFIG_KEYS = ("thinker_config", "llm_config", "language_config", "text_config")


def read_target(target: str | os.PathLike | Mapping[str, Any] | Any) -> TargetInfo:
    """Read a target from a model directory, a ``config.json`` path, a dict or an HF config.

    Multimodal configs are read through their language model's config; depth, width and
    vocabulary may be spelt as any config class SGLang loads spells them (:data:`TARGET_KEYS`).
    """
    if isinstance(target, (str, os.PathLike)):
        path = os.fspath(target)
        config_file = os.path.join(path, "config.json") if os.path.isdir(path) else path
        try:
            if os.path.getsize(config_file) > JSON_FILE_LIMIT:
                raise ValueError(f"{os.path.getsize(config_file)} bytes, far larger than a model config")
            with open(config_file, encoding="utf-8") as handle:
                config = json.load(handle)
        except (OSError, ValueError) as exc:
            raise DrafterError([Problem(
                config_file, "config.json", f"cannot read the target config ({exc})",
                "pass --target a model directory or its config.json")]) from None
        source = config_file
    elif isinstance(target, Mapping):
        config, source = dict(target), "<config object>"
    else:  # an HF config object: its class resolves its own aliases
        config, source = _object_values(target), "<config object>"
    if not isinstance(config, dict):
        raise DrafterError([Problem(source, "<top level>", "a model config must be a JSON object",
                                    "pass the target model's own config.json", expected="a JSON object",
                                    found=f"a JSON {type(config).__name__}")])
    text = _text_config(config)
    values, problems = {}, []
    for fact, keys in TARGET_KEYS.items():
        present = [(k, text[k]) for k in keys if text.get(k) is not None]
        if not present:
            problems.append(Problem(source, " / ".join(keys), "not a decoder config: no "
                                    + {"num_layers": "depth", "hidden_size": "width",
                                       "vocab_size": "vocabulary"}[fact] + " in any spelling SGLang reads",
                                    "pass the target model's own config.json"))
            continue
        key, value = present[0]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(Problem(source, key, "must be a positive integer", "pass the target model's "
                                    "own config.json", expected="a positive integer",
                                    found=json.dumps(value)[:80]))
            continue
        values[fact] = value
    if problems:
        raise DrafterError(problems)
    model_type = text.get("model_type") or config.get("model_type") or ""
    return TargetInfo(source=source, model_type=str(model_type), **values)


def _text_config(config: dict) -> dict:
    """The language model's part of a (possibly multimodal) config."""
    for key in _TEXT_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, dict):
            nested = sub.get("text_config")
            return nested if key == "thinker_config" and isinstance(nested, dict) else sub
    return config


def _object_values(config: Any) -> Any:
    """An HF config object as a dict whose canonical keys are the class's own answers (attribute
    maps and ``__init__`` derivations resolved), its language model's config included."""
    values = config.to_dict() if hasattr(config, "to_dict") else dict(vars(config))
    for key in _TEXT_CONFIG_KEYS:
        sub = getattr(config, key, None)
        if sub is not None and not isinstance(sub, dict):
            values[key] = _object_values(sub)
    for fact in ("num_hidden_layers", "hidden_size", "vocab_size"):
        value = getattr(config, fact, None)
        if value is not None:
            values[fact] = value
    return values


def check_against_target(spec: DrafterSpec, target: TargetInfo) -> list[Problem]:
    """Everything that makes ``spec`` unusable with ``target``."""
    problems = []
    config = os.path.join(spec.path, "config.json")
    if spec.use_aux_hidden_state:
        indices = spec.aux_layers.hidden_state_indices(target.num_layers)
        bad = [i for i in indices if not 0 <= i <= target.num_layers]
        if bad:
            problems.append(Problem(
                config, spec.aux_layers.source,
                f"aux hidden states {bad} do not exist in a {target.num_layers}-layer target",
                "this drafter was trained for a different target: use the target it was trained "
                "on (if the ids are wrong, not the target: " + aux_ids_fix() + ")",
                expected=f"hidden-state indices in [0, {target.num_layers}]", found=str(list(indices))))
        elif len(set(indices)) != len(indices):
            problems.append(Problem(
                config, spec.aux_layers.source,
                f"the aux hidden states collide in a {target.num_layers}-layer target: it would "
                "capture fewer states than fc takes", aux_ids_fix(), expected="distinct indices",
                found=str(list(indices))))
        elif len(indices) != spec.num_aux_hidden_states:
            problems.append(Problem(
                config, "eagle_aux_hidden_state_layer_ids",
                "the default aux layers are three, but fc takes a different number",
                aux_ids_fix(),
                expected=f"{spec.num_aux_hidden_states} ids", found=str(list(indices))))
    if spec.target_hidden_size != target.hidden_size:
        problems.append(Problem(
            config, "target_hidden_size", "the drafter was trained on a target of another width",
            "use the target this drafter was trained for",
            expected=str(target.hidden_size), found=str(spec.target_hidden_size)))
    if spec.vocab_size != target.vocab_size:
        problems.append(Problem(
            config, "vocab_size", "the drafter's target vocabulary differs from the target's",
            "use the target this drafter was trained for",
            expected=str(target.vocab_size), found=str(spec.vocab_size)))
    return problems
