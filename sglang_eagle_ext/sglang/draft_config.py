"""The drafter config SGLang sees: one flat ``LlamaForCausalLMEagle3`` config made from a DrafterSpec.

SGLang reads a drafter's ``config.json`` in three places that must agree: the target model runner
(which aux hidden states to capture: only ``eagle_config.eagle_aux_hidden_state_layer_ids``), the
draft worker (KV-pool depth from ``num_hidden_layers``, buffer widths from
``num_aux_hidden_states`` / ``target_hidden_size``) and the model class. Producers write these
facts in different places and id conventions (speculators nests the geometry and counts ids as
hidden-state indices; NeMo writes the target's depth). Serving every dialect the same way means
replacing the raw config by this normalised one everywhere SGLang loads it.

Pure functions of the spec: no SGLang import, so they are tested without it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from sglang_eagle_ext.errors import DrafterError, Problem
from sglang_eagle_ext.drafter.spec import SERVED_ARCHITECTURE, DrafterSpec, aux_ids_fix, canonical_config
from sglang_eagle_ext.drafter.dialects import is_drafter_config
from sglang_eagle_ext.drafter.target import TargetInfo

# Key that carries the resolved checkpoint directory: the config-loading patch registers the
# checkpoint each config is made from under it, and the model class takes that checkpoint
# (compat.config_loading.served_drafter).
DRAFTER_PATH_KEY = "eagle_ext_drafter_path"
# Targets whose SGLang model accepts a capture list reaching N (the last layer's output).
_TARGETS_CAPTURING_LAST_OUTPUT = frozenset({"gpt_oss"})


def drafter_directory(model: Any) -> str | None:
    """``model`` as an absolute path when it is a local EAGLE-3 drafter directory; None for a
    target, a hub id or anything else SGLang loads through ``get_config``. A ``config.json``
    that is not JSON counts as a drafter's, so that the reader reports it clearly."""
    if not isinstance(model, (str, os.PathLike)):
        return None
    path = os.path.abspath(os.fspath(model))
    try:
        with open(os.path.join(path, "config.json"), "rb") as handle:
            raw = json.loads(handle.read())
    except OSError:
        return None
    except ValueError:
        return path
    return path if is_drafter_config(raw) else None


def capture_layer_ids(spec: DrafterSpec, target: TargetInfo | None) -> tuple[int, ...] | None:
    """The taps in SGLang's ``eagle_aux_hidden_state_layer_ids`` convention (output of layer j).

    ``None`` means "SGLang's default taps", returned only when they are the drafter's own: no ids
    declared, three aux states, target depth unknown. Raises :class:`DrafterError` when SGLang
    would capture other states than the drafter was trained on (duplicates make the target
    capture fewer states than ``fc`` expects, which otherwise crashes later with a bare shape
    error).
    """
    if not spec.use_aux_hidden_state:
        return None
    n = None if target is None else target.num_layers
    indices = spec.aux_layers.hidden_state_indices(n)
    if indices is None:
        return None
    config = os.path.join(spec.path, "config.json")
    field = spec.aux_layers.source if spec.aux_layers.declared is not None else (
        "eagle_aux_hidden_state_layer_ids (absent: default taps)")
    problems = []
    if len(set(indices)) != len(indices):
        problems.append(Problem(
            config, field, "the aux layers repeat, so SGLang would capture fewer hidden states "
            "than fc takes", "list each trained aux layer once (with no ids written, the default "
            "taps collide on a target this shallow): " + aux_ids_fix(),
            expected=f"{spec.num_aux_hidden_states} distinct layers",
            found=f"hidden-state indices {list(indices)}"))
    if len(indices) != spec.num_aux_hidden_states:
        problems.append(Problem(
            config, field, "the number of aux layers differs from what fc takes",
            aux_ids_fix(),
            expected=str(spec.num_aux_hidden_states), found=str(len(indices))))
    if n is not None and n in indices and target.model_type not in _TARGETS_CAPTURING_LAST_OUTPUT:
        problems.append(Problem(
            config, field, f"hidden-state index {n} (the last layer's output) cannot be captured "
            f"by SGLang's {target.model_type or 'target'} model", "use a drafter trained on "
            "earlier layers", expected=f"hidden-state indices below {n}", found=str(list(indices))))
    if problems:
        raise DrafterError(problems)
    return spec.aux_layers.sglang_layer_ids(n)


def sglang_config_dict(spec: DrafterSpec, target: TargetInfo | None = None) -> dict[str, Any]:
    """The flat config (``LlamaConfig`` keyword arguments) SGLang is given for this drafter.

    The drafter's canonical config with the taps resolved for ``target``; our model class
    rebuilds every modelling detail from the checkpoint registered under :data:`DRAFTER_PATH_KEY`.
    """
    if spec.embed_tokens_from_target and spec.target_hidden_size != spec.hidden_size:
        raise DrafterError([Problem(
            spec.files[1] if len(spec.files) > 1 else spec.path, "embed_tokens.weight",
            "the drafter has no token embedding and is narrower/wider than the target, so the "
            "target's embedding cannot be shared", "use the complete checkpoint (with "
            "embed_tokens) for this cross-width drafter",
            expected=f"[{spec.vocab_size}, {spec.hidden_size}]", found="absent")])
    ids = capture_layer_ids(spec, target)
    config = canonical_config(spec)
    # SGLang's target reads its taps only from eagle_config, in its own convention, resolved
    # for this target; our class is registered under one architecture name.
    config.pop("eagle_aux_hidden_state_layer_ids", None)
    config.update(
        architectures=[SERVED_ARCHITECTURE],
        num_aux_hidden_states=spec.num_aux_hidden_states,
        eagle_config={"use_aux_hidden_state": spec.use_aux_hidden_state,
                      "eagle_aux_hidden_state_layer_ids": None if ids is None else list(ids)},
    )
    config[DRAFTER_PATH_KEY] = spec.path
    return config
