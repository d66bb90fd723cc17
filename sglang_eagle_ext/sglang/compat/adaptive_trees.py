"""A tree in the per-step adaptive set (issue 39, stage B of ``docs/adaptive-shape.md``), SGLang 0.5.23.

With ``SGLANG_EAGLE_EXT_ADAPTIVE`` on (or ``cycle``, ``hold``) and a launch top-k above 1, the launch shape
``S/k/D`` is the set's one tree and the envelope of the set; the other candidate steps of
``--speculative-adaptive-config`` (stock's file; without one
:data:`~sglang_eagle_ext.sglang.shape_policy.DEFAULT_STEPS`) are chains ``S'/1/S'+1`` (``S' < S``) and off
(``0``). Stock refuses top-k above 1 under ``--speculative-adaptive``
(``adaptive_spec_params.adaptive_unsupported_reason``: a warning, then the static shape), and without the flag
it never looks: either way SGLang sizes its pools, draft-token bound, buffers and graphs for the launch shape,
which is what the envelope needs. The seams (each a :class:`Target` below):

* ``Engine._launch_subprocesses`` (:data:`LAUNCH_CHECK`, armed at activation): the launch checked against the
  set in the main process, before SGLang starts a process, loads a model or sizes a pool; a launch that is not
  its envelope stops start-up with the package's one line (``sglang-eagle-ext: not started: ...``) naming the
  flag and the fix. ``sglang.Engine`` and the HTTP server (``http_server.launch_server``, which ``sglang serve``
  and ``python -m sglang.launch_server`` run) both launch through it, as does the gRPC server (an ``Engine``).
  ``Scheduler.__init__``: the KV reservation pinned (below) in the scheduler process, before it sizes a pool.
  ``EAGLEWorkerV2.__init__``: the worker gets stock's ``AdaptiveController`` with this package's policy (told
  the tree: it weighs the tree's acceptance and cost apart from the chains'), as stock gives it one under
  ``--speculative-adaptive``; stock's ``init_cuda_graphs`` then registers the launch state (the tree) and builds
  the chains' and off's states with the worker's own ``build_adaptive_runtime_state``. The controller is keyed
  by steps, which name one shape each here (the tree's ``S`` is no chain's).
* ``EAGLEWorkerV2._override_worker_state`` (the build's override of steps and draft tokens): also sets the
  top-k of the shape built (the worker's, the drafter's, the config's, which the attention backends and graph
  runners read when built), inside stock's override so that its chain buffers are rebuilt at a shape they fit.
* ``EAGLEWorkerV2.apply_runtime_state`` (the switch): the worker's and the drafter's top-k set to the new
  shape's before stock's switch, which rebuilds the chain buffers from them (a chain's top-k 1 needs
  ``D == S + 1``). The config keeps the launch top-k while serving: after start-up it is read only by the
  KV reservation (pinned below) and by the tokenizer's context budget (another process, sized at launch).
* ``EagleDraftWorker._draft_extend_for_prefill`` / ``_draft_extend_for_decode``: the next step's top-k
  (``topk_p`` / ``topk_index``, one row a request) computed at the tree's ``k``, whatever the running shape,
  because the step after may be the tree; SGLang's ``fast_topk`` sorts them, so a chain's column is the first
  (the argmax; its probability in place of stock's 1, which a chain's verify never reads).
  ``EagleDraftWorker.draft``: the columns sliced to the running shape's top-k. Every draft input thus has
  ``k`` columns, so the scheduler may merge a new request's into a running batch's.
* ``allocation_sizing.get_alloc_len_per_decode``: pinned to its launch value, the envelope's. The scheduler
  reserves a step's KV before the worker switches shape (``forward_batch_generation`` asks the controller),
  from the config's steps, which the last switch set: a chain's reserve is short of the tree's ``S * k``.

Greedy and sampled outputs across switches are checked by ``tests/sglang/test_adaptive_lossless.py`` (its CPU server
is launched at a tree); the seams one at a time by ``tests/sglang/test_adaptive_trees.py``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from dataclasses import dataclass

from sglang_eagle_ext.sglang.compat import releases, runtime
from sglang_eagle_ext.sglang.compat.patch import (SCHEDULER_MODULE, Patch, Target, require, required_class,
                                                  wrap_method)
from sglang_eagle_ext.sglang.shape_policy import all_candidates, load_candidates, shape_name

RELEASES = releases.ADAPTIVE_TREES.releases
_WORKER = "sglang.srt.speculative.eagle_worker_v2"
_SIZING = "sglang.srt.mem_cache.allocation_sizing"
_ENGINE = "sglang.srt.entrypoints.engine"
_ATTRIBUTE = "eagle_ext_tree_set"  # the worker's and its drafter's TreeSet, where a tree is in the set

# the launch checked in the main process before SGLang starts any other: every launch goes through
# Engine._launch_subprocesses (the HTTP server's launch_server calls it too), whose first acts are configuring
# the logger and resolving the record (both idempotent); the check does them first, then reads the resolved shape
CHECK = (Target(RELEASES, _ENGINE, "Engine", "_launch_subprocesses", params=("cls", "server_args"),
                reads=("configure_logger", "server_args.resolve_once", "cls._launch_scheduler_processes")),
         Target(RELEASES, _ENGINE, "configure_logger", params=("server_args",)),
         Target(RELEASES, "sglang.srt.entrypoints.http_server", "launch_server", params=("server_args",),
                reads=("Engine._launch_subprocesses",)),
         Target(RELEASES, "sglang.srt.arg_groups.overrides", "resolving_view", params=("server_args",)))
# the reservation pinned where the scheduler process has published its configuration and taken no memory yet
PIN = (Target(RELEASES, SCHEDULER_MODULE, "run_scheduler_process", reads=("publish", "Scheduler")),
       Target(RELEASES, SCHEDULER_MODULE, "Scheduler", "__init__", params=("self", "server_args")))
LAUNCH = Target(RELEASES, _WORKER, "EAGLEWorkerV2", "__init__",
                params=("self", "server_args", "gpu_id", "nccl_port", "target_worker"),
                reads=("self._hosts_draft", "self._draft_worker", "AdaptiveController", "self.adaptive_controller"))
# stock's start-up of an adaptive worker: the launch state registered, the others built by the controller
BUILD = (Target(RELEASES, _WORKER, "EAGLEWorkerV2", "init_cuda_graphs",
                reads=("self.adaptive_controller", "register", "init_states")),
         Target(RELEASES, _WORKER, "EAGLEWorkerV2", "build_adaptive_runtime_state",
                reads=("self._override_worker_state", "init_attention_backend", "_capture_cuda_graphs")),
         Target(RELEASES, _WORKER, "EAGLEWorkerV2", "_override_worker_state",
                params=("self", "speculative_num_steps", "speculative_num_draft_tokens", "cuda_graph_bs"),
                reads=("_rebuild_topk1_chain_buffers",)),
         # the top-k the shape's objects are built for: the drafter's backends, the verify backend, the graphs
         Target(RELEASES, _WORKER, "EagleDraftWorker", "init_attention_backend", reads=("self.topk",)),
         Target(RELEASES, "sglang.srt.layers.attention.triton_backend", "TritonAttnBackend", "__init__",
                reads=("speculative_eagle_topk",)),
         Target(RELEASES, "sglang.srt.speculative.eagle_draft_cuda_graph_runner", "EAGLEDraftCudaGraphRunner",
                "__init__", reads=("speculative_eagle_topk",)),
         Target(RELEASES, "sglang.srt.runtime_context", "RuntimeContext", "override", params=("self", "source")))
GET_CONTEXT = Target(RELEASES, "sglang.srt.runtime_context", "get_context")
SWITCH = (Target(RELEASES, _WORKER, "EAGLEWorkerV2", "apply_runtime_state", params=("self", "state"),
                 reads=("self.speculative_num_steps", "_rebuild_topk1_chain_buffers")),
          Target(RELEASES, "sglang.srt.speculative.base_spec_worker", "EagleDraftWorkerBase",
                 "_rebuild_topk1_chain_buffers", reads=("self.topk",)))
# where the next step's top-k is computed and read, and where a draft input's rows are merged
TOPK = (Target(RELEASES, _WORKER, "EagleDraftWorker", "_draft_extend_for_prefill", reads=("fast_topk", "self.topk")),
        Target(RELEASES, _WORKER, "EagleDraftWorker", "_draft_extend_for_decode", reads=("fast_topk", "self.topk")),
        Target(RELEASES, _WORKER, "EagleDraftWorker", "draft", params=("self", "batch"),
               reads=("batch.spec_info",)),
        Target(RELEASES, _WORKER, "EagleDraftWorker", "draft_forward", reads=("spec_info.topk_index",)),
        Target(RELEASES, "sglang.srt.speculative.eagle_info", "EagleDraftInput", "merge_batch",
               reads=("topk_index",)))
# the reservation: every caller reaches get_alloc_len_per_decode through the module's global
RESERVATION = (Target(RELEASES, _SIZING, "get_alloc_len_per_decode", reads=("speculative_eagle_topk",)),
               Target(RELEASES, _SIZING, "get_alloc_reserve_per_decode", reads=("get_alloc_len_per_decode",)),
               Target(RELEASES, "sglang.srt.managers.schedule_batch", "ScheduleBatch",
                      "_new_tokens_required_next_decode_spec_v2", reads=("get_alloc_reserve_per_decode",)),
               Target(RELEASES, "sglang.srt.speculative.eagle_utils", "eagle_prepare_for_decode",
                      reads=("get_alloc_reserve_per_decode",)))


@dataclass(frozen=True)
class TreeSet:
    """The set's tree ``steps/topk/draft_tokens`` (the launch shape, the envelope) and its ``chains`` (steps
    ``S'``, shape ``S'/1/S'+1``; ``0`` is off)."""

    steps: int
    topk: int
    draft_tokens: int
    chains: tuple[int, ...]

    @classmethod
    def checked(cls, steps: int, topk: int, draft_tokens: int, candidates: list[int]) -> "TreeSet":
        """The set a launch at ``steps/topk/draft_tokens`` serves among the adaptive config's candidate steps;
        a launch that is not the set's envelope raises, naming every flag to change (both fixes at once where
        both are needed, so that the launch they give is the envelope)."""
        from sglang_eagle_ext.sglang.compat.adaptive_shape import ENV_SWITCH  # it imports this module

        where = "the candidate_steps of --speculative-adaptive-config (default: those of the package's policy)"
        deepest = max(candidates)
        chains = tuple(step for step in candidates if step != deepest)
        needed = max(chains) + 1 if chains else 0
        problems = []
        if steps != deepest:
            problems.append(f"the launch shape {steps}/{topk}/{draft_tokens} is the set's tree and must be its "
                            f"deepest; {where} are {candidates}. Set --speculative-num-steps to {deepest} or "
                            f"change the candidates")
        if needed > draft_tokens:
            problems.append(f"the chain {needed - 1}/1/{needed} of {where} needs {needed} draft tokens; "
                            f"--speculative-num-draft-tokens is {draft_tokens} (SGLang sizes for the launch "
                            f"shape). Raise it to {needed} or drop that candidate")
        if problems:
            raise ValueError(f"{ENV_SWITCH} with --speculative-eagle-topk {topk}: " + "; and ".join(problems))
        return cls(steps, topk, draft_tokens, chains)

    def topk_of(self, steps: int) -> int:
        return self.topk if steps == self.steps else 1

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.steps, self.topk, self.draft_tokens

    def describe(self) -> str:
        chains = ", ".join(map(shape_name, self.chains))
        return shape_name(self.steps, self.shape) + (f" with {chains}" if chains else "")


def bind(worker_module) -> str:
    """Wrap the worker's seams (a launch at top-k 1 passes through them); the activation line's phrase."""
    release = releases.installed_release()
    if not releases.ADAPTIVE_TREES.holds(release):
        return f"trees: not in the set (built for SGLang {RELEASES}; this is {release})"
    scheduler_module = importlib.import_module(SCHEDULER_MODULE)  # imported: this binding runs after it
    require(hasattr(getattr(scheduler_module, PIN[1].name, None), PIN[1].member), PIN[1].path)
    for target in (LAUNCH, BUILD[2], SWITCH[0], *TOPK[:3]):
        require(hasattr(getattr(worker_module, target.name, None), target.member), target.path)
    worker, drafter = worker_module.EAGLEWorkerV2, worker_module.EagleDraftWorker
    wrap_method(getattr(scheduler_module, PIN[1].name), PIN[1].member, _pinning_the_reservation)
    wrap_method(worker, LAUNCH.member, functools.partial(_launching, worker_module=worker_module))
    wrap_method(worker, BUILD[2].member, _building_at_the_shapes_topk)
    wrap_method(worker, SWITCH[0].member, _switching_topk)
    for extend in TOPK[:2]:
        wrap_method(drafter, extend.member, _extending_at_the_trees_topk)
    wrap_method(drafter, TOPK[2].member, _drafting_the_running_columns)
    return "trees: the launch shape where its top-k is above 1"


def _launch_shape():
    """``(S, k, D)`` of a launch whose top-k is above 1 (the set's tree), else None; and the config file."""
    spec = runtime.module_attribute(runtime.GET_SPEC)()
    shape = spec.speculative_num_steps, spec.speculative_eagle_topk, spec.speculative_num_draft_tokens
    return (shape if (spec.speculative_eagle_topk or 1) > 1 else None), spec.speculative_adaptive_config


def _bind_the_launch_check(engine_module) -> None:
    """Wrap ``Engine._launch_subprocesses`` where the adaptive switch is on (off: stock's launch untouched)."""
    from sglang_eagle_ext.sglang.compat.adaptive_shape import selected  # it imports this module

    if selected(releases.installed_release()) == "off":
        return
    engine = required_class(engine_module, CHECK[0].name, CHECK[0].member)
    wrap_method(engine, CHECK[0].member, _checking_the_launch)


def _checking_the_launch(original):
    @functools.wraps(original)
    def _launch_subprocesses(cls, server_args, *args, **kwargs):
        check_the_launch(server_args)
        return original(cls, server_args, *args, **kwargs)
    return _launch_subprocesses


def check_the_launch(server_args) -> None:
    """Stop start-up (:func:`~sglang_eagle_ext.sglang.plugin.not_started`, one line) where the launch, at top-k
    above 1, is not the set's envelope. Runs in the main process before SGLang starts any other: it configures
    the logger and resolves the record as stock's launch does first (each once: stock's calls then find them
    done), and reads the shape resolution gave (SGLang may choose the steps, top-k and draft tokens)."""
    from sglang_eagle_ext.sglang.plugin import not_started

    runtime.module_attribute(CHECK[1])(server_args)
    server_args.resolve_once()
    view = runtime.module_attribute(CHECK[3])(server_args)
    if (view.speculative_eagle_topk or 1) <= 1:
        return
    config = view.speculative_adaptive_config
    try:
        candidates = all_candidates(load_candidates(config))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise not_started(f"--speculative-adaptive-config {config}: not SGLang's adaptive config ({exc}); "
                          "fix the file or leave the flag out") from None
    try:
        TreeSet.checked(view.speculative_num_steps, view.speculative_eagle_topk, view.speculative_num_draft_tokens,
                        candidates)
    except ValueError as exc:
        raise not_started(exc) from None


# armed at activation (an engine imported after the scheduler, whose import binds the worker's seams, would be
# only half imported there)
LAUNCH_CHECK = Patch("adaptive-tree-launch", RELEASES, _ENGINE, _bind_the_launch_check, CHECK,
                     part_of="adaptive-shape")


def _pinning_the_reservation(original):
    @functools.wraps(original)
    def __init__(self, server_args, *args, **kwargs):
        if _launch_shape()[0] is not None:  # a tree, checked at launch: before the scheduler sizes a pool
            _pin_reservation()
        original(self, server_args, *args, **kwargs)
    return __init__


def _launching(original, worker_module):
    @functools.wraps(original)
    def __init__(self, server_args, *args, **kwargs):
        shape, config = _launch_shape()
        tree = policy = None
        if shape is not None:
            # the package's policy as adaptive_shape bound it, built as stock builds its own, told the tree
            policy = worker_module.AdaptiveSpeculativeParams(initial_steps=shape[0], cfg_path=config, tree=shape)
            tree = TreeSet.checked(*shape, policy.candidate_steps)  # as the launch was checked
        original(self, server_args, *args, **kwargs)
        if tree is not None and self._hosts_draft:
            self.adaptive_controller = worker_module.AdaptiveController(self, policy)
            setattr(self, _ATTRIBUTE, tree)
            setattr(self._draft_worker, _ATTRIBUTE, tree)
            print(f"sglang-eagle-ext: adaptive set: {tree.describe()}", file=sys.stderr, flush=True)
    return __init__


def _pin_reservation() -> None:
    """``get_alloc_len_per_decode`` at its value now, the launch shape's (the envelope's)."""
    sizing = importlib.import_module(_SIZING)
    envelope = sizing.get_alloc_len_per_decode()
    sizing.get_alloc_len_per_decode = functools.partial(int, envelope)


@contextlib.contextmanager
def _topk(worker, topk: int):
    """The worker's, its drafter's and the config's top-k at ``topk`` (the drafter's chain buffers rebuilt for
    it), then put back as they were, the buffers not: the caller's exit rebuilds them."""
    drafter, context = worker._draft_worker, runtime.module_attribute(GET_CONTEXT)()
    kept = worker.topk, drafter.topk, runtime.module_attribute(runtime.GET_SPEC)().speculative_eagle_topk
    worker.topk = drafter.topk = topk
    context.override("eagle-ext adaptive tree: build", speculative_eagle_topk=topk)
    drafter._rebuild_topk1_chain_buffers()
    try:
        yield
    finally:
        worker.topk, drafter.topk = kept[:2]
        context.override("eagle-ext adaptive tree: restore", speculative_eagle_topk=kept[2])


def _building_at_the_shapes_topk(original):
    @functools.wraps(original)
    @contextlib.contextmanager
    def _override_worker_state(self, speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=None):
        tree = getattr(self, _ATTRIBUTE, None)
        with original(self, speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=cuda_graph_bs):
            if tree is None:
                yield
            else:  # inside stock's override: its exit rebuilds the chain buffers at the restored shape
                with _topk(self, tree.topk_of(speculative_num_steps)):
                    yield
    return _override_worker_state


def _switching_topk(original):
    @functools.wraps(original)
    def apply_runtime_state(self, state):
        tree = getattr(self, _ATTRIBUTE, None)
        if tree is not None:  # before stock's switch, which rebuilds the chain buffers from it
            self.topk = self._draft_worker.topk = tree.topk_of(state.speculative_num_steps)
        return original(self, state)
    return apply_runtime_state


def _extending_at_the_trees_topk(original):
    @functools.wraps(original)
    def extend(self, *args, **kwargs):
        tree = getattr(self, _ATTRIBUTE, None)
        if tree is None or self.topk == tree.topk:
            return original(self, *args, **kwargs)
        running, self.topk = self.topk, tree.topk
        try:
            return original(self, *args, **kwargs)
        finally:
            self.topk = running
    return extend


def _drafting_the_running_columns(original):
    @functools.wraps(original)
    def draft(self, batch, *args, **kwargs):
        draft_input = batch.spec_info
        if getattr(self, _ATTRIBUTE, None) is not None and draft_input.topk_index.shape[1] > self.topk:
            draft_input.topk_p = draft_input.topk_p[:, :self.topk]
            draft_input.topk_index = draft_input.topk_index[:, :self.topk]
        return original(self, batch, *args, **kwargs)
    return draft
