"""Patch ``hidden-size-for`` (0.5.12 - 0.5.14): ``EagleDraftExtendInput.hidden_size_for`` sizes
draft-extend inputs from the *target* config (``3 * H``); 0.5.15+ read the draft config, which
the normalised config states."""

from __future__ import annotations

from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.draft_width import draft_input_width, uses_aux_states
from sglang_eagle_ext.sglang.compat.patch import Patch, Target, required_class, wrap_method

# a classmethod taking the worker first; gone from 0.5.15, whose inputs are sized from the draft config
HIDDEN_SIZE_FOR = Target(releases.HIDDEN_SIZE_FOR.releases, "sglang.srt.speculative.eagle_info",
                         "EagleDraftExtendInput", "hidden_size_for", params=("cls", "worker"), absent_elsewhere=True)


def _draft_runner(worker):
    for name in ("draft_runner", "draft_model_runner", "model_runner"):
        runner = getattr(worker, name, None)
        if runner is not None and getattr(runner, "is_draft_worker", True):
            return runner
    return None


def patch_hidden_size_for(draft_extend_input_cls) -> bool:
    """Draft-extend input width from the *draft* config."""

    def make(original):
        def hidden_size_for(cls, worker, *args, **kwargs):
            runner = _draft_runner(worker)
            if runner is not None and uses_aux_states(worker):
                width = draft_input_width(runner.model_config.hf_config)
                if width is not None:
                    return width
            return original(cls, worker, *args, **kwargs)
        return hidden_size_for

    return wrap_method(draft_extend_input_cls, HIDDEN_SIZE_FOR.member, make)


def _apply(module) -> None:
    patch_hidden_size_for(required_class(module, HIDDEN_SIZE_FOR.name, HIDDEN_SIZE_FOR.member))


PATCH = Patch("hidden-size-for", HIDDEN_SIZE_FOR.releases, HIDDEN_SIZE_FOR.module, _apply, (HIDDEN_SIZE_FOR,))
