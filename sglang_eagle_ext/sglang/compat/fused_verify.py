"""Sampled EAGLE verify served by the fused from-logits sampler inside SGLang's server.

The seams per release, the invariants and why the wrapper goes through SGLang's own function:
``docs/verify-seams.md``. The function that applies penalties, logit bias and the grammar
mask to the logits in place and then branches between greedy and sampled verify is wrapped
(:data:`SEAMS`: ``eagle_utils.eagle_sample`` from 0.5.14; before, the v2 worker's
``EagleVerifyInputV2Mixin.sample`` and the v1 worker's ``EagleVerifyInput.verify``, which serves
trees on 0.5.11 - 0.5.12). All three take ``(verify input, batch, logits output, ...)``. When the
fused path applies, the wrapper routes the call into the greedy arm (``sampling_info.is_all_greedy``
set for the call only; every release reads the branch from it), and the greedy arm's
``verify_tree_greedy_func``, a global of the seam's module that SGLang looks up at call time, is a
dispatcher that finds the call in the thread-local ``_active``, draws the coins exactly as the
release does, runs :func:`~sglang_eagle_ext.kernels.sampling.tree_sampling_from_logits` on the
adjusted logits (never modified, so logprobs are unchanged) and broadcasts the result from TP rank 0, as the
sampled arm does. The release's acceptance test, thresholds and deterministic-coin seeding are
kept; ``SIMULATE_ACC_LEN`` runs after the branch as before. The softmax, renorm passes and the
``[bs, n, V]`` probability and zero draft tensors are never built; the greedy arm's argmax is
the one wasted pass. At a process's first verify of any kind the sampler is compiled for its logits'
vocabulary and dtype (:func:`compile_ahead`), so that the first sampled verify does not wait for Triton.

Hands back to stock SGLang (logged once per reason): a device that is not CUDA (ROCm included), an
idle batch, an all-greedy batch (stock greedy is already what it should be), rejection sampling /
block verification, UNO target sampling, active watermarking, a verify input that is not
``EagleVerifyInput`` (NGRAM), logits the sampler does not take, and, unless the switch is set on,
tensor parallelism. What that decision reads of the process is a :class:`VerifyContext`.

Switch: ``SGLANG_EAGLE_EXT_FUSED_VERIFY`` on (serve sampled verify fused) or off (stock), in any
spelling :mod:`sglang_eagle_ext.env` takes (``1``/``0``, ``yes``/``no``, ...).
Unset, it is on where it has run end to end on a GPU: the releases in :data:`DEFAULT_ON` (outputs
as stock's, tokens/s at or above stock's within the rounds' spread:
``benchmarks/results/fused_verify.md``) at tensor-parallel size 1; under tensor parallelism (run at TP 2 on
one tree: ``benchmarks/results/tp/``) and on other releases it is opt-in. Both are rows of :mod:`.releases`.

The binding is the ``fused-verify`` row of the patch table (:data:`PATCH`), applied once SGLang's
scheduler is loaded, after the ``tree-kernels`` row (the dispatcher wraps the greedy op bound then).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from packaging.version import Version

from sglang_eagle_ext import env
from sglang_eagle_ext.sglang.compat import releases, runtime
from sglang_eagle_ext.sglang.compat.patch import (SCHEDULER_MODULE, Patch, Target, require, required_class,
                                                  wrap_method)

ENV_SWITCH = "SGLANG_EAGLE_EXT_FUSED_VERIFY"
# Where it is on unless switched off (at TP size 1: see _hand_back_reason), and the releases it has
# run on end to end but stays opt-in on, with why
DEFAULT_ON = releases.FUSED_VERIFY_DEFAULT_ON
HELD_BACK = releases.FUSED_VERIFY_HELD_BACK
_SPEC = "sglang.srt.speculative."
_EAGLE_UTILS = _SPEC + "eagle_utils"

# The greedy arm's op, a global of each seam's module looked up at call time (the dispatcher takes
# its arguments by these names), and what each seam reads to pick the arm.
GREEDY_FUNC = "verify_tree_greedy_func"
GREEDY_FUNC_PARAMS = ("predicts", "accept_index", "accept_token_num", "candidates", "retrieve_index",
                      "retrieve_next_token", "retrieve_next_sibling")
_BRANCH = ("is_all_greedy", GREEDY_FUNC)
# The functions holding the greedy/sampled branch, all called (verify input, batch, logits output, ...).
_IN_WORKER_INPUTS = releases.VERIFY_IN_WORKER_INPUTS.releases
SEAMS = (
    Target(releases.EAGLE_SAMPLE.releases, _EAGLE_UTILS, "eagle_sample",
           params=("verify_input", "batch", "logits_output"), reads=_BRANCH, absent_elsewhere=True),
    Target(_IN_WORKER_INPUTS, _SPEC + "eagle_info_v2", "EagleVerifyInputV2Mixin", "sample",
           params=("self", "batch", "logits_output"), reads=_BRANCH, absent_elsewhere=True),
    Target(_IN_WORKER_INPUTS, _SPEC + "eagle_info", "EagleVerifyInput", "verify",
           params=("self", "batch", "logits_output"), reads=_BRANCH, absent_elsewhere=True),
)
# eagle_sample's arguments that hand a call back: UNO target sampling (0.5.21+, by position or
# name) and watermarking (0.5.23+, by name)
_UNO, _WATERMARK = "uno_target_max_top_k", "watermark_state"
UNO_OPTION = Target(releases.UNO.releases, _EAGLE_UTILS, "eagle_sample",
                    params=("verify_input", "batch", "logits_output", "grammar_mask", _UNO))
WATERMARK_OPTION = Target(releases.WATERMARK.releases, _EAGLE_UTILS, "eagle_sample", keywords=(_WATERMARK,))
# 0.5.17+ draw the sampled arm's coins here (seeded under deterministic inference); before, inline
VERIFY_COINS = Target(releases.VERIFY_COINS.releases, _EAGLE_UTILS, "_verify_coins",
                      keywords=("sampling_info", "seq_lens", "draft_token_num", "candidates", "device"),
                      absent_elsewhere=True)
# Where each release's branch reads the speculative settings, on every call (a running server can
# update the accept thresholds).
SETTINGS = (
    runtime.GET_SPEC,
    Target(releases.VERIFY_SETTINGS_FROM_SERVER_ARGS.releases, runtime.GET_SERVER_ARGS.module,
           runtime.GET_SERVER_ARGS.name),
    Target(releases.VERIFY_SETTINGS_FROM_GLOBAL_ARGS.releases, runtime.GLOBAL_SERVER_ARGS.module,
           runtime.GLOBAL_SERVER_ARGS.name),
)
# The groups the sampled arm broadcasts over before the runtime context's get_parallel (0.5.14)
TP_GROUP = Target(releases.DISTRIBUTED_GETTERS.releases, "sglang.srt.distributed", "get_tp_group")
ATTENTION_TP_GROUP = Target(releases.DISTRIBUTED_GETTERS.releases, "sglang.srt.layers.dp_attention",
                            "get_attention_tp_group")
# Modules that import ``eagle_sample`` by name, rebound there too; NGRAM's worker, which does as
# well, is left stock (its verify input is not EagleVerifyInput).
CALLERS = (_SPEC + "eagle_worker_common", _SPEC + "eagle_worker_v2", _SPEC + "multi_layer_eagle_worker_v2")
STOCK_CALLERS = (_SPEC + "ngram_worker",)
_SAMPLER_DTYPES = ("float32", "bfloat16", "float16")

_active = threading.local()  # the eagle_sample call being served fused (read by the dispatcher)
_logged: set[str] = set()


def _switch() -> bool | None:
    """The switch as set: on (fused), off (stock), or None when unset."""
    return env.flag(ENV_SWITCH, None)


def selected(release: Version) -> bool:
    """Whether sampled verify is served fused: the switch when it is set, else :data:`DEFAULT_ON`."""
    switch = _switch()
    return release in DEFAULT_ON if switch is None else switch


@dataclass(frozen=True)
class _Call:
    """What the dispatcher needs of the wrapped call."""

    logits_output: Any  # its next_token_logits, [bs * n, V], read when the branch is reached (adjusted by then)
    sampling_info: Any
    seq_lens: Any


@dataclass(frozen=True)
class VerifyContext:
    """What the hand-back decision and the dispatcher read of this process, handed to them
    explicitly; :func:`verify_context` builds it once, when the seams are wired."""

    release: Version
    devices: tuple[str, ...]  # the device kinds whose logits the fused sampler serves
    rocm: bool  # a ROCm build of torch, whose GPUs are "cuda" devices too
    turned_on: bool  # the switch set on: then tensor parallelism is served fused too
    setting: Callable[[str], Any]  # a speculative server setting by name, read per call (thresholds can change)
    # the group the sampled arm broadcasts over, looked up on use: none exists yet when the seams are wired
    tp_group: Callable[[], Any]


def _setting(release: Version, name: str) -> Any:
    """A speculative server setting, read where this release's branch reads it (:data:`SETTINGS`)."""
    (getter,) = [target for target in SETTINGS if target.covers(release)]
    return getattr(runtime.module_attribute(getter)(), name)


@functools.cache  # one group per process; read on every fused verify call
def _tp_group():
    """The group this release's sampled arm broadcasts over (attention TP under DP attention)."""
    from sglang.srt.layers.dp_attention import is_dp_attention_enabled

    context = runtime.parallel()
    if context is None:  # from 0.5.14, ParallelContext hands out these same groups
        return runtime.module_attribute(ATTENTION_TP_GROUP if is_dp_attention_enabled() else TP_GROUP)()
    return context.attn_tp_group if is_dp_attention_enabled() else context.tp_group


def verify_context(release: Version, devices: tuple[str, ...] = ("cuda",)) -> VerifyContext:
    """This process's :class:`VerifyContext` for ``release``. ``devices``: CUDA; a test on a CPU host
    adds ``"cpu"`` (the kernels then run in Triton's interpreter)."""
    return VerifyContext(release, devices, rocm=bool(torch.version.hip), turned_on=_switch() is True,
                         setting=functools.partial(_setting, release), tp_group=_tp_group)


def _option(target: Target, name: str, args: tuple, kwargs: dict) -> Any:
    """What a call ``(args, kwargs)`` of ``target`` passes for its parameter ``name``; None if nothing."""
    if name in kwargs:
        return kwargs[name]
    position = target.params.index(name) if name in target.params else len(args)
    return args[position] if position < len(args) else None


def _hand_back_reason(context: VerifyContext, verify_input, batch, logits_output, uno=None,
                      watermark=None) -> str | None:
    """Why this call must be served by stock SGLang, or None when the fused path applies."""
    logits = logits_output.next_token_logits
    info = batch.sampling_info
    device = _device_reason(context, logits)
    if device is not None:
        return device
    if batch.forward_mode.is_idle():
        return "idle batch"
    if info.is_all_greedy:
        return "all-greedy batch"
    if type(verify_input).__name__ != "EagleVerifyInput":
        return f"verify input {type(verify_input).__name__}"
    # SGLang's rejection-sampling option came with eagle_sample: older ServerArgs have no such field
    if releases.EAGLE_SAMPLE.holds(context.release) and context.setting("speculative_use_rejection_sampling"):
        return "rejection sampling"
    if uno is not None:
        return "UNO target sampling"
    if watermark is not None and getattr(info, "has_watermark_candidates", False):
        return "watermark"
    return _logits_reason(context, logits)


def _device_reason(context: VerifyContext, logits) -> str | None:
    """Why logits on this device go to stock SGLang, or None."""
    if logits.device.type not in context.devices:
        return f"device {logits.device.type}"
    if context.rocm:  # SGLang verifies sampled batches greedily on ROCm (and we never ran there)
        return "ROCm"
    return None


def _logits_reason(context: VerifyContext, logits) -> str | None:
    """Why these logits, in this process's parallel layout, go to stock SGLang, or None."""
    if str(logits.dtype).removeprefix("torch.") not in _SAMPLER_DTYPES or logits.dim() != 2 or logits.stride(-1) != 1:
        return f"logits {logits.dtype} {tuple(logits.shape)}"
    if not context.turned_on and context.tp_group().world_size > 1:
        return (f"tensor parallelism: the fused sampler is opt-in there ({ENV_SWITCH}=1); at TP 2 on SGLang 0.5.23 "
                "its outputs equalled stock's and its speed stayed within the A/A spread, but on one tree only "
                "(benchmarks/results/tp/), where default-on at TP 1 rests on three")
    return None


def _log_once(reason: str) -> None:
    if reason not in _logged:
        _logged.add(reason)
        print(f"sglang-eagle-ext: verify sampling by stock SGLang for this batch ({reason}); "
              f"later batches like it are not logged (pid {os.getpid()})", file=sys.stderr, flush=True)


_compiled: set[tuple] = set()  # (vocabulary, dtype, device) the kernels were compiled for ahead, or tried


def compile_ahead(context: VerifyContext, logits, log=None) -> None:
    """At a process's first verify of any kind (SGLang's own warm-up request, or the first greedy one), compile the
    fused sampler for its logits' vocabulary and dtype where it would serve them, so that the first sampled verify
    does not wait 2-4 s for Triton (a fresh machine's empty cache; seen on an H200, 2026-11-29). Once per
    vocabulary, dtype and device; a failure is logged as this package's and leaves the compilation to the first
    sampled verify."""
    key = (logits.shape[-1], logits.dtype, logits.device)
    if key in _compiled:
        return
    _compiled.add(key)
    if _device_reason(context, logits) is not None or _logits_reason(context, logits) is not None:
        return  # stock serves these
    from sglang_eagle_ext.kernels.sampling.from_logits import compile_for_vocabulary

    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    started = time.perf_counter()
    try:
        compile_for_vocabulary(logits.shape[-1], logits.device, logits.dtype,
                               strict_acceptance=releases.STRICT_ACCEPTANCE.holds(context.release))
    except Exception as exc:  # the server serves on; the first sampled verify compiles
        log(f"sglang-eagle-ext: fused sampler not compiled ahead ({type(exc).__name__}: {exc}); its first sampled "
            f"verify compiles it (this package's failure: please report it; pid {os.getpid()})")
        return
    log(f"sglang-eagle-ext: fused sampler compiled ahead for vocabulary {logits.shape[-1]} "
        f"({str(logits.dtype).removeprefix('torch.')}) in {time.perf_counter() - started:.1f} s (pid {os.getpid()})")


def _wrap_branch(context: VerifyContext, seam: Target, original: Callable) -> Callable:
    def wrapped(verify_input, batch, logits_output, *rest, **kwargs):
        compile_ahead(context, logits_output.next_token_logits)
        uno = watermark = None
        if seam.member is None:  # eagle_sample
            args = (verify_input, batch, logits_output, *rest)
            uno = _option(UNO_OPTION, _UNO, args, kwargs)
            watermark = _option(WATERMARK_OPTION, _WATERMARK, args, kwargs)
        reason = _hand_back_reason(context, verify_input, batch, logits_output, uno, watermark)
        if reason is not None:
            if reason not in ("idle batch", "all-greedy batch"):
                _log_once(reason)
            return original(verify_input, batch, logits_output, *rest, **kwargs)
        info = batch.sampling_info
        _active.call = _Call(logits_output, info, batch.seq_lens)
        info.is_all_greedy = True  # into the greedy arm, whose tree op is our dispatcher
        try:
            return original(verify_input, batch, logits_output, *rest, **kwargs)
        finally:
            info.is_all_greedy = False
            _active.call = None

    return wrapped


def _dispatcher(module, context: VerifyContext, original: Callable) -> Callable:
    from sglang_eagle_ext.kernels.sampling import tree_sampling_from_logits

    strict = releases.STRICT_ACCEPTANCE.holds(context.release)
    has_verify_coins = VERIFY_COINS.covers(context.release)

    @functools.wraps(original)
    def verify_tree_greedy_func(*args, **kwargs):
        call = getattr(_active, "call", None)
        if call is None:  # a greedy verify: SGLang's (or the bound drop-in) op
            return original(*args, **kwargs)
        _active.call = None
        logits = call.logits_output.next_token_logits
        given = {**dict(zip(GREEDY_FUNC_PARAMS, args)), **kwargs}
        (predicts, accept_index, accept_token_num, candidates, retrieve_index, retrieve_next_token,
         retrieve_next_sibling) = (given[name] for name in GREEDY_FUNC_PARAMS)
        info = call.sampling_info
        # the sampled arm's coins, drawn at the same point of the RNG stream as SGLang draws them
        if has_verify_coins:
            coins, final_coins = getattr(module, VERIFY_COINS.name)(**dict(zip(VERIFY_COINS.keywords, (
                info, call.seq_lens, candidates.shape[1], candidates, candidates.device))))
        else:
            coins = torch.rand_like(candidates, dtype=torch.float32, device=candidates.device)
            final_coins = torch.rand((candidates.shape[0],), dtype=torch.float32, device=candidates.device)
        tree_sampling_from_logits(
            predicts, accept_index, accept_token_num, candidates, retrieve_index,
            retrieve_next_token, retrieve_next_sibling, coins, final_coins, logits,
            info.temperatures, info.top_ks, info.top_ps,
            context.setting("speculative_accept_threshold_single"),
            context.setting("speculative_accept_threshold_acc"), strict_acceptance=strict)
        if "fused" not in _logged:  # the proof in a server's log that the fused path serves
            _logged.add("fused")
            print(f"sglang-eagle-ext: sampled verify served by the fused sampler (first batch: {candidates.shape[0]} "
                  f"requests x {candidates.shape[1]} rows, vocab {logits.shape[-1]}; pid {os.getpid()})",
                  file=sys.stderr, flush=True)
        group = context.tp_group()
        if group.world_size > 1:  # as the sampled arm: every rank takes rank 0's draws
            group.broadcast(predicts, src=0)
            group.broadcast(accept_index, src=0)
            group.broadcast(accept_token_num, src=0)
        return predicts, accept_index, accept_token_num

    return verify_tree_greedy_func


def describe(release: Version, sites: list[str]) -> str:
    """The activation log's phrase for which path serves verify, and why."""
    switch = _switch()
    if sites:
        why = (f"{ENV_SWITCH}={int(switch)}" if switch is not None else
               f"default on SGLang {release} at TP size 1, where {DEFAULT_ON[release]}; {ENV_SWITCH}=0 turns it off")
        return f"fused sampler for sampled verify ({why}; {', '.join(sites)})"
    if switch is not None:
        return f"stock SGLang ({ENV_SWITCH}={int(switch)})"
    why = HELD_BACK.get(release, "not yet validated end to end on a GPU there")
    return f"stock SGLang (the fused sampler is opt-in on SGLang {release}, {why}: {ENV_SWITCH}=1 turns it on)"


def apply(release: Version, devices: tuple[str, ...] = ("cuda",)) -> list[str]:
    """Wire the fused sampler into every seam of ``release`` (and the modules that imported
    ``eagle_sample`` by name), serving ``devices`` (:func:`verify_context`); return the branch
    functions wired (now or by an earlier call)."""
    context = verify_context(release, devices)
    sites = []
    for seam in SEAMS:
        if not seam.covers(release):
            continue
        module = importlib.import_module(seam.module)
        greedy = getattr(module, GREEDY_FUNC, None)
        require(callable(greedy), f"{seam.module}.{GREEDY_FUNC}")
        owner = module if seam.member is None else required_class(module, seam.name, seam.member)
        require(callable(getattr(owner, seam.attribute, None)), seam.path)
        stock = getattr(owner, seam.attribute)
        sites.append(seam.qualname)
        if not wrap_method(owner, seam.attribute, lambda original, seam=seam: _wrap_branch(context, seam, original)):
            continue  # wired by an earlier call
        setattr(module, GREEDY_FUNC, _dispatcher(module, context, greedy))
        for name in CALLERS if seam.member is None else ():
            caller = sys.modules.get(name)
            if caller is not None and getattr(caller, seam.name, None) is stock:
                setattr(caller, seam.name, getattr(owner, seam.name))
    return sites


def _bind_once_scheduler_loads(_scheduler_module) -> str:
    release = releases.installed_release()
    return "verify: " + describe(release, apply(release) if selected(release) else [])


# Its SGLang code is SEAMS and the targets above, one set per release line.
PATCH = Patch("fused-verify", releases.EVERY_RELEASE.releases, SCHEDULER_MODULE, _bind_once_scheduler_loads, (),
              switch=selected)
