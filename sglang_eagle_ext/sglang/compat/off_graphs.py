"""The target's plain decode graphs for speculation off (issue 39; ``docs/adaptive-shape.md`` sections 12 and 17),
SGLang 0.5.23.

:mod:`.plain_off` serves a depth-0 step by the target's ``DECODE`` forward, but under speculation SGLang captures
the target's graphs in ``TARGET_VERIFY`` mode only: ``DecodeCudaGraphRunner.__init__`` picks that mode whenever
speculation is on and captures in the constructor (``model_executor/runner/decode_cuda_graph_runner.py``). So a
plain step ran eagerly, and on a GPU "off" stayed stock's graphed width-1 verify: on SmolLM2-135M 5.98 ms a step
where a plain decoding step costs 1.73 (section 16).

This module captures one more runner when SGLang builds depth 0's runtime state
(``EAGLEWorkerV2.build_adaptive_runtime_state``, under the worker's own ``_override_worker_state`` at depth 0 and
the batch sizes SGLang captures depth 0 for): the same runner class, set to ``DECODE`` at width 1 at its capture,
with no spec info in the captured batch and the hidden states of ``CaptureHiddenMode.FULL`` (EAGLE-3's aux states,
which the drafter's extend reads), on its own attention backend (built as SGLang builds each state's:
``_get_attention_backend(init_new_workspace=True)``), since a backend's graph state is sized and planned per
runner. Its input buffers come from SGLang's process-wide pool as every runner's do; one runner replays at a
time. :func:`serving` swaps the runner and its backend into the target's model runner for the plain step's
forward, where :func:`can_serve` says the batch fits.

Where the capture fails, the engine serves on: the failure is logged as this package's ("not captured: ...") and
off stays stock's graphed width-1 verify. The capture's time and memory are logged once.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from dataclasses import dataclass
from typing import Any

from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.patch import Target, require, wrap_method

RELEASES = releases.PLAIN_OFF.releases
_WORKER = "sglang.srt.speculative.eagle_worker_v2"
_RUNNER = "sglang.srt.model_executor.runner.decode_cuda_graph_runner"
ATTRIBUTE = "_sglang_eagle_ext_off_graphs"  # on the worker: the captured graphs, or None

SEAMS = (
    # depth 0's state is built here (stock's width-1 verify graphs on a fresh backend); its graph runner says
    # whether the target's decode is graphed at depth 0's batch sizes at all
    Target(RELEASES, _WORKER, "EAGLEWorkerV2", "build_adaptive_runtime_state",
           params=("self", "speculative_num_steps", "speculative_num_draft_tokens", "cuda_graph_bs"),
           reads=("self._override_worker_state", "self._target_worker", "_get_attention_backend",
                  "init_new_workspace", "target_graph_runner")),
    Target(RELEASES, _WORKER, "EAGLEWorkerV2", "_override_worker_state",
           params=("self", "speculative_num_steps", "speculative_num_draft_tokens", "cuda_graph_bs")),
    Target(RELEASES, "sglang.srt.model_executor.model_runner", "ModelRunner", "_get_attention_backend",
           keywords=("init_new_workspace",)),
    # the runner: the mode and hidden mode it captures with are set in __init__, which then captures; the
    # captured batch takes get_spec_info's; its width is decode_num_tokens_per_req of the draft tokens given
    Target(RELEASES, _RUNNER, "DecodeCudaGraphRunner", "__init__", params=("self", "model_runner"),
           keywords=("attn_backend", "speculative_num_steps", "speculative_num_draft_tokens"),
           reads=("self.capture_forward_mode", "self.capture_hidden_mode", "self.captured_req_width",
                  "self.ragged_verify_mode", "self.capture", "decode_num_tokens_per_req")),
    Target(RELEASES, _RUNNER, "DecodeCudaGraphRunner", "capture_prepare",
           reads=("self.get_spec_info", "self.capture_forward_mode", "self.capture_hidden_mode")),
    Target(RELEASES, _RUNNER, "DecodeCudaGraphRunner", "get_spec_info", params=("self", "num_tokens")),
    Target(RELEASES, _RUNNER, "DecodeCudaGraphRunner", "can_run_graph", params=("self", "forward_batch"),
           reads=("self.max_bs",)),
    # the forward replays the model runner's graph runner when it says it can run the batch, under the model
    # runner's attention backend
    Target(RELEASES, "sglang.srt.model_executor.model_runner", "ModelRunner", "_forward_raw",
           reads=("self.decode_cuda_graph_runner", "self.attn_backend", "can_run_graph")),
)


@dataclass
class OffGraphs:
    """The target's ``DECODE`` graphs at width 1 and the attention backend they were captured on."""

    runner: Any
    attn_backend: Any


def bind(worker_module) -> None:
    """Wrap ``EAGLEWorkerV2.build_adaptive_runtime_state`` to capture the graphs beside depth 0's state."""
    build = SEAMS[0]
    require(hasattr(getattr(worker_module, build.name, None), build.member), build.path)
    wrap_method(getattr(worker_module, build.name), build.member, _capturing_beside_depth_0)


def _capturing_beside_depth_0(original):
    @functools.wraps(original)
    def build_adaptive_runtime_state(self, speculative_num_steps, speculative_num_draft_tokens,
                                     cuda_graph_bs=None):
        state = original(self, speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=cuda_graph_bs)
        if speculative_num_steps == 0 and state.target_graph_runner is not None:
            setattr(self, ATTRIBUTE, capture(self, cuda_graph_bs))
        return state
    return build_adaptive_runtime_state


def _free_gpu_memory() -> int:
    import torch

    return torch.cuda.mem_get_info()[0]


def capture(worker, cuda_graph_bs, log=None, free_memory=_free_gpu_memory) -> OffGraphs | None:
    """The graphs at depth 0's batch sizes, or None (logged) where SGLang's runner cannot capture them."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    started, free_before = time.perf_counter(), free_memory()
    try:
        with worker._override_worker_state(0, 1, cuda_graph_bs=cuda_graph_bs):
            model_runner = worker._target_worker.model_runner
            workspace = model_runner.init_new_workspace
            try:
                backend = model_runner._get_attention_backend(init_new_workspace=True)
            finally:
                model_runner.init_new_workspace = workspace
            runner = _runner_class()(model_runner, attn_backend=backend, speculative_num_steps=0,
                                     speculative_num_draft_tokens=1)
    except Exception as exc:  # the engine serves on, off by stock's width-1 verify
        log(f"sglang-eagle-ext: off: the target's plain decode graphs not captured ({type(exc).__name__}: {exc}); "
            "off runs stock's graphed width-1 verify (this package's failure: please report it)")
        return None
    taken = (free_before - free_memory()) / 2**30
    log(f"sglang-eagle-ext: off: the target's plain decode graphs captured for batch sizes {runner.capture_bs} "
        f"in {time.perf_counter() - started:.1f} s, {taken:.2f} GiB")
    return OffGraphs(runner, backend)


@functools.cache
def _runner_class():
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    class PlainDecodeGraphRunner(DecodeCudaGraphRunner):
        """SGLang's decode graph runner capturing ``DECODE`` at width 1 in a speculative engine."""

        def capture(self) -> None:
            # set here, not before __init__: it picks TARGET_VERIFY under speculation and captures at its end
            if self.captured_req_width != 1 or self.ragged_verify_mode:
                raise RuntimeError(f"the runner's width is {self.captured_req_width} (ragged verify: "
                                   f"{self.ragged_verify_mode}), where a plain decode step's is 1")
            self.capture_forward_mode = ForwardMode.DECODE
            self.capture_hidden_mode = max(self.capture_hidden_mode, step_hidden_mode(self.model_runner))
            super().capture()

        def get_spec_info(self, num_tokens: int):
            return None  # a plain decode batch: the attention backend plans an ordinary decode

    return PlainDecodeGraphRunner


def step_hidden_mode(model_runner):
    """The hidden states a plain step hands the drafter's extend: the target's (EAGLE-3's aux states, packed as the
    verify's are), none under the standalone algorithm, whose drafter reads none. The graphs are captured with
    them and the step's batch asks for them (SGLang refuses to replay a graph for a batch asking for more)."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    return CaptureHiddenMode.NULL if model_runner.spec_algorithm.is_standalone() else CaptureHiddenMode.FULL


def for_worker(worker) -> OffGraphs | None:
    return getattr(worker, ATTRIBUTE, None)


def can_serve(graphs: OffGraphs | None, requests: int) -> bool:
    """Whether the graphs hold a batch of ``requests`` (SGLang pads a batch up to its next captured size)."""
    return graphs is not None and requests <= graphs.runner.max_bs


@contextlib.contextmanager
def serving(model_runner, graphs: OffGraphs):
    """The graphs and their backend as the target's for one forward; the depth's own put back after it."""
    attached = model_runner.decode_cuda_graph_runner, model_runner.attn_backend
    model_runner.decode_cuda_graph_runner, model_runner.attn_backend = graphs.runner, graphs.attn_backend
    try:
        yield
    finally:
        model_runner.decode_cuda_graph_runner, model_runner.attn_backend = attached
