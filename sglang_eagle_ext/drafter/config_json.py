"""The one ``config.json`` this package writes for a drafter: a flat ``LlamaForCausalLMEagle3``
config from which :func:`~sglang_eagle_ext.drafter.reader.load_drafter` reads back the same
description (exports of legacy checkpoints, distilled tiny drafters, the config SGLang is given).

Every field goes where its declaration (:mod:`.spec`) says it is written. Aux taps are written
where SGLang's target reads them (``eagle_config``, layer-output ids j = index - 1) unless a tap
is the embedding output (index 0), which that convention cannot name; then they are written at
the top level as hidden-state indices.
"""

from __future__ import annotations

import json
from typing import Any

from sglang_eagle_ext.drafter.spec import DrafterSpec, Place, declarations, plain

SERVED_ARCHITECTURE = "LlamaForCausalLMEagle3"  # the architecture SGLang knows EAGLE-3 drafts by
_QWEN3_ARCHITECTURE = "Eagle3Qwen3ForCausalLM"


def _aux_ids(spec: DrafterSpec, config: dict[str, Any]) -> list[int] | None:
    indices = spec.aux_layers.hidden_state_indices()
    if indices is not None and min(indices) == 0:
        config["eagle_aux_hidden_state_layer_ids"] = list(indices)
        return None
    return None if indices is None else [i - 1 for i in indices]


# Fields whose written form is not their plain value.
_WRITTEN_AS = {
    "layer_kind": lambda spec, config: [_QWEN3_ARCHITECTURE if spec.layer_kind == "qwen3" else SERVED_ARCHITECTURE],
    "rope_scaling": lambda spec, config: None if spec.rope_scaling is None else json.loads(spec.rope_scaling),
    "aux_layers": _aux_ids,
}


def canonical_config(spec: DrafterSpec) -> dict[str, Any]:
    """Every fact of ``spec`` that a checkpoint's config carries (tensors carry the rest)."""
    config: dict[str, Any] = {"model_type": "llama", "eagle_config": {}}
    for name, declaration in declarations().items():
        key = declaration.written
        if key is None:
            continue
        writer = _WRITTEN_AS.get(name)
        value = writer(spec, config) if writer else plain(getattr(spec, name))
        if value is None and name in ("torch_dtype", "aux_layers"):
            continue
        (config["eagle_config"] if key.place is Place.EAGLE else config)[key.name] = value
    config["use_sliding_window"] = spec.sliding_window is not None
    # SGLang's llama_eagle3 reads the carried-state switch as `norm_output` (speculators' and
    # NeMo's meaning, not SpecForge's); `carry_normed_state` above is what this package reads back.
    config["norm_output"] = spec.norm_output
    if not spec.use_aux_hidden_state:
        config.pop("num_aux_hidden_states")
    return config
