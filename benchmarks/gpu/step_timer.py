"""An SGLang plugin for the benchmarks only (never installed with the package): times the phases of
EAGLE-3 decode steps inside the scheduler, on SGLang 0.5.23's v2 worker.

With ``STEP_TIMER_DIR`` set, the scheduler process wraps the functions of one decode step
(:data:`PHASES`) when its first decode step runs (after every import-time patch, the plugin's fused
verify included, so each wrapper times whatever that step really calls). A step is recorded while
the file ``STEP_TIMER_DIR/label`` exists, under the label it holds; when the label changes or
disappears, the steps recorded under the previous one are written to
``STEP_TIMER_DIR/steps-<label>.json`` (atomically) and the driver reads them.

Each phase is timed twice: on the GPU, by CUDA events recorded on the current stream at its entry
and exit (the span it occupies on the GPU's timeline, launch gaps included: what the phase costs a
step), and on the host, by the wall time of the Python call (launches return before the GPU has
run them). Per step also the GPU period: from this step's first event to the next step's, the
step's whole cost on the GPU timeline, scheduler gaps included. Events are read only once they
have completed (``query``), so recording adds no synchronisation to the steps.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from typing import Callable

import torch

DIR_ENV = "STEP_TIMER_DIR"
# phase -> (module, attribute): the functions a decode step of the v2 worker runs, outermost first
PHASES = {
    "step": ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2.forward_batch_generation"),
    "draft": ("sglang.srt.speculative.eagle_worker_v2", "EagleDraftWorker.draft"),
    "draft_forward_graph": ("sglang.srt.speculative.eagle_draft_cuda_graph_runner",
                            "EAGLEDraftCudaGraphRunner.execute"),
    "draft_forward_eager": ("sglang.srt.speculative.eagle_worker_v2", "EagleDraftWorker.draft_forward"),
    "tree_build": ("sglang.srt.speculative.eagle_worker_v2", "build_eagle_verify_input"),
    "verify": ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2.verify"),
    "verify_prepare": ("sglang.srt.speculative.eagle_worker_common", "eagle_prepare_for_verify"),
    "target_forward": ("sglang.srt.managers.tp_worker", "TpModelWorker.forward_batch_generation"),
    "sample": ("sglang.srt.speculative.eagle_worker_common", "eagle_sample"),
    "draft_extend": ("sglang.srt.speculative.eagle_worker_v2", "EagleDraftWorker._draft_extend_for_decode"),
}


class HostEvent:
    """``torch.cuda.Event``'s calls on a host clock, for ``--smoke`` runs on a CPU (plumbing only)."""

    def record(self) -> None:
        self.at = time.perf_counter()

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "HostEvent") -> float:
        return 1000 * (end.at - self.at)


def new_event():
    return torch.cuda.Event(enable_timing=True) if torch.cuda.is_available() else HostEvent()


class Recorder:
    """The steps of one scheduler process: open phases' events, finished steps per label."""

    def __init__(self, directory: str):
        self.directory = directory
        self.label_path = os.path.join(directory, "label")
        self.label: str | None = None
        self.label_mtime = None
        self.step: dict | None = None  # the step being recorded: phase -> [(start, end events, host s)]
        self.pending: list[dict] = []  # recorded steps whose events may not have completed yet
        self.steps: list[dict] = []  # completed steps of the current label
        self.last_first = None  # the newest completed step's first event

    def poll_label(self) -> None:
        """Reread the label file when it changed; a finished label's steps are written out."""
        try:
            mtime = os.stat(self.label_path).st_mtime_ns
        except FileNotFoundError:
            mtime = None
        if mtime == self.label_mtime:
            return
        self.label_mtime = mtime
        label = open(self.label_path).read().strip() if mtime is not None else None
        if label != self.label:
            self.flush()
            self.label = label

    def flush(self) -> None:
        if self.label is None:
            return
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.harvest()
        path = os.path.join(self.directory, f"steps-{self.label}.json")
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump({"label": self.label, "pid": os.getpid(), "steps": self.steps}, handle)
        os.replace(path + ".tmp", path)
        self.steps, self.pending, self.last_first = [], [], None

    def harvest(self) -> None:
        """Recorded steps whose last event has completed become numbers; a step's GPU period ends
        at the next recorded step's first event."""
        while self.pending and self.pending[0]["last"].query():
            step = self.pending.pop(0)
            if self.last_first is not None:
                self.steps[-1]["gpu_period_ms"] = self.last_first.elapsed_time(step["first"])
            self.last_first = step["first"]
            self.steps.append({
                "batch": step["batch"], "greedy": step["greedy"],
                "gpu_ms": {phase: sum(start.elapsed_time(end) for start, end, _ in spans)
                           for phase, spans in step["spans"].items()},
                "host_ms": {phase: 1000 * sum(host for _, _, host in spans) for phase, spans in step["spans"].items()}})

    def timed(self, phase: str, function: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            step = self.step
            if step is None or (phase == "target_forward" and not kwargs.get("is_verify")) or (
                    torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
                return function(*args, **kwargs)
            start, end = new_event(), new_event()
            host = time.perf_counter()
            start.record()
            try:
                return function(*args, **kwargs)
            finally:
                end.record()
                step["spans"].setdefault(phase, []).append((start, end, time.perf_counter() - host))
                step["last"] = end
        return wrapper

    def timed_step(self, function: Callable) -> Callable:
        whole_step = self.timed("step", function)

        def step(worker, batch, *args, **kwargs):
            self.poll_label()
            self.harvest()
            if self.label is None or batch.forward_mode.is_extend() or batch.is_extend_in_batch:
                return function(worker, batch, *args, **kwargs)
            first = new_event()
            first.record()
            self.step = {"batch": int(batch.seq_lens.shape[0]), "greedy": bool(batch.sampling_info.is_all_greedy),
                         "spans": {}, "first": first, "last": first}
            try:
                return whole_step(worker, batch, *args, **kwargs)
            finally:
                self.pending.append(self.step)
                self.step = None
        return step


def resolve(module_name: str, attribute: str):
    owner = importlib.import_module(module_name)
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, name


def wrap_phases(recorder: Recorder) -> None:
    for phase, (module_name, attribute) in PHASES.items():
        if phase == "step":
            continue
        owner, name = resolve(module_name, attribute)
        setattr(owner, name, recorder.timed(phase, getattr(owner, name)))


def load() -> None:
    """The plugin's entry point: wrap the step when ``STEP_TIMER_DIR`` is set; the phases inside it
    are wrapped at the first decode step."""
    if DIR_ENV not in os.environ:
        return
    from sglang_eagle_ext.sglang.compat.patch import after_import

    recorder = Recorder(os.environ[DIR_ENV])
    module_name, attribute = PHASES["step"]

    def apply(module) -> None:
        owner, name = resolve(module_name, attribute)
        original = getattr(owner, name)
        if getattr(original, "step_timer", False):
            return
        timed_step = recorder.timed_step(original)
        wrapped = []

        def first_step(worker, batch, *args, **kwargs):
            if not wrapped:
                wrap_phases(recorder)
                wrapped.append(True)
            return timed_step(worker, batch, *args, **kwargs)

        first_step.step_timer = True
        setattr(owner, name, first_step)

    after_import(module_name, apply)
