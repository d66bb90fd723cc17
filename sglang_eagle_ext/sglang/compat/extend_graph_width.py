"""Patch ``draft-extend-graph-width`` (0.5.11): the draft-extend CUDA graph's hidden-state input is
built ``3 * H`` wide; capture fails for a draft whose fc takes ``A * T != 3 * H``, and replay skips
the copy when widths differ (silently stale inputs)."""

from __future__ import annotations

from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.draft_width import draft_input_width, uses_aux_states
from sglang_eagle_ext.sglang.compat.patch import Patch, Target, required_class, wrap_method

# the graph's capture, before which its hidden-state input is resized
CAPTURE = Target(releases.DRAFT_EXTEND_3H.releases, "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner",
                 "EAGLEDraftExtendCudaGraphRunner", "capture")


def patch_draft_extend_graph_width(runner_cls) -> bool:
    """Before capture, resize the graph's hidden-state input to the draft's ``A * T``."""

    def make(original):
        def capture(self, *args, **kwargs):
            want = draft_input_width(self.model_runner.model_config.hf_config)
            holder = getattr(self, "buffers", self)
            buffer = holder.hidden_states
            if (want is not None and uses_aux_states(self.eagle_worker) and buffer is not None
                    and buffer.shape[1] != want):
                holder.hidden_states = buffer.new_zeros((buffer.shape[0], want))
            return original(self, *args, **kwargs)
        return capture

    return wrap_method(runner_cls, CAPTURE.member, make)


def _apply(module) -> None:
    patch_draft_extend_graph_width(required_class(module, CAPTURE.name, CAPTURE.member))


PATCH = Patch("draft-extend-graph-width", CAPTURE.releases, CAPTURE.module, _apply, (CAPTURE,))
