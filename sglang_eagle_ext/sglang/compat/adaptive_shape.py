"""The binding of ``SGLANG_EAGLE_EXT_ADAPTIVE``: this package's
:class:`~sglang_eagle_ext.sglang.shape_policy.ShapePolicy` in place of stock's policy under
``--speculative-adaptive`` (SGLang 0.5.21 and later).

Stock's adaptive mode builds one set of CUDA graphs per candidate chain depth (off included) and switches
between them per decode step; which depth runs is asked of a policy object, constructed in
``EAGLEWorkerV2.__init__`` from the name ``AdaptiveSpeculativeParams`` that ``speculative/eagle_worker_v2.py``
imports (0.5.21+, behind the ``AdaptiveSpecPolicy`` protocol of ``speculative/adaptive_runtime_state.py``).
The binding rebinds that name, so stock keeps building, capturing and switching, and SGLang's own sizing
(the draft-token bound and KV reservation from the candidate depths of ``--speculative-adaptive-config``)
covers every depth the policy may choose: it chooses only among them. It also wraps the worker's
``forward_batch_generation`` to tell the policy, before SGLang asks it for the depth, whether the batch's
requests are all greedy (their acceptance differs too much to share one estimate). Workers that override
that method without calling it (the frozen-KV MTP worker) leave every batch counted as sampled.

Switch values: unset or off: stock's policy; ``1`` / on: the cost policy; ``cycle``: every candidate depth in
turn, one per step (the test mode that checks outputs across switches). With either, depth 0 ("off") is plain
decoding where :mod:`.plain_off` can serve the batch (``SGLANG_EAGLE_EXT_ADAPTIVE_OFF=plain|eager|stock``,
its docstring says which batches and servers), else stock's width-1 verify; the activation line says which.
``SGLANG_EAGLE_EXT_DEFERRED_EXTEND=K`` defers the drafter's extend of off steps to one catch-up every ``K``
tokens or before the next drafting step (:mod:`.deferred_extend`).
``SGLANG_EAGLE_EXT_ADAPTIVE_TRACE=PREFIX`` also writes the policy's record (every verify result and switch,
:class:`TraceFile`) to ``PREFIX.<pid>.jsonl``, one file per scheduler process. On a release before 0.5.21 a
switch set on stops start-up with its reason. The switch takes effect only with ``--speculative-adaptive``
(stock's flag: it makes SGLang build the depths); ``sglang-eagle serve --adaptive`` passes both.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import json
import os
import time

from packaging.version import Version

from sglang_eagle_ext import env
from sglang_eagle_ext.sglang.compat import adaptive_trees, deferred_extend, plain_off, releases
from sglang_eagle_ext.sglang.compat.patch import SCHEDULER_MODULE, Patch, Target, require, wrap_method
from sglang_eagle_ext.sglang.shape_policy import MODE_PHRASES, ShapePolicy

ENV_SWITCH = "SGLANG_EAGLE_EXT_ADAPTIVE"
TRACE_SWITCH = "SGLANG_EAGLE_EXT_ADAPTIVE_TRACE"
MODES = ("off", "on", "cycle", "hold")  # what selected() returns: the switch's own words beyond on and off last
RELEASES = releases.ADAPTIVE_POLICY.releases
_WORKER = "sglang.srt.speculative.eagle_worker_v2"
_STATE = "sglang.srt.speculative.adaptive_runtime_state"
# the name the worker constructs its policy from, with the keywords it passes
POLICY_NAME = Target(RELEASES, _WORKER, "AdaptiveSpeculativeParams")
POLICY_CALL = Target(RELEASES, _WORKER, "EAGLEWorkerV2", "__init__", reads=("AdaptiveSpeculativeParams",
                                                                           "speculative_adaptive_config"))
POLICY_INIT = Target(RELEASES, "sglang.srt.speculative.adaptive_spec_params", "AdaptiveSpeculativeParams",
                     "__init__", params=("self", "initial_steps", "cfg_path"))
# what the controller asks of the policy: ShapePolicy answers each
CONTROLLER = (Target(RELEASES, _STATE, "AdaptiveController", "__init__", params=("self", "worker", "policy")),
              Target(RELEASES, _STATE, "AdaptiveController", "init_states",
                     reads=("set_cuda_graph_bs", "cuda_graph_bs_for_step", "candidate_steps")),
              Target(RELEASES, _STATE, "AdaptiveController", "activate_step_by_batch",
                     reads=("self.params.get_steps_for_batch",)),
              Target(RELEASES, _STATE, "AdaptiveController", "on_verify_complete", reads=("on_verify_complete",)))


# where the binding learns the batch's kind: the worker's decode entry asks the controller for the depth
TRAFFIC_SEAMS = (Target(RELEASES, _WORKER, "EAGLEWorkerV2", "forward_batch_generation", params=("self", "batch"),
                        reads=("self.activate_step_by_batch",)),
                 Target(RELEASES, _WORKER, "EAGLEWorkerV2", "activate_step_by_batch",
                        reads=("self.adaptive_controller",)),
                 # the rule all_greedy repeats: SGLang's own for a batch built from its requests
                 Target(RELEASES, "sglang.srt.sampling.sampling_batch_info", "SamplingBatchInfo",
                        "from_schedule_batch", params=("cls", "batch"), reads=("reqs", "sampling_params", "top_k")))


def selected(release: Version) -> str:
    """``off``, ``on``, ``cycle`` or ``hold``; a switch set on where SGLang has no policy protocol stops start-up."""
    value = env.choice(ENV_SWITCH, env.ON + env.OFF + MODES[2:], "off")
    mode = value if value in MODES[2:] else "on" if value in env.ON else "off"
    if mode != "off":
        plain_off.selected()  # a bad value of the off switch stops start-up too
        _check_off_tokens()
    if deferred_extend.selected() and mode == "off":
        raise env.SwitchError(f"{deferred_extend.ENV_SWITCH} defers the drafter's extend while this package's "
                              f"policy has speculation off; {ENV_SWITCH} is off. Set {ENV_SWITCH}=1 (with "
                              f"--speculative-adaptive) or unset {deferred_extend.ENV_SWITCH}")
    if mode != "off" and release not in RELEASES:
        raise env.SwitchError(f"{ENV_SWITCH}={value}: the drafting shape is chosen per step on SGLang 0.5.21 and "
                              f"later (their --speculative-adaptive takes a policy); this is SGLang {release}. "
                              f"Unset {ENV_SWITCH} or upgrade SGLang")
    return mode


def _check_off_tokens() -> None:
    """Stops start-up unless the off step's tokens a request (:data:`plain_off.TOKENS_SWITCH`) are one, or more
    where the drafter's extend is deferred to hold them (stock's width-1 extend takes one a request) without the
    audit (which compares with stock's extends) and off is plain decoding."""
    tokens = plain_off.selected_tokens()
    if tokens == 1:
        return
    deferral, fix = deferred_extend.selected(), f"or unset {plain_off.TOKENS_SWITCH}"
    if deferral < tokens:
        raise env.SwitchError(f"{plain_off.TOKENS_SWITCH}={tokens}: an off step of {tokens} tokens a request needs the "
                              f"drafter's extend deferred for at least as many ({deferred_extend.ENV_SWITCH} is "
                              f"{deferral or 'unset'}). Set {deferred_extend.ENV_SWITCH}={max(8, tokens)} {fix}")
    if deferred_extend.audited():
        raise env.SwitchError(f"{plain_off.TOKENS_SWITCH}={tokens}: the audit ({deferred_extend.AUDIT_SWITCH}) "
                              f"checks catch-ups against stock's width-1 extends, which an off step of {tokens} "
                              f"tokens has none of. Unset {deferred_extend.AUDIT_SWITCH} {fix}")
    if plain_off.selected() == "stock":
        raise env.SwitchError(f"{plain_off.TOKENS_SWITCH}={tokens}: off is stock's width-1 verify "
                              f"({plain_off.OFF_SWITCH}=stock), one token a step. Unset {plain_off.OFF_SWITCH} {fix}")


def _bind_once_scheduler_loads(_scheduler_module) -> str:
    release = releases.installed_release()
    mode = selected(release)
    if mode == "off":
        return "adaptive shape: stock's" + (f" ({ENV_SWITCH}=1: chosen by cost)" if release in RELEASES else "")
    worker = importlib.import_module(_WORKER)
    require(hasattr(worker, POLICY_NAME.name), POLICY_NAME.path)
    prefix = env.text(TRACE_SWITCH)
    policy_mode = "cost" if mode == "on" else mode
    off_tokens = plain_off.selected_tokens()  # checked against the other switches by selected() above
    worker.AdaptiveSpeculativeParams = functools.partial(ShapePolicy, mode=policy_mode, off_tokens=off_tokens,
                                                         trace=TraceFile(prefix) if prefix else None)
    require(hasattr(worker, "EAGLEWorkerV2") and hasattr(worker.EAGLEWorkerV2, "forward_batch_generation"),
            TRAFFIC_SEAMS[0].path)
    wrap_method(worker.EAGLEWorkerV2, "forward_batch_generation", _telling_the_traffic)
    off = plain_off.bind(worker, plain_off.selected(), off_tokens)
    deferred = deferred_extend.bind(worker, deferred_extend.selected())  # inside the trees' top-k wraps
    trees = adaptive_trees.bind(worker)
    return (f"adaptive shape: {MODE_PHRASES[policy_mode]} "
            f"in place of stock's under --speculative-adaptive ({ENV_SWITCH}={mode}); {off}; {deferred}; {trees}")


def _telling_the_traffic(original):
    @functools.wraps(original)
    def forward_batch_generation(self, batch, *args, **kwargs):
        policy = getattr(getattr(self, "adaptive_controller", None), "params", None)
        requests = getattr(batch, "reqs", None)
        if isinstance(policy, ShapePolicy) and requests:  # an idle batch has none: the kind stays
            policy.note_batch(all_greedy=all_greedy(requests))
        return original(self, batch, *args, **kwargs)
    return forward_batch_generation


TRACE_ROWS = 512  # rows a trace file takes in one write
TRACE_SECONDS = 2.0  # and at the latest this long after the last one


class TraceFile:
    """The policy's rows as JSON lines in ``PREFIX.<pid>.jsonl``, appended in batches (every
    :data:`TRACE_ROWS` rows or :data:`TRACE_SECONDS` seconds, and at the process's exit), so that a step costs
    the scheduler a list append. A process killed without exit handlers loses its last batch."""

    def __init__(self, prefix: str):
        self.path = f"{prefix}.{os.getpid()}.jsonl"
        self._rows: list[dict] = []
        self._flushed = time.monotonic()
        atexit.register(self.flush)

    def __call__(self, row: dict) -> None:
        self._rows.append(row)
        if len(self._rows) >= TRACE_ROWS or time.monotonic() - self._flushed > TRACE_SECONDS:
            self.flush()

    def flush(self) -> None:
        self._flushed = time.monotonic()
        if self._rows:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write("".join(json.dumps(row) + "\n" for row in self._rows))
            self._rows = []


def all_greedy(requests) -> bool:
    """Whether every request of a running batch decodes greedily (SGLang's normalised sampling parameters:
    top-k 1). Read from the requests, not the batch's ``sampling_info.is_all_greedy``: SGLang and-merges that
    flag as requests join and never raises it again as they leave (0.5.23 ``SamplingBatchInfo.merge_batch`` /
    ``filter_batch``), so one sampled request would mark the batch sampled until it empties."""
    return all(request.sampling_params.top_k <= 1 for request in requests)


PATCH = Patch("adaptive-shape", releases.EVERY_RELEASE.releases, SCHEDULER_MODULE, _bind_once_scheduler_loads, (),
              switch=selected)
