"""The few facts about the target model a drafter must agree with, and the agreement checks."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Mapping

from sglang_eagle_ext.errors import DrafterError, Problem
from sglang_eagle_ext.drafter.spec import DrafterSpec


@dataclass(frozen=True)
class TargetInfo:
    source: str  # config file path, or "<config object>"
    model_type: str
    num_layers: int  # N: hidden-state indices run from 0 (embeddings) to N
    hidden_size: int
    vocab_size: int


def read_target(target: str | os.PathLike | Mapping[str, Any] | Any) -> TargetInfo:
    """Read a target from a model directory, a ``config.json`` path, a dict or an HF config.

    Multimodal configs are read through their ``text_config``.
    """
    if isinstance(target, (str, os.PathLike)):
        path = os.fspath(target)
        config_file = os.path.join(path, "config.json") if os.path.isdir(path) else path
        try:
            with open(config_file, encoding="utf-8") as handle:
                config = json.load(handle)
        except (OSError, json.JSONDecodeError) as exc:
            raise DrafterError([Problem(
                config_file, "config.json", f"cannot read the target config ({exc})",
                "pass --target a model directory or its config.json")]) from None
        source = config_file
    else:
        config = dict(target) if isinstance(target, Mapping) else target.to_dict()
        source = "<config object>"
    text = config.get("text_config") or config
    missing = [k for k in ("num_hidden_layers", "hidden_size", "vocab_size") if k not in text]
    if missing:
        raise DrafterError([Problem(source, ", ".join(missing), "not a decoder config",
                                    "pass the target model's own config.json")])
    return TargetInfo(source=source, model_type=str(text.get("model_type", config.get("model_type", ""))),
                      num_layers=int(text["num_hidden_layers"]), hidden_size=int(text["hidden_size"]),
                      vocab_size=int(text["vocab_size"]))


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
                "this drafter was trained for a different target; use the target it was trained "
                "on or fix the layer ids",
                expected=f"hidden-state indices in [0, {target.num_layers}]", found=str(list(indices))))
        elif len(set(indices)) != len(indices):
            problems.append(Problem(
                config, spec.aux_layers.source,
                f"the aux hidden states collide in a {target.num_layers}-layer target: it would "
                "capture fewer states than fc takes", "write distinct trained layer ids into the "
                "drafter config", expected="distinct indices", found=str(list(indices))))
        elif len(indices) != spec.num_aux_hidden_states:
            problems.append(Problem(
                config, "eagle_aux_hidden_state_layer_ids",
                "the default aux layers are three, but fc takes a different number",
                "write the trained layer ids into the drafter config",
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
