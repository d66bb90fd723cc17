"""Patch ``target-capture-ids`` (every release): the target's ``ModelRunner`` reads its capture ids
from the drafter config in ``__init__`` and applies them later; they are set again from the
normalised config right before they are applied.

Needed with the ``SGLANG_EXTERNAL_MODEL_PACKAGE`` fallback, which activates this package when
SGLang imports its model registry, i.e. after the target's runner has read the raw drafter
config; with the entry point it re-states the same ids.
"""

from __future__ import annotations

from packaging.specifiers import SpecifierSet

from sglang_eagle_ext.drafter.reader import load_drafter
from sglang_eagle_ext.sglang.compat.config_loading import target_of
from sglang_eagle_ext.sglang.compat.patch import Patch, required_class, wrap_method
from sglang_eagle_ext.sglang.draft_config import drafter_directory, sglang_config_dict

MODEL_RUNNER = "sglang.srt.model_executor.model_runner"


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
            if getattr(holder, "eagle_use_aux_hidden_state", False) and not self.is_draft_worker:
                known, ids = normalised_capture_ids(self)
                if known:
                    holder.eagle_aux_hidden_state_layer_ids = ids
            return original(self, *args, **kwargs)
        return apply_capture_ids

    return wrap_method(runner_cls, method, make)


def _applier(method: str, holder_name: str):
    def apply(module) -> None:
        patch_target_capture_ids(required_class(module, "ModelRunner", method), method, holder_name)
    return apply


# 0.5.11 - 0.5.15 apply the ids in init_aux_hidden_state_capture from self; 0.5.16 moved them
# into spec_aux_config, applied from init_attention_backends.
PATCHES = (
    Patch("target-capture-ids", SpecifierSet(">=0.5.11,<0.5.16"), MODEL_RUNNER,
          _applier("init_aux_hidden_state_capture", "")),
    Patch("target-capture-ids", SpecifierSet(">=0.5.16"), MODEL_RUNNER,
          _applier("init_attention_backends", "spec_aux_config")),
)
