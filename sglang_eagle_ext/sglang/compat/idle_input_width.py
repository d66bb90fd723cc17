"""Patch ``idle-draft-input-width`` (0.5.11): ``forward_draft_extend_after_decode`` builds idle
draft-extend inputs (DP attention) ``3 * H`` wide instead of the draft's ``A * T``."""

from __future__ import annotations

import contextvars
import inspect
import sys

from packaging.specifiers import SpecifierSet

from sglang_eagle_ext.sglang.compat.draft_width import draft_input_width, uses_aux_states
from sglang_eagle_ext.sglang.compat.patch import Patch, require, wrap_method

_EAGLE_INFO = "sglang.srt.speculative.eagle_info"
_IDLE_INPUT_WIDTH: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "eagle_ext_idle_input_width", default=None)


def patch_idle_draft_input_width(draft_input_cls, worker_classes) -> bool:
    """The worker method publishes the draft's width for the duration of the call, and
    ``EagleDraftInput.create_idle_input`` (which it passes the inline ``3 * H`` to) uses it."""

    def make_worker_method(original):
        def forward_draft_extend_after_decode(self, *args, **kwargs):
            width = draft_input_width(self.model_config.hf_config) if uses_aux_states(self) else None
            token = _IDLE_INPUT_WIDTH.set(width)
            try:
                return original(self, *args, **kwargs)
            finally:
                _IDLE_INPUT_WIDTH.reset(token)
        return forward_draft_extend_after_decode

    def make_create_idle_input(original):
        signature = inspect.signature(original)

        def create_idle_input(cls, *args, **kwargs):
            width = _IDLE_INPUT_WIDTH.get()
            if width is not None:
                bound = signature.bind(cls, *args, **kwargs)
                bound.arguments["hidden_size"] = width
                return original(*bound.args, **bound.kwargs)
            return original(cls, *args, **kwargs)
        return create_idle_input

    changed = wrap_method(draft_input_cls, "create_idle_input", make_create_idle_input)
    for worker_cls in worker_classes:
        changed |= wrap_method(worker_cls, "forward_draft_extend_after_decode", make_worker_method)
    return changed


def _applier(class_name: str, required: bool):
    def apply(module) -> None:
        worker_cls = getattr(module, class_name, None)
        has_method = worker_cls is not None and hasattr(worker_cls, "forward_draft_extend_after_decode")
        if not required and not has_method:
            return
        require(has_method, f"{class_name}.forward_draft_extend_after_decode")
        draft_input = getattr(sys.modules.get(_EAGLE_INFO), "EagleDraftInput", None)
        require(draft_input is not None and hasattr(draft_input, "create_idle_input"),
                "EagleDraftInput.create_idle_input")
        patch_idle_draft_input_width(draft_input, [worker_cls])
    return apply


_RELEASES = SpecifierSet("<0.5.12")
PATCHES = (
    Patch("idle-draft-input-width", _RELEASES, "sglang.srt.speculative.eagle_worker",
          _applier("EAGLEWorker", required=True)),
    # only with --enable-multi-layer-eagle, which not every release has
    Patch("idle-draft-input-width", _RELEASES, "sglang.srt.speculative.multi_layer_eagle_worker",
          _applier("MultiLayerEagleWorker", required=False)),
)
