"""The width of the target states a draft's ``fc`` takes (``A * T``), for the releases that size
draft inputs ``3 * H`` (patches ``draft-extend-graph-width``, ``idle-draft-input-width``,
``hidden-size-for``)."""

from __future__ import annotations


def draft_input_width(hf_config) -> int | None:
    """``A * T`` of a draft config, None without aux states.

    The normalised config states ``num_aux_hidden_states`` and ``target_hidden_size``; for a
    config that did not pass through it the same order of precedence as SGLang 0.5.15+ applies.
    """
    eagle_config = getattr(hf_config, "eagle_config", None) or {}
    if not isinstance(eagle_config, dict):
        eagle_config = vars(eagle_config)
    if not eagle_config.get("use_aux_hidden_state", True):
        return None
    count = getattr(hf_config, "num_aux_hidden_states", None)
    for ids in (eagle_config.get("eagle_aux_hidden_state_layer_ids"),
                getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)):
        if count is None and ids:
            count = len(ids)
    width = getattr(hf_config, "target_hidden_size", None) or hf_config.hidden_size
    return (count or 3) * width


def uses_aux_states(worker) -> bool:
    """The worker drafts with EAGLE-3 aux states (not EAGLE-1-style last hidden states)."""
    algorithm = worker.speculative_algorithm
    return algorithm.is_eagle3() and getattr(worker, "eagle_use_aux_hidden_state", True)
