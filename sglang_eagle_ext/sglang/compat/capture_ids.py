"""Patch ``target-capture-ids`` (every release): the target's ``ModelRunner`` reads its capture ids
from the drafter config in ``__init__`` and applies them later; they are set again from the
normalised config right before they are applied.

Needed with the ``SGLANG_EXTERNAL_MODEL_PACKAGE`` fallback, which activates this package when
SGLang imports its model registry, i.e. after the target's runner has read the raw drafter
config; with the entry point it re-states the same ids.
"""

from __future__ import annotations

from sglang_eagle_ext.drafter.reader import load_drafter
from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.config_loading import target_of
from sglang_eagle_ext.sglang.compat.patch import Patch, Target, required_class, wrap_method
from sglang_eagle_ext.sglang.draft_config import drafter_directory, sglang_config_dict

MODEL_RUNNER = "sglang.srt.model_executor.model_runner"
# what the runner's method reads from its holder, and the patch re-sets there
USES_AUX, LAYER_IDS = "eagle_use_aux_hidden_state", "eagle_aux_hidden_state_layer_ids"


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


def _patch(fact: releases.Fact, method: str, holder_name: str) -> Patch:
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
PATCHES = (
    _patch(releases.CAPTURE_IDS_ON_RUNNER, "init_aux_hidden_state_capture", ""),
    _patch(releases.CAPTURE_IDS_IN_SPEC_AUX_CONFIG, "init_attention_backends", "spec_aux_config"),
)
