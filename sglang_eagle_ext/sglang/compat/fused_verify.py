"""Sampled EAGLE verify served by the fused from-logits sampler inside SGLang's server.

Seam S2 of ``verify-seams.md``: the function that applies penalties, logit bias and the grammar
mask to the logits in place and then branches between greedy and sampled verify is wrapped
(:data:`SEAMS`: ``eagle_utils.eagle_sample`` from 0.5.14; before, the v2 worker's
``EagleVerifyInputV2Mixin.sample`` and the v1 worker's ``EagleVerifyInput.verify``, which serves
trees on 0.5.11 - 0.5.12). All three take ``(verify input, batch, logits output, ...)``. When the
fused path applies, the wrapper routes the call into the greedy arm (``sampling_info.is_all_greedy``
set for the call only; every release reads the branch from it), and the greedy arm's
``verify_tree_greedy_func``, a global of the seam's module that SGLang looks up at call time, is a
dispatcher that then draws the coins exactly as the release does,
runs :func:`~sglang_eagle_ext.kernels.sampling.tree_sampling_from_logits` on the adjusted logits
(never modified, so logprobs are unchanged) and broadcasts the result from TP rank 0, as the
sampled arm does. The release's acceptance test, thresholds and deterministic-coin seeding are
kept; ``SIMULATE_ACC_LEN`` runs after the branch as before. The softmax, renorm passes and the
``[bs, n, V]`` probability and zero draft tensors are never built; the greedy arm's argmax is
the one wasted pass.

Hands back to stock SGLang (logged once per reason): a device that is not CUDA (ROCm included), an
idle batch, an all-greedy batch (stock greedy is already what it should be), rejection sampling /
block verification, UNO target sampling, active watermarking, a verify input that is not
``EagleVerifyInput`` (NGRAM), logits the sampler does not take, and, unless the switch is set,
tensor parallelism.

Switch: ``SGLANG_EAGLE_EXT_FUSED_VERIFY`` = ``1`` (serve sampled verify fused) or ``0`` (stock).
Unset, it is on where it has run end to end on a GPU: the releases in :data:`DEFAULT_ON` (outputs
identical to stock, tokens/s at or above stock's within the rounds' spread:
``benchmarks/results/fused_verify.md``) at tensor-parallel size 1; under tensor parallelism and on
other releases it is opt-in until it has run there.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

import torch
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from sglang_eagle_ext.sglang.compat.patch import require, required_class, wrap_method

ENV_SWITCH = "SGLANG_EAGLE_EXT_FUSED_VERIFY"
DEFAULT_ON = SpecifierSet("==0.5.16")  # and TP size 1: see _hand_back_reason
_SPEC = "sglang.srt.speculative."


@dataclass(frozen=True)
class Seam:
    """A function holding the greedy/sampled branch: ``module.function``, or a method of
    ``module.owner``; the greedy arm calls ``module.verify_tree_greedy_func``."""

    releases: SpecifierSet
    module: str
    function: str
    owner: str | None = None


SEAMS = (
    Seam(SpecifierSet(">=0.5.14"), _SPEC + "eagle_utils", "eagle_sample"),
    Seam(SpecifierSet("<0.5.14"), _SPEC + "eagle_info_v2", "sample", owner="EagleVerifyInputV2Mixin"),
    Seam(SpecifierSet("<0.5.14"), _SPEC + "eagle_info", "verify", owner="EagleVerifyInput"),
)
# Modules that import ``eagle_sample`` by name (rebound there too); NGRAM's worker is left stock.
CALLERS = (_SPEC + "eagle_worker_common", _SPEC + "eagle_worker_v2", _SPEC + "multi_layer_eagle_worker_v2")
_SAMPLER_DTYPES = ("float32", "bfloat16", "float16")
_DEVICES = ("cuda",)  # tests on a CPU host add "cpu" (the kernels then run in Triton's interpreter)

_active = threading.local()  # the eagle_sample call being served fused (read by the dispatcher)
_logged: set[str] = set()


def _switch() -> str:
    return os.environ.get(ENV_SWITCH, "").strip()


def selected(release: Version) -> bool:
    """Whether sampled verify is served fused: the switch when it is set, else :data:`DEFAULT_ON`."""
    value = _switch().lower()
    if not value:
        return release in DEFAULT_ON
    if value not in ("0", "1", "off", "on", "false", "true"):
        raise ValueError(f"{ENV_SWITCH}={value!r}: expected 1 (fused) or 0 (stock)")
    return value in ("1", "on", "true")


@dataclass(frozen=True)
class _Call:
    """What the dispatcher needs of the wrapped call."""

    logits_output: Any  # its next_token_logits, [bs * n, V], read when the branch is reached (adjusted by then)
    sampling_info: Any
    seq_lens: Any


# SGLang's rejection-sampling option came with eagle_sample: older ServerArgs have no such field
_REJECTION_SAMPLING = SEAMS[0].releases


def _setting(release: Version, name: str) -> Any:
    """A speculative server setting, read where this release's ``eagle_sample`` reads it, and when:
    on every call (a running server can update the accept thresholds)."""
    if release >= Version("0.5.17"):
        from sglang.srt.runtime_context import get_spec

        return getattr(get_spec(), name)
    if release >= Version("0.5.16"):
        from sglang.srt.runtime_context import get_server_args

        return getattr(get_server_args(), name)
    from sglang.srt.server_args import get_global_server_args

    return getattr(get_global_server_args(), name)


@functools.cache  # one group per process; read on every fused verify call
def _tp_group():
    """The group this release's sampled arm broadcasts over (attention TP under DP attention)."""
    from sglang.srt.layers.dp_attention import is_dp_attention_enabled

    try:
        from sglang.srt.runtime_context import get_parallel
    except ImportError:  # before 0.5.14 (from 0.5.14, ParallelContext hands out these same groups)
        from sglang.srt.distributed import get_tp_group
        from sglang.srt.layers.dp_attention import get_attention_tp_group

        return get_attention_tp_group() if is_dp_attention_enabled() else get_tp_group()
    return get_parallel().attn_tp_group if is_dp_attention_enabled() else get_parallel().tp_group


def _hand_back_reason(release: Version, verify_input, batch, logits_output, uno=None, watermark=None) -> str | None:
    """Why this call must be served by stock SGLang, or None when the fused path applies."""
    logits = logits_output.next_token_logits
    info = batch.sampling_info
    if logits.device.type not in _DEVICES:
        return f"device {logits.device.type}"
    if torch.version.hip:  # SGLang verifies sampled batches greedily on ROCm (and we never ran there)
        return "ROCm"
    if batch.forward_mode.is_idle():
        return "idle batch"
    if info.is_all_greedy:
        return "all-greedy batch"
    if type(verify_input).__name__ != "EagleVerifyInput":
        return f"verify input {type(verify_input).__name__}"
    has_rejection_sampling = _REJECTION_SAMPLING.contains(release, prereleases=True)
    if has_rejection_sampling and _setting(release, "speculative_use_rejection_sampling"):
        return "rejection sampling"
    if uno is not None:
        return "UNO target sampling"
    if watermark is not None and getattr(info, "has_watermark_candidates", False):
        return "watermark"
    if str(logits.dtype).removeprefix("torch.") not in _SAMPLER_DTYPES or logits.dim() != 2 or logits.stride(-1) != 1:
        return f"logits {logits.dtype} {tuple(logits.shape)}"
    if not _switch() and _tp_group().world_size > 1:
        return f"tensor parallelism: the fused sampler is opt-in there until it has run on GPUs ({ENV_SWITCH}=1)"
    return None


def _log_once(reason: str) -> None:
    if reason not in _logged:
        _logged.add(reason)
        print(f"sglang-eagle-ext: verify sampling by stock SGLang for this batch ({reason}); "
              f"later batches like it are not logged (pid {os.getpid()})", file=sys.stderr, flush=True)


def _wrap_branch(release: Version, seam: Seam, original: Callable) -> Callable:
    def wrapped(verify_input, batch, logits_output, *rest, **kwargs):
        uno = watermark = None
        if seam.owner is None:  # eagle_sample(..., grammar_mask, uno_target_max_top_k, *, watermark_state)
            uno = kwargs.get("uno_target_max_top_k", rest[1] if len(rest) > 1 else None)
            watermark = kwargs.get("watermark_state")
        reason = _hand_back_reason(release, verify_input, batch, logits_output, uno, watermark)
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


def _dispatcher(module, release: Version, original: Callable) -> Callable:
    from sglang_eagle_ext.kernels.sampling import tree_sampling_from_logits
    from sglang_eagle_ext.sglang.compat.tree_kernels import strict_acceptance

    strict = strict_acceptance(release)

    @functools.wraps(original)
    def verify_tree_greedy_func(*args, **kwargs):
        call = getattr(_active, "call", None)
        if call is None:  # a greedy verify: SGLang's (or the bound drop-in) op
            return original(*args, **kwargs)
        _active.call = None
        logits = call.logits_output.next_token_logits
        names = ("predicts", "accept_index", "accept_token_num", "candidates", "retrive_index",
                 "retrive_next_token", "retrive_next_sibling")
        given = dict(zip(names, args))
        given.update({k.replace("retrieve_", "retrive_"): v for k, v in kwargs.items()})
        predicts, accept_index, accept_token_num = (given[k] for k in names[:3])
        candidates = given["candidates"]
        info = call.sampling_info
        # the sampled arm's coins, drawn at the same point of the RNG stream as SGLang draws them
        if hasattr(module, "_verify_coins"):  # 0.5.17+: seeded when deterministic inference is on
            coins, final_coins = module._verify_coins(sampling_info=info, seq_lens=call.seq_lens,
                                                      draft_token_num=candidates.shape[1],
                                                      candidates=candidates, device=candidates.device)
        else:
            coins = torch.rand_like(candidates, dtype=torch.float32, device=candidates.device)
            final_coins = torch.rand((candidates.shape[0],), dtype=torch.float32, device=candidates.device)
        tree_sampling_from_logits(
            predicts, accept_index, accept_token_num, candidates, given["retrive_index"],
            given["retrive_next_token"], given["retrive_next_sibling"], coins, final_coins, logits,
            info.temperatures, info.top_ks, info.top_ps,
            _setting(release, "speculative_accept_threshold_single"),
            _setting(release, "speculative_accept_threshold_acc"), strict_acceptance=strict)
        if "fused" not in _logged:  # the proof in a server's log that the fused path serves
            _logged.add("fused")
            print(f"sglang-eagle-ext: sampled verify served by the fused sampler (first batch: {candidates.shape[0]} "
                  f"requests x {candidates.shape[1]} rows, vocab {logits.shape[-1]}; pid {os.getpid()})",
                  file=sys.stderr, flush=True)
        group = _tp_group()
        if group.world_size > 1:  # as the sampled arm: every rank takes rank 0's draws
            group.broadcast(predicts, src=0)
            group.broadcast(accept_index, src=0)
            group.broadcast(accept_token_num, src=0)
        return predicts, accept_index, accept_token_num

    return verify_tree_greedy_func


def describe(release: Version, sites: list[str]) -> str:
    """The activation log's phrase for which path serves verify, and why."""
    given = _switch()
    if sites:
        why = (f"{ENV_SWITCH}={given}" if given else
               f"default on SGLang {release} at TP size 1; {ENV_SWITCH}=0 turns it off")
        return f"fused sampler for sampled verify ({why}; {', '.join(sites)})"
    if given:
        return f"stock SGLang ({ENV_SWITCH}={given})"
    return (f"stock SGLang (the fused sampler is opt-in on SGLang {release}, not yet validated end to end on a GPU "
            f"there: {ENV_SWITCH}=1 turns it on)")


def apply(release: Version) -> list[str]:
    """Wire the fused sampler into every seam of ``release`` (and the modules that imported
    ``eagle_sample`` by name); return the branch functions wired (now or by an earlier call)."""
    sites = []
    for seam in SEAMS:
        if not seam.releases.contains(release, prereleases=True):
            continue
        module = importlib.import_module(seam.module)
        greedy = getattr(module, "verify_tree_greedy_func", None)
        require(callable(greedy), f"{seam.module}.verify_tree_greedy_func")
        owner = module if seam.owner is None else required_class(module, seam.owner, seam.function)
        require(callable(getattr(owner, seam.function, None)), f"{seam.module}.{seam.function}")
        stock = getattr(owner, seam.function)
        sites.append(f"{seam.owner + '.' if seam.owner else ''}{seam.function}")
        if not wrap_method(owner, seam.function, lambda original, seam=seam: _wrap_branch(release, seam, original)):
            continue  # wired by an earlier call
        module.verify_tree_greedy_func = _dispatcher(module, release, greedy)
        for name in CALLERS if seam.owner is None else ():
            caller = sys.modules.get(name)
            if caller is not None and getattr(caller, seam.function, None) is stock:
                setattr(caller, seam.function, getattr(owner, seam.function))
    return sites
