"""The drafter config SGLang sees, everywhere it loads one: patches ``draft-config`` and
``target-capture-ids`` (every release), and the one channel through which the model class receives
the checkpoint that config was made from.

SGLang reads a drafter's ``config.json`` in three places that must agree: the target model runner
(which aux hidden states to capture: only ``eagle_config.eagle_aux_hidden_state_layer_ids``), the
draft worker (KV-pool depth from ``num_hidden_layers``, buffer widths from
``num_aux_hidden_states`` / ``target_hidden_size``) and the model class. Producers write these
facts in different places and id conventions (speculators nests the geometry and counts ids as
hidden-state indices; NeMo writes the target's depth). Serving every dialect the same way means
replacing the raw config by one flat ``LlamaForCausalLMEagle3`` config made from the description
(:func:`sglang_config_dict`, pure: no SGLang import) everywhere SGLang loads it, made from the
process's one cached read of the checkpoint.

Every such load goes through :class:`DraftConfigLoader`. The target's ``ModelRunner`` reads its
capture ids from the drafter config in ``__init__`` and applies them later; they are set again from
the normalised config right before they are applied. That is needed with the
``SGLANG_EXTERNAL_MODEL_PACKAGE`` fallback, which activates this package when SGLang imports its
model registry, i.e. after the target's runner has read the raw drafter config; with the entry
point it re-states the same ids.

The model class receives its checkpoint through one channel, :func:`served_drafter`: each config
this loader makes registers the :class:`~sglang_eagle_ext.drafter.reader.DrafterCheckpoint` it was
made from under the resolved drafter path it carries (:data:`DRAFTER_PATH_KEY`), and the class
takes that same object. A registry rather than the object on the config: SGLang and the class copy
and serialise its configs (``copy.deepcopy``, transformers' ``to_dict`` / ``to_json_string`` in
``repr``), which must stay plain JSON data and must not copy a tensor index along.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

from sglang_eagle_ext.drafter.dialects import is_drafter_config
from sglang_eagle_ext.drafter.reader import DrafterCheckpoint, load_drafter
from sglang_eagle_ext.drafter.spec import SERVED_ARCHITECTURE, DrafterSpec, aux_ids_fix, canonical_config
from sglang_eagle_ext.drafter.target import TargetInfo, read_target
from sglang_eagle_ext.errors import DrafterError, Problem
from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.patch import Patch, Target, require, required_class, wrap_method

# Key that carries the resolved checkpoint directory: the checkpoint each config is made from is
# registered under it, and the model class takes that checkpoint (served_drafter).
DRAFTER_PATH_KEY = "eagle_ext_drafter_path"
# Targets whose SGLang model accepts a capture list reaching N (the last layer's output).
_TARGETS_CAPTURING_LAST_OUTPUT = frozenset({"gpt_oss"})

_OVERRIDE_ARGS = "model_override_args"
# SGLang's config loader, as the model config binds it: called with the path first, the override
# args read by name
GET_CONFIG = Target(releases.EVERY_RELEASE.releases, "sglang.srt.configs.model_config", "get_config",
                    params=("model",), keywords=(_OVERRIDE_ARGS,))
MODEL_RUNNER = "sglang.srt.model_executor.model_runner"
# what the runner's capture-id method reads from its holder, and the patch re-sets there
USES_AUX, LAYER_IDS = "eagle_use_aux_hidden_state", "eagle_aux_hidden_state_layer_ids"

# resolved drafter path -> the checkpoint the last config made for it was made from
_served: dict[str, DrafterCheckpoint] = {}


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
    rebuilds every modelling detail from the checkpoint registered under :data:`DRAFTER_PATH_KEY`
    (:func:`served_drafter`).
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



def normalised_config(path: str, target: TargetInfo | None, override_args: dict | None = None):
    """The ``LlamaConfig`` SGLang gets for the drafter at ``path`` (resolved for ``target``); the
    checkpoint it is made from is registered for :func:`served_drafter`."""
    from transformers import LlamaConfig

    checkpoint = load_drafter(path)
    values = sglang_config_dict(checkpoint.spec, target)
    if override_args:  # --json-model-override-args applies to the draft config too
        values.update(override_args)
    config = LlamaConfig(**values)
    for key, value in values.items():  # keys LlamaConfig does not know are kept verbatim
        if not hasattr(config, key):
            setattr(config, key, value)
    config._name_or_path = path
    _served[checkpoint.spec.path] = checkpoint  # the key sglang_config_dict writes as DRAFTER_PATH_KEY
    return config


def served_drafter(config: Any) -> DrafterCheckpoint:
    """The checkpoint ``config`` was made from by :func:`normalised_config`: what the model class
    builds and loads, never read again."""
    checkpoint = _served.get(getattr(config, DRAFTER_PATH_KEY, None))
    if checkpoint is None:
        raise RuntimeError(
            "sglang-eagle-ext: the EAGLE3 draft config was not made by this package's config loader (SGLang "
            "read it before the plugin activated); start SGLang with the plugin's entry point installed, or "
            "set SGLANG_EAGLE_EXT=0 to serve with stock SGLang")
    return checkpoint


def target_of(hf_config: Any) -> TargetInfo | None:
    """The target facts of a loaded HF config; None for configs without decoder geometry
    (vision towers and the like, which SGLang also loads through ``get_config``)."""
    try:
        return read_target(hf_config)
    except DrafterError:
        return None


class DraftConfigLoader:
    """Wraps SGLang's ``get_config``: drafter directories get the normalised config.

    The target's config is loaded before any drafter config in every SGLang process (the
    scheduler builds the target's model config first); it is remembered to resolve the aux
    layers (default taps, the boundary rule, range checks) against the real target depth.
    """

    def __init__(self, original: Callable):
        self.original = original
        self.target: TargetInfo | None = None

    def __call__(self, model, *args, **kwargs):
        path = drafter_directory(model)
        if path is None:
            config = self.original(model, *args, **kwargs)
            self.target = target_of(config) or self.target
            return config
        return normalised_config(path, self.target, kwargs.get(_OVERRIDE_ARGS))


def _apply(model_config_module) -> None:
    """Route every binding of SGLang's ``get_config`` through :class:`DraftConfigLoader`.

    Modules import it by name (the model config, server-argument resolution in 0.5.23...), so
    the defining module and every already-imported copy are rebound; later imports read the
    defining module's (patched) attribute.
    """
    name = GET_CONFIG.name
    original = getattr(model_config_module, name, None)
    require(callable(original), GET_CONFIG.path)
    if isinstance(original, DraftConfigLoader):
        return
    loader = DraftConfigLoader(original)
    defining = sys.modules.get(getattr(original, "__module__", ""), None)
    for module in [defining, model_config_module, *list(sys.modules.values())]:
        if module is not None and getattr(module, "__dict__", {}).get(name) is original:
            setattr(module, name, loader)


PATCH = Patch("draft-config", GET_CONFIG.releases, GET_CONFIG.module, _apply, (GET_CONFIG,))


def normalised_capture_ids(runner) -> tuple[bool, list[int] | None]:
    """``(True, ids)``: the capture ids of the normalised config of this target runner's drafter
    (None: SGLang's default taps); ``(False, None)`` when the drafter is not a local EAGLE-3
    checkpoint directory (a hub id is left to SGLang)."""
    path = drafter_directory(getattr(runner.server_args, "speculative_draft_model_path", None))
    if path is None:
        return False, None
    config = sglang_config_dict(load_drafter(path).spec, target_of(runner.model_config.hf_config))
    return True, config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]


def patch_target_capture_ids(runner_cls, method: str, holder_name: str) -> bool:
    """Right before ``runner_cls.method`` applies the capture ids held by ``self.<holder_name>``
    (``self`` when empty), set them from the normalised drafter config."""

    def make(original):
        def apply_capture_ids(self, *args, **kwargs):
            holder = getattr(self, holder_name) if holder_name else self
            if getattr(holder, USES_AUX, False) and not self.is_draft_worker:
                known, ids = normalised_capture_ids(self)
                if known:
                    setattr(holder, LAYER_IDS, ids)
            return original(self, *args, **kwargs)
        return apply_capture_ids

    return wrap_method(runner_cls, method, make)


def _capture_ids_patch(fact: releases.Fact, method: str, holder_name: str) -> Patch:
    """The patch for the releases whose ``ModelRunner.method`` applies the ids held by
    ``self.<holder_name>``."""
    holder = ".".join(filter(None, ("self", holder_name)))
    target = Target(fact.releases, MODEL_RUNNER, "ModelRunner", method,
                    reads=(f"{holder}.{USES_AUX}", f"{holder}.{LAYER_IDS}"), absent_elsewhere=True)

    def apply(module) -> None:
        patch_target_capture_ids(required_class(module, target.name, method), method, holder_name)

    return Patch("target-capture-ids", target.releases, MODEL_RUNNER, apply, (target,))


# 0.5.11 - 0.5.15 apply the ids in init_aux_hidden_state_capture from self; 0.5.16 moved them
# into spec_aux_config, applied from init_attention_backends.
CAPTURE_IDS_PATCHES = (
    _capture_ids_patch(releases.CAPTURE_IDS_ON_RUNNER, "init_aux_hidden_state_capture", ""),
    _capture_ids_patch(releases.CAPTURE_IDS_IN_SPEC_AUX_CONFIG, "init_attention_backends", "spec_aux_config"),
)
