"""The one ``config.json`` this package writes for a drafter: a flat ``LlamaForCausalLMEagle3``
config from which :func:`~sglang_eagle_ext.checkpoint.read_drafter` reads back the same
description (exports of legacy checkpoints, distilled tiny drafters).

Aux taps are written where SGLang's target reads them (``eagle_config``, layer-output ids j =
index - 1) unless a tap is the embedding output (index 0), which that convention cannot name; then
they are written at the top level as hidden-state indices.
"""

from __future__ import annotations

import json
from typing import Any

from .spec import DrafterSpec


def canonical_config(spec: DrafterSpec) -> dict[str, Any]:
    """Every fact of ``spec`` that a checkpoint's config carries (tensors carry the rest)."""
    config: dict[str, Any] = {
        "architectures": ["Eagle3Qwen3ForCausalLM" if spec.layer_kind == "qwen3"
                          else "LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "hidden_act": spec.hidden_act,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": None if spec.rope_scaling is None else json.loads(spec.rope_scaling),
        "max_position_embeddings": spec.max_position_embeddings,
        "attention_bias": spec.attention_bias,
        "sliding_window": spec.sliding_window,
        "use_sliding_window": spec.sliding_window is not None,
        "layer_types": list(spec.layer_types),
        "vocab_size": spec.vocab_size,
        "draft_vocab_size": spec.draft_vocab_size,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "target_hidden_size": spec.target_hidden_size,
        "bias": spec.fc_bias,
        "fc_norm": spec.fc_norm,
        "norm_before_fc": spec.norm_before_fc,
        "norm_before_residual": spec.norm_before_residual,
        "norm_output": spec.norm_output,
        "eagle_config": {"use_aux_hidden_state": spec.use_aux_hidden_state},
    }
    if not spec.use_aux_hidden_state:
        return config
    config["num_aux_hidden_states"] = spec.num_aux_hidden_states
    indices = spec.aux_layers.hidden_state_indices()
    if indices is not None and min(indices) >= 1:
        config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [i - 1 for i in indices]
    elif indices is not None:
        config["eagle_aux_hidden_state_layer_ids"] = list(indices)
    return config
