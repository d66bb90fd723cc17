"""Patch ``draft-config`` (every release): SGLang loads a drafter's ``config.json`` separately for
the target (which aux layers to capture), the draft worker (KV depth, buffer widths) and the
model; every such load gets the normalised config of :mod:`sglang_eagle_ext.sglang.draft_config`,
made from the process's one cached read of the checkpoint."""

from __future__ import annotations

import sys
from typing import Any, Callable

from sglang_eagle_ext.drafter.reader import load_drafter
from sglang_eagle_ext.drafter.target import TargetInfo, read_target
from sglang_eagle_ext.errors import DrafterError
from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.patch import Patch, Target, require
from sglang_eagle_ext.sglang.draft_config import drafter_directory, sglang_config_dict


_OVERRIDE_ARGS = "model_override_args"
# SGLang's config loader, as the model config binds it: called with the path first, the override
# args read by name
GET_CONFIG = Target(releases.EVERY_RELEASE.releases, "sglang.srt.configs.model_config", "get_config",
                    params=("model",), keywords=(_OVERRIDE_ARGS,))


def normalised_config(path: str, target: TargetInfo | None, override_args: dict | None = None):
    """The ``LlamaConfig`` SGLang gets for the drafter at ``path`` (resolved for ``target``)."""
    from transformers import LlamaConfig

    values = sglang_config_dict(load_drafter(path).spec, target)
    if override_args:  # --json-model-override-args applies to the draft config too
        values.update(override_args)
    config = LlamaConfig(**values)
    for key, value in values.items():  # keys LlamaConfig does not know are kept verbatim
        if not hasattr(config, key):
            setattr(config, key, value)
    config._name_or_path = path
    return config


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
