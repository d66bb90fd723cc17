"""Random EAGLE-3 drafters shaped for a given target, in the SpecForge or speculators dialect.

Used by the CPU server test and by the GPU end-to-end script (``benchmarks/gpu/``): the drafter's
attention geometry and vocabulary follow the target's ``config.json``; layers, aux count,
``fc_norm`` and dialect are chosen by the caller. The aux taps are distinct hidden-state indices
spread over the target's depth.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable

import torch

from tests.kit import fixtures

DIALECTS = ("specforge", "speculators", "flat-top-level-ids")


def aux_indices(num_target_layers: int, num_aux: int) -> list[int]:
    """``num_aux`` distinct hidden-state indices in ``[1, N - 1]``, evenly spread."""
    n = num_target_layers
    if num_aux > n - 1:
        raise ValueError(f"a {n}-layer target has only {n - 1} capturable distinct states")
    return [1 + round(i * (n - 2) / max(1, num_aux - 1)) for i in range(num_aux)]


def build_matched_drafter(directory: str, target_dir: str, *, layers: int, num_aux: int,
                          fc_norm: bool, dialect: str, seed: int = 0, draft_vocab: int | None = None,
                          shape: Callable[[dict[str, torch.Tensor], dict], None] | None = None) -> str:
    """Write the drafter to ``directory``. ``shape(tensors, layer_config)``, when given, rewrites
    the random canonical tensors (and may set layer config keys) in place before they are written."""
    with open(os.path.join(target_dir, "config.json"), encoding="utf-8") as handle:
        target = json.load(handle)
    heads = target["num_attention_heads"]
    geometry = fixtures.Geometry(
        hidden=target["hidden_size"], heads=heads, kv_heads=target["num_key_value_heads"],
        head_dim=target.get("head_dim") or target["hidden_size"] // heads,
        inter=2 * target["hidden_size"], vocab=target["vocab_size"],
        draft_vocab=draft_vocab or target["vocab_size"] // 2, num_aux=num_aux,
        target_hidden=target["hidden_size"], layers=layers, fc_norm=fc_norm)
    indices = aux_indices(target["num_hidden_layers"], num_aux)
    tensors = fixtures.canonical_tensors(geometry, seed)
    if dialect in ("specforge", "flat-top-level-ids"):
        config = fixtures.shrink(fixtures.template("sgl-project__SpecForge-configs-llama3-8B-eagle3"),
                                 geometry)
        if dialect == "specforge":
            # SpecForge writes SGLang's layer-output ids: output of layer j = hidden state j + 1
            config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in indices]}
        else:
            # SpecForge's flat layout with vLLM's top-level ids (hidden-state indices): stock
            # SGLang reads this config but not these ids, and would capture its default 3 taps
            config.pop("eagle_config", None)
            config["eagle_aux_hidden_state_layer_ids"] = indices
        config["num_aux_hidden_states"] = num_aux
        if fc_norm:
            config["fc_norm"] = True
    elif dialect == "speculators":
        layer_config = fixtures.template("sgl-project__SpecForge-configs-llama3-8B-eagle3")
        config = fixtures.speculators_config(layer_config, geometry,
                                             eagle_aux_hidden_state_layer_ids=indices)
        config["fc_norm"] = fc_norm
    else:
        raise ValueError(f"dialect {dialect!r} is not one of {DIALECTS}")
    # SGLang serves the draft at the target's context length and refuses a shorter draft config
    layer_config = config.get("transformer_layer_config", config)
    layer_config["max_position_embeddings"] = target.get("max_position_embeddings", 2048)
    if shape is not None:
        shape(tensors, layer_config)
    if dialect != "speculators":
        tensors = fixtures.rename(tensors, midlayer=True)
    fixtures.write_checkpoint(directory, config, tensors)
    with open(os.path.join(directory, "matched_drafter.json"), "w", encoding="utf-8") as handle:
        json.dump({"geometry": dataclasses.asdict(geometry), "aux_hidden_state_indices": indices,
                   "dialect": dialect}, handle, indent=2)
    return directory
