"""The drafter's extend deferred while speculation is off (issue 39; ``docs/deferred-extend.md``), SGLang 0.5.23.

At depth 0 stock's worker runs the drafter's extend after every step, one token a request, so that a later depth
drafts from a current drafter: its KV at every committed position, its top-k and hidden row for the next token. On
a host-bound engine that extend is a forward of its own (0.5-2 ms a step on an H200, ``docs/adaptive-shape.md``
section 18), as dear as the plain step it follows. With :data:`ENV_SWITCH` set to ``K`` (1-64; unset or ``0``:
stock's extend at every step) an off step instead keeps what that extend would read (the token just sampled, the
target's EAGLE-3 aux row of the step and its position; an off step of several plain tokens,
``plain_off.TOKENS_SWITCH``, keeps each of them) per request in buffers on the device, and the drafter catches up
in one eager ``DRAFT_EXTEND_V2`` forward of each request's pending tokens:

* at an off step after which the next one's tokens would not fit in ``K``: every request of the batch (each has
  one at least); before an off step wider than the last left room for, the requests with any;
* at a step that drafts (depth >= 1), before the drafter reads the batch's draft state: the requests with any.

The catch-up reads the same inputs at the same positions and writes the same drafter KV slots as the per-step
extends; its last row per request gives the next-draft state (top-k and hidden row) the last of them would have
given, which replaces the stale rows. Between catch-ups a request's relayed draft state is stock's zero stub (the
shapes the scheduler's merge and filter need): stale exactly while its count is above 0. A request's count lives on
its ``Req`` with the pool row its tokens are kept in (a finished or retracted one takes it away, every prefill
resets it, and a request resumed in another row has none there); its tokens and rows live in
worker buffers keyed by its ``req_pool_idx`` (``(slots + 1) x K`` tokens and aux rows, allocated at the first
deferred step and logged once). A request that finishes with pending tokens leaves up to ``K - 1`` positions of
its drafter KV unwritten, which a later request sharing its prefix through the radix cache drafts over: lossless
(the target verifies every draft), at some acceptance.

Where deferral would read or write state it cannot keep right, every step keeps stock's per-step extend
(:func:`kept_reason` names why, once per worker in the log): rejection sampling (its draft proposal is drawn per
position), DSA top-k seeds from the extend, the standalone algorithm (no hidden rows), mixed chunked prefill (a
decode tail's token extended inside a prefill), batches synchronised across ranks for the MLP (their token counts
scale by one width a request), pipeline parallelism, hybrid or mrope targets, unified-memory KV, and drafter
attention backends that this path was not built against (FA3 and Triton only); per batch, hierarchical sparse
attention (its buffers follow the extend).
"""

from __future__ import annotations

import functools
import sys

from sglang_eagle_ext import env
from sglang_eagle_ext.sglang.compat import plain_off, releases
from sglang_eagle_ext.sglang.compat.patch import Target, require, wrap_method

ENV_SWITCH = "SGLANG_EAGLE_EXT_DEFERRED_EXTEND"
AUDIT_SWITCH = "SGLANG_EAGLE_EXT_DEFERRED_EXTEND_AUDIT"
MOST_PENDING = 64  # the switch's largest K: buffers grow with it, and the KV a finished request leaves unwritten
RELEASES = releases.PLAIN_OFF.releases
_WORKER = "sglang.srt.speculative.eagle_worker_v2"
_BACKENDS = ("FlashAttentionBackend", "TritonAttnBackend")  # their DRAFT_EXTEND_V2 plan takes per-request widths
_COUNT = "_sglang_eagle_ext_pending"  # on a Req: its tokens not yet extended, and the pool row they are kept in
_HOST_START = "_sglang_eagle_ext_pending_start"  # on a Req: the first one's position, where the host knows it
_STATE = "_sglang_eagle_ext_deferred"  # on the drafter: its PendingBuffers, or the reason it keeps stock's extend

SEAMS = (
    # the depth-0 extend deferred (its arguments as the worker passes them; what it reads of the result)
    Target(RELEASES, _WORKER, "EagleDraftWorker", "_draft_extend_for_decode", params=("self", "batch", "batch_result"),
           keywords=("kv_loc_plan",),
           reads=("self.speculative_num_draft_tokens", "logits_output.hidden_states", "next_token_ids",
                  "next_draft_input", "self.seed_dsa_topk_from_draft_extend", "speculative_use_rejection_sampling")),
    # the step that drafts reads the draft state from batch.spec_info
    Target(RELEASES, _WORKER, "EagleDraftWorker", "draft", params=("self", "batch"), reads=("batch.spec_info",)),
    # a prefill extends the drafter over every token of its requests
    Target(RELEASES, _WORKER, "EagleDraftWorker", "_draft_extend_for_prefill", params=("self", "batch")),
    # the stock stub's shapes: the draft state's hidden width and dtype
    Target(RELEASES, "sglang.srt.speculative.eagle_utils", "get_draft_recurrent_hidden_state_spec",
           params=("model_runner",)),
    Target(RELEASES, "sglang.srt.speculative.eagle_info", "EagleDraftExtendInput"),
    # the catch-up's batch: per-request widths as device tensors or host lists, positions from spec_info
    Target(RELEASES, "sglang.srt.model_executor.forward_batch_info", "ForwardBatch", "init_new",
           params=("cls", "batch", "model_runner"),
           keywords=("capture_hidden_mode", "return_hidden_states_before_norm", "extend_position_info"),
           reads=("batch.extend_lens", "batch.prefix_lens", "batch.extend_num_tokens", "positions")),
    Target(RELEASES, "sglang.srt.speculative.spec_utils", "renorm_draft_probs",
           params=("next_token_logits", "sampling_info", "use_rejection_sampling")),
    Target(RELEASES, "sglang.srt.utils.common", "fast_topk", params=("values", "topk", "dim")),
    # a forward's per-rank token counts are the batch's times spec_info.num_tokens_per_req where this holds
    # (ForwardBatch.init_new): a catch-up's widths differ per request
    MLP_SYNC := Target(RELEASES, "sglang.srt.utils.common", "require_mlp_sync"),
    # a request's req_to_token row: Req.kv.req_pool_idx
    Target(RELEASES, "sglang.srt.managers.schedule_batch", "ReqKvInfo"),
    Target(RELEASES, "sglang.srt.managers.schedule_batch", "Req", "__init__", reads=("self.kv",)),
)


def selected() -> int:
    """``K``, the tokens a request may hold before its drafter catches up; 0: stock's extend at every step."""
    value = env.text(ENV_SWITCH)
    if value is None:
        return 0
    if not value.isdigit() or int(value) > MOST_PENDING:
        raise env.SwitchError(f"{ENV_SWITCH}={value!r}: expected the tokens a request may hold before the "
                              f"drafter catches up, 1 to {MOST_PENDING} (0 or unset: the drafter's extend at "
                              "every step, stock's)")
    return int(value)


def audited() -> bool:
    """Whether each catch-up is checked against stock's per-step extends, run as well (a diagnostic: costs them)."""
    return env.flag(AUDIT_SWITCH, False)


def bind(worker_module, most_pending: int) -> str:
    """Wrap the drafter's three seams; the activation line's phrase."""
    if most_pending == 0:
        if audited():
            raise env.SwitchError(f"{AUDIT_SWITCH} checks the deferred drafter extend, which is off: set "
                                  f"{ENV_SWITCH} or unset {AUDIT_SWITCH}")
        return "drafter extend at every off step"
    release = releases.installed_release()
    if not releases.PLAIN_OFF.holds(release):
        raise env.SwitchError(f"{ENV_SWITCH}={most_pending}: the deferred drafter extend is built for SGLang "
                              f"{RELEASES}; this is {release}. Unset {ENV_SWITCH}")
    drafter = getattr(worker_module, SEAMS[0].name, None)
    for seam in SEAMS[:3]:
        require(hasattr(drafter, seam.member), seam.path)
    audit = audited()
    wrap_method(drafter, SEAMS[0].member, functools.partial(_deferring, most_pending=most_pending, audit=audit))
    wrap_method(drafter, SEAMS[1].member, _catching_up_before_drafting)
    wrap_method(drafter, SEAMS[2].member, _resetting_at_prefill)
    return (f"drafter extend deferred while off, at most {most_pending} tokens a request ({ENV_SWITCH})"
            + (f", each catch-up checked against stock's per-step extends, run as well ({AUDIT_SWITCH})"
               if audit else ""))


def _log(line: str) -> None:
    print(f"sglang-eagle-ext: {line}", file=sys.stderr, flush=True)


def kept_reason(drafter) -> str | None:
    """Why this drafter keeps stock's per-step extend; ``None`` where deferral may serve it. Its engine's facts,
    which do not change while it serves."""
    from sglang_eagle_ext.sglang.compat import runtime

    args = drafter.server_args
    if runtime.module_attribute(runtime.GET_SPEC)().speculative_use_rejection_sampling:
        return "rejection sampling"
    if drafter.seed_dsa_topk_from_draft_extend:
        return "DSA top-k seeds"
    if drafter.draft_runner.spec_algorithm.is_standalone():
        return "the standalone algorithm"
    if getattr(args, "enable_mixed_chunk", False):
        return "mixed chunked prefill"
    if getattr(args, "enable_unified_memory", False):
        return "unified-memory KV"
    if runtime.module_attribute(MLP_SYNC)():  # its token counts scale by a fixed width a request
        return "batches synchronised across ranks for the MLP (attention-DP, a gathered MoE buffer)"
    backend = type(drafter.draft_runner.attn_backend).__name__
    if backend not in _BACKENDS:
        return f"the drafter's attention backend {backend} (built for {', '.join(_BACKENDS)})"
    return None


class PendingBuffers:
    """Per ``req_pool_idx``: the pending tokens ``[slots, K]`` (int64), the target's aux rows ``[slots, K, width]``
    and the first pending position ``[slots]`` (int64), on the drafter's device."""

    def __init__(self, slots: int, most_pending: int, rows, audit: Audit | None = None,
                 stub_spec: tuple | None = None):
        import torch

        self.stub_spec = stub_spec  # the drafter's hidden width and dtype, for the zero stub of a deferred step
        self.tokens = torch.zeros((slots, most_pending), dtype=torch.int64, device=rows.device)
        self.rows = torch.zeros((slots, most_pending, rows.shape[1]), dtype=rows.dtype, device=rows.device)
        self.start = torch.zeros(slots, dtype=torch.int64, device=rows.device)
        self.audit = audit
        self.counts = Counts()
        mib = (self.tokens.nbytes + self.rows.nbytes + self.start.nbytes) / 2**20
        _log(f"deferred drafter extend: {slots} request slots x {most_pending} tokens of {rows.shape[1]} aux "
             f"values ({rows.dtype}), {mib:.1f} MiB")

    def append(self, batch, tokens, rows, counts: list[int], width: int = 1) -> None:
        """Each request's ``width`` tokens and aux rows (``tokens`` ``[R * width]`` and ``rows``
        ``[R * width, W]``, request by request) at columns ``counts[i] ..``, and for a request's first its
        position."""
        import torch

        pool = batch.req_pool_indices
        tokens = tokens.to(torch.int64).view(len(counts), width)
        rows = rows.view(len(counts), width, rows.shape[-1])
        if min(counts) == max(counts):  # requests that joined together (the usual case): one slice, no copy
            self.tokens[pool, counts[0]:counts[0] + width] = tokens
            self.rows[pool, counts[0]:counts[0] + width] = rows
            if counts[0] == 0:
                self.start[pool] = batch.seq_lens.to(torch.int64)
            return
        first = _to_device(counts, pool.device)
        column = first.unsqueeze(1) + torch.arange(width, device=pool.device)
        self.tokens[pool.unsqueeze(1), column] = tokens
        self.rows[pool.unsqueeze(1), column] = rows
        self.start[pool] = torch.where(first == 0, batch.seq_lens.to(torch.int64), self.start[pool])


def deferral_reason(drafter) -> str | None:
    """Why this engine's drafter keeps stock's extend at every off step whatever the switch says (its engine's
    facts: :func:`kept_reason`, then the plain step's own); ``None`` where off steps are deferred."""
    return kept_reason(drafter) or plain_off.engine_reason(drafter)


def _buffers(drafter, most_pending: int, rows, audit: bool):
    state = getattr(drafter, _STATE, None)
    if state is None:
        reason = deferral_reason(drafter)
        if reason is not None:
            _log(f"deferred drafter extend: not used, the drafter's extend runs at every off step ({reason})")
            state = reason
        else:
            from sglang.srt.speculative.eagle_utils import get_draft_recurrent_hidden_state_spec

            slots = drafter.req_to_token_pool.req_to_token.shape[0]
            state = PendingBuffers(slots, most_pending, rows, Audit(slots) if audit else None,
                                   get_draft_recurrent_hidden_state_spec(drafter.draft_runner))
        setattr(drafter, _STATE, state)
    return state if isinstance(state, PendingBuffers) else None


def pending(request) -> int:
    """The request's tokens not yet extended, kept in its pool row; 0 where it has since moved to another row (a
    decode server resuming a retracted request gives it a new one without a prefill: those tokens are dropped,
    which leaves holes in its drafter KV, lossless)."""
    count, row = getattr(request, _COUNT, (0, None))
    return count if row == request.kv.req_pool_idx else 0


def set_pending(request, count: int) -> None:
    setattr(request, _COUNT, (count, request.kv.req_pool_idx))


def _deferring(original, most_pending: int, audit: bool):
    @functools.wraps(original)
    def _draft_extend_for_decode(self, batch, batch_result, *args, **kwargs):
        if self.speculative_num_draft_tokens != 1 or batch.forward_mode.is_idle():
            return original(self, batch, batch_result, *args, **kwargs)
        width = batch_result.speculative_num_draft_tokens or 1  # tokens a request: 1, or an off step's several
        rows = batch_result.logits_output.hidden_states
        if rows is None or getattr(batch, "hisparse_coordinator", None) is not None:
            for request in batch.reqs:  # extended at this position by stock: pending tokens would be misplaced
                set_pending(request, 0)
            return _stock_extend(original, self, batch, batch_result, width, *args, **kwargs)
        buffers = _buffers(self, most_pending, rows, audit)
        if buffers is None:  # this engine keeps stock's extend at every step: nothing is ever pending
            return _stock_extend(original, self, batch, batch_result, width, *args, **kwargs)
        counts = [pending(request) for request in batch.reqs]
        if max(counts) + width > most_pending:  # a wider step than the last left room for (after width-1 steps)
            behind = [i for i, count in enumerate(counts) if count]
            catch_up(self, batch, buffers, rows=behind, where=f"at {most_pending} tokens")
            counts = [0] * len(counts)
        buffers.append(batch, batch_result.next_token_ids, rows, counts, width)  # first: graph-pool rows, copied
        if buffers.audit is not None:  # stock's extend as well: its KV writes and next-draft state, the reference
            original(self, batch, batch_result, *args, **kwargs)
            buffers.audit.keep(batch, batch_result.next_draft_input)
        host_lengths = None if batch.seq_lens_cpu is None or min(counts) else batch.seq_lens_cpu.tolist()
        for i, request in enumerate(batch.reqs):
            if counts[i] == 0:
                setattr(request, _HOST_START, None if host_lengths is None else host_lengths[i])
            set_pending(request, counts[i] + width)
        state = batch_result.next_draft_input
        if max(counts) + 2 * width > most_pending:  # the next step's tokens would not fit: catch up now
            state.topk_p, state.topk_index, state.hidden_states = catch_up(self, batch, buffers, rows=None,
                                                                           where=f"at {most_pending} tokens")
        else:
            state.topk_p, state.topk_index, state.hidden_states = _stub(self, buffers, len(counts))
    return _draft_extend_for_decode


def _stock_extend(original, drafter, batch, batch_result, width: int, *args, **kwargs):
    """Stock's per-step extend, which takes one token a request: an off step of several reaching it is this
    package's fault (``plain_off.step_tokens`` makes one where the drafter does not defer), stopped here rather
    than fed to a width-1 extend."""
    if width != 1:
        raise RuntimeError(f"sglang-eagle-ext: an off step of {width} tokens a request reached SGLang's width-1 "
                           "draft extend (this package's fault: report it; unset SGLANG_EAGLE_EXT_ADAPTIVE_OFF_TOKENS "
                           "to serve on)")
    return original(drafter, batch, batch_result, *args, **kwargs)


def _stub(drafter, buffers: PendingBuffers, requests: int):
    """Stock's zero draft state of a skipped extend (``EAGLEWorkerV2._stub_skipped_draft_extend``'s shapes)."""
    import torch

    width, dtype = buffers.stub_spec
    return (torch.zeros((requests, drafter.topk), dtype=torch.float32, device=drafter.device),
            torch.zeros((requests, drafter.topk), dtype=torch.int64, device=drafter.device),
            torch.zeros((requests, width), dtype=dtype, device=drafter.device))


def _catching_up_before_drafting(original):
    @functools.wraps(original)
    def draft(self, batch, *args, **kwargs):
        behind = [i for i, request in enumerate(batch.reqs) if pending(request)]
        buffers = getattr(self, _STATE, None)
        if behind and isinstance(buffers, PendingBuffers):
            state = batch.spec_info
            topk_p, topk_index, hidden = catch_up(self, batch, buffers, rows=behind, where="before drafting")
            where = _to_device(behind, batch.req_pool_indices.device)
            # out of place: the relayed tensors may be shared stubs or another batch's views
            state.topk_p = state.topk_p.index_copy(0, where, topk_p.to(state.topk_p.dtype))
            state.topk_index = state.topk_index.index_copy(0, where, topk_index.to(state.topk_index.dtype))
            state.hidden_states = state.hidden_states.index_copy(0, where, hidden.to(state.hidden_states.dtype))
        return original(self, batch, *args, **kwargs)
    return draft


def _resetting_at_prefill(original):
    @functools.wraps(original)
    def _draft_extend_for_prefill(self, batch, *args, **kwargs):
        for request in batch.reqs:  # a prefill extends the drafter over every token its requests have
            set_pending(request, 0)
        return original(self, batch, *args, **kwargs)
    return _draft_extend_for_prefill


def _to_device(values, device):
    """A small host list (or int64 tensor) as an int64 tensor on ``device``, through pinned memory where that is a
    GPU (a pageable copy would make the host wait for the stream)."""
    import torch

    host = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=torch.int64)
    return host.pin_memory().to(device, non_blocking=True) if device.type != "cpu" else host


def extend_layout(counts: list[int]):
    """For requests with ``counts`` pending tokens (each at least 1), host tensors (int64): each token's request
    ``[N]`` and column ``[N]`` (tokens request by request, in order), each request's first token ``[R]`` and its
    last ``[R]``."""
    import torch

    widths = torch.tensor(counts, dtype=torch.int64)
    if widths.numel() == 0 or int(widths.min()) < 1:
        raise ValueError(f"every request caught up needs a pending token: {counts}")
    ends = torch.cumsum(widths, 0)
    first = ends - widths
    request = torch.repeat_interleave(torch.arange(len(counts)), widths)
    column = torch.arange(int(ends[-1])) - first[request]
    return request, column, first, ends - 1


# the ScheduleBatch fields the catch-up's forward batch is built from, put back after it
_RESTORED = ("forward_mode", "input_ids", "out_cache_loc", "spec_info", "prefix_lens", "extend_lens",
             "extend_num_tokens", "extend_logprob_start_lens", "return_logprob", "top_logprobs_nums",
             "token_ids_logprobs", "reqs", "req_pool_indices", "seq_lens", "seq_lens_cpu", "seq_lens_sum",
             "multimodal_inputs", "orig_seq_lens")


def catch_up(drafter, batch, buffers: PendingBuffers, rows: list[int] | None, where: str):
    """One eager ``DRAFT_EXTEND_V2`` forward of the pending tokens of the batch's requests ``rows`` (all: ``None``),
    each at its own width; their counts go to 0. Returns their next-draft state: top-k probabilities and ids
    ``[R, topk]`` and the drafter's hidden rows ``[R, width]``, as the last per-step extend would have.
    ``where``: the catch-up's occasion, for the counts the log shows."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
    from sglang.srt.speculative.spec_utils import renorm_draft_probs
    from sglang.srt.utils.common import fast_topk

    requests = batch.reqs if rows is None else [batch.reqs[i] for i in rows]
    counts = [pending(request) for request in requests]
    host_starts = [getattr(request, _HOST_START, None) for request in requests]
    device = batch.req_pool_indices.device
    request, column, first, last = extend_layout(counts)
    tokens, width = len(column), len(counts)
    packed = torch.cat((request, column, first, last, torch.tensor(counts, dtype=torch.int64)))
    request, column, first, last, widths = torch.split(_to_device(packed, device),  # one copy
                                                       [tokens, tokens, width, width, width])
    chosen = None if rows is None else _to_device(rows, device)
    pool = batch.req_pool_indices if chosen is None else batch.req_pool_indices[chosen]
    start = buffers.start[pool]
    owner = pool[request]
    positions = start[request] + column
    on_host = batch.seq_lens_cpu is not None and None not in host_starts
    saved = {name: getattr(batch, name) for name in _RESTORED}
    try:
        batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        batch.input_ids = buffers.tokens[owner, column]
        batch.out_cache_loc = drafter.req_to_token_pool.req_to_token[owner, positions].to(torch.int64)
        # select_index: the output head and the hidden rows of each request's last token only
        batch.spec_info = EagleDraftExtendInput(hidden_states=buffers.rows[owner, column], positions=positions,
                                                select_index=last, num_tokens_per_req=-1,
                                                num_tokens_for_logprob_per_req=1)
        batch.extend_num_tokens = tokens
        batch.extend_logprob_start_lens = None
        batch.return_logprob, batch.top_logprobs_nums, batch.token_ids_logprobs = False, None, None
        batch.reqs = requests
        batch.req_pool_indices = pool
        batch.seq_lens = start + widths  # the lengths after the writes, as the forward sees them
        batch.multimodal_inputs = [None] * len(requests)
        if chosen is not None and saved["orig_seq_lens"] is not None:
            batch.orig_seq_lens = saved["orig_seq_lens"][chosen]
        if on_host:
            ends = [begin + count for begin, count in zip(host_starts, counts)]
            batch.prefix_lens, batch.extend_lens = list(host_starts), list(counts)
            batch.seq_lens_cpu = torch.tensor(ends, dtype=torch.int64)
            batch.seq_lens_sum = sum(ends)
        else:
            batch.prefix_lens, batch.extend_lens = start.to(torch.int32), widths.to(torch.int32)
            batch.seq_lens_cpu = None
            # seq_lens_sum stays the batch's before the step: stock's own extend passes it so on this path, and
            # neither FA3 nor Triton reads it in this mode
        forward_batch = ForwardBatch.init_new(batch, drafter.draft_runner, capture_hidden_mode=CaptureHiddenMode.LAST,
                                              return_hidden_states_before_norm=False,
                                              extend_position_info=(positions, first.to(torch.int32), None))
    finally:
        for name, value in saved.items():
            setattr(batch, name, value)
    forward_batch.extend_seq_lens_cpu = list(counts)  # the backends' host widths (max query length)
    if on_host:
        forward_batch.extend_prefix_lens_cpu = list(host_starts)
    drafter.draft_runner.attn_backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready()
    slots = forward_batch.out_cache_loc
    written = None if buffers.audit is None else buffers.audit.written_then_poisoned(drafter, slots)
    output = drafter.draft_runner.forward(forward_batch).logits_output
    # this forward read req_to_token after any read-done event a graph of this step recorded on the drafter's
    # runner (the audit's stock extend): without one the scheduler's WAR barrier waits for the whole forward
    # before it rewrites a freed request's row (scheduler._apply_war_barrier)
    drafter.draft_runner.shared_read_done_event = None
    for request in requests:
        set_pending(request, 0)
    logits = output.next_token_logits
    if drafter.topk == 1:  # the drafter's argmax, probability 1: the worker's own choice at top-k 1
        topk_index = torch.argmax(logits, dim=-1, keepdim=True)
        topk_p = torch.ones_like(topk_index, dtype=torch.float32)
    else:
        topk_p, topk_index = fast_topk(renorm_draft_probs(logits, batch.sampling_info, False), drafter.topk, dim=-1)
    hidden = output.hidden_states
    buffers.counts.add(where, len(requests), tokens)
    if buffers.audit is not None:
        buffers.audit.compare(drafter, slots, written, pool, topk_index, hidden)
    return topk_p, topk_index, hidden


class Counts:
    """Catch-ups by occasion, with the requests and tokens they extended; logged when a count reaches a power of
    two (a handful of lines a run)."""

    def __init__(self):
        self.by_occasion: dict[str, list[int]] = {}

    def add(self, where: str, requests: int, tokens: int) -> None:
        counts = self.by_occasion.setdefault(where, [0, 0, 0])
        counts[0] += 1
        counts[1] += requests
        counts[2] += tokens
        if plain_off.at_power_of_two(counts[0]):
            _log(f"deferred drafter extend: {counts[0]} catch-up{'s' if counts[0] > 1 else ''} {where} "
                 f"({counts[1]} requests, {counts[2]} tokens)")


POISON = 300.0  # what the audit writes into the drafter's KV at the slots a catch-up must rewrite (an fp8 e4m3 value)


class Audit:
    """Each catch-up against stock's per-step extends, which ran too (:data:`AUDIT_SWITCH`): the drafter's KV at
    the slots it rewrites (as stock's extends wrote them), and its next-draft state (stock's last one per
    request, kept by ``req_pool_idx``): the largest absolute differences and the rows whose top-k ids differ,
    logged with the counts when the catch-ups reach a power of two."""

    def __init__(self, slots: int):
        self.slots = slots
        self.reference = None  # (topk ids [slots, k], hidden rows [slots, width]) once the first extend ran
        self.catch_ups = 0
        self.kv_seen = self.hidden_seen = (0.0, 0.0)  # the largest |difference| and the largest |value| seen
        self.rows = self.rows_differing = 0

    def keep(self, batch, state) -> None:
        import torch

        if self.reference is None:
            self.reference = (torch.zeros((self.slots, state.topk_index.shape[1]), dtype=state.topk_index.dtype,
                                          device=state.topk_index.device),
                              torch.zeros((self.slots, state.hidden_states.shape[1]),
                                          dtype=state.hidden_states.dtype, device=state.hidden_states.device))
        self.reference[0][batch.req_pool_indices] = state.topk_index
        self.reference[1][batch.req_pool_indices] = state.hidden_states

    @staticmethod
    def kv(drafter, slots) -> list:
        """The drafter's keys and values at ``slots``, every layer's."""
        pool = drafter.draft_runner.token_to_kv_pool
        return [buffer[slots].clone() for buffer in (*pool.k_buffer, *pool.v_buffer)]

    def written_then_poisoned(self, drafter, slots) -> list:
        """:meth:`kv`, then those slots overwritten with a value no forward writes, so that a catch-up that misses
        one shows in the comparison, and so does its attending over one."""
        written = self.kv(drafter, slots)
        pool = drafter.draft_runner.token_to_kv_pool
        for buffer in (*pool.k_buffer, *pool.v_buffer):
            buffer[slots] = POISON
        return written

    def compare(self, drafter, slots, written, pool, topk_index, hidden) -> None:
        rewritten = self.kv(drafter, slots)
        for a, b in zip(written, rewritten):
            self.kv_seen = _larger(self.kv_seen, a, b)
        ids, rows = self.reference[0][pool], self.reference[1][pool]
        self.hidden_seen = _larger(self.hidden_seen, rows, hidden)
        width = topk_index.shape[1]  # a chain's catch-up before drafting: the first of the tree's sorted columns
        self.rows_differing += int((ids[:, :width] != topk_index).any(dim=1).sum())
        self.rows += len(pool)
        self.catch_ups += 1
        if plain_off.at_power_of_two(self.catch_ups):
            _log(f"deferred drafter extend audit: {self.catch_ups} catch-ups over {self.rows} requests: drafter KV "
                 f"max |difference| {self.kv_seen[0]:.3g} (values up to {self.kv_seen[1]:.3g}), next hidden row "
                 f"{self.hidden_seen[0]:.3g} (values up to {self.hidden_seen[1]:.3g}), top-k ids differing in "
                 f"{self.rows_differing} requests")


def _larger(so_far: tuple[float, float], reference, value) -> tuple[float, float]:
    """The largest absolute difference and the largest absolute reference value, over ``so_far`` and these."""
    return (max(so_far[0], float((value.float() - reference.float()).abs().max())),
            max(so_far[1], float(reference.float().abs().max())))


