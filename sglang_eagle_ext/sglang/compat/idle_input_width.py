"""Patch ``idle-draft-input-width`` (0.5.11): ``forward_draft_extend_after_decode`` builds idle
draft-extend inputs (DP attention) ``3 * H`` wide instead of the draft's ``A * T``."""

from __future__ import annotations

import contextvars
import inspect
import sys

from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.draft_width import draft_input_width, uses_aux_states
from sglang_eagle_ext.sglang.compat.patch import Patch, Target, required_class, wrap_method

_RELEASES = releases.DRAFT_EXTEND_3H.releases
_SPEC = "sglang.srt.speculative."
_AFTER_DECODE, _HIDDEN_SIZE = "forward_draft_extend_after_decode", "hidden_size"
# the worker methods that pass the inline 3 * H, and the constructor they pass it to by name
WORKER = Target(_RELEASES, _SPEC + "eagle_worker", "EAGLEWorker", _AFTER_DECODE)
MULTI_LAYER_WORKER = Target(_RELEASES, _SPEC + "multi_layer_eagle_worker", "MultiLayerEagleWorker", _AFTER_DECODE)
CREATE_IDLE_INPUT = Target(_RELEASES, _SPEC + "eagle_info", "EagleDraftInput", "create_idle_input",
                           keywords=(_HIDDEN_SIZE,))
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
                bound.arguments[_HIDDEN_SIZE] = width
                return original(*bound.args, **bound.kwargs)
            return original(cls, *args, **kwargs)
        return create_idle_input

    changed = wrap_method(draft_input_cls, CREATE_IDLE_INPUT.member, make_create_idle_input)
    for worker_cls in worker_classes:
        changed |= wrap_method(worker_cls, _AFTER_DECODE, make_worker_method)
    return changed


def _patch(worker: Target) -> Patch:
    def apply(module) -> None:
        patch_idle_draft_input_width(required_class(sys.modules.get(CREATE_IDLE_INPUT.module), CREATE_IDLE_INPUT.name,
                                                    CREATE_IDLE_INPUT.member),
                                     [required_class(module, worker.name, worker.member)])

    return Patch("idle-draft-input-width", _RELEASES, worker.module, apply, (worker, CREATE_IDLE_INPUT))


# the multi-layer worker's module is imported only with --enable-multi-layer-eagle
PATCHES = (_patch(WORKER), _patch(MULTI_LAYER_WORKER))
