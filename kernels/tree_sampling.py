"""Target-only tree speculative sampling: accept draft children by the target distribution, then
draw the bonus token from what is left.

Two entry points:

* :func:`tree_speculative_sampling_target_only`: drop-in for SGLang's op of that name, which
  takes ready-made ``target_probs`` and a zeroed ``draft_probs`` scratch. One program per
  request walks the tree; the residual draw is vectorised over the vocabulary.
* :func:`tree_sampling_from_logits`: temperature, top-k, top-p, the accept/reject walk and the
  residual draw straight from the logits, with no probability tensor and no ``[bs, n, V]``
  scratch (rejected children are the tried children of the last node). Three launches: a
  row-parallel pass reads every logits element once, each row split over several programs
  (chunks), and leaves per-chunk statistics and shortlists of each chunk's best tokens; one
  program per row merges its shortlists and decides top-k / top-p there in registers; one
  program per request walks its tree with those filters and draws the bonus token from the
  shortlists (it loads single logits only: those of the draft tokens it tries). Rows the
  shortlists cannot decide take exact passes over the row in the walk program (slow: one
  program per row).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from sglang_eagle_ext.kernels.launch import Launcher, Specialised
from sglang_eagle_ext.kernels.tree_walk import block_n, pick, tree_entry, write_accept_slot

SELECT_MAX = 64  # top-k up to this, and top-p alone within this many best tokens, decided from the shortlists
SHORTLIST_SLOTS = 128  # (key, index) slots per chunk shortlist: the best SELECT_MAX tokens plus ties and slack
# Row pass: logits per program, per loop step, warps per program. H100 probes (V = 128256, top-k
# 50 + top-p 0.9, chunk pass alone): 65536-logit chunks take 7 % less time than 32768 at 4096 rows
# (fewer programs pay the floor and the gather, and each row filter merges fewer shortlists);
# 2048-logit steps 11-17 % less than 1024; 4 warps 23-24 % less than 8 (the tail of a program
# needs ~110 registers: 4 such programs per SM stream while one runs its tail), 20-24 % less than 2.
CHUNK = 65536
TILE = 2048
CHUNK_PASS_WARPS = 4
WALK_TILE = 16384  # logits per loop step of the walk's passes over a whole row
ROW_FILTER_WARPS = 4  # per program of launch 2 (a row's shortlists: a few hundred entries)
SEGMENT = 32  # neighbouring tokens whose max the row pass keeps: a 128-byte line of float32 logits
GROUPS = 256  # a chunk's segments fall into this many groups (>= SELECT_MAX); their maxima bound its ranks
HOT_SEGMENTS = 128  # segments the shortlist gather reads (about SELECT_MAX hold the best; ties); beyond: a sweep
GATHER_SEGMENTS = 32  # segments it reads per step


@triton.jit
def _accept(coin, prob_acc, q, threshold_single, threshold_acc):
    return (coin <= prob_acc / threshold_acc) | (q >= threshold_single)


@triton.jit
def _take_child(coins_ptr, predicts_ptr, accept_index_ptr, retrive_index_ptr, b, n, max_accepts, accepted,
                last_row, child, token):
    """Accept ``child`` (``token``) of the node whose verify row is ``last_row``: the row predicts
    the token, the child's row becomes the last accepted one and its coin the next coin.
    Returns ``(coin, accepted, last_row)``."""
    tl.store(predicts_ptr + last_row, token.to(tl.int32))
    accepted += 1
    last_row = tree_entry(retrive_index_ptr, b, n, child)
    write_accept_slot(accept_index_ptr, b, max_accepts, accepted, last_row)
    return tl.load(coins_ptr + b.to(tl.int64) * n + child), accepted, last_row


@triton.jit
def _draw_tile(w, index, threshold, running, sampled, last_positive, vocab):
    """One tile of an inverse-CDF draw in vocabulary order: the sample is the first index whose
    running sum exceeds ``threshold``; ``last_positive`` is the fallback when rounding leaves none."""
    cumulative = running + tl.cumsum(w, axis=0)
    hit = tl.min(tl.where(cumulative > threshold, index, vocab), axis=0)
    sampled = tl.where((sampled < 0) & (hit < vocab), hit, sampled)
    last_positive = tl.maximum(last_positive, tl.max(tl.where(w > 0, index, -1), axis=0))
    return running + tl.sum(w, axis=0), sampled, last_positive


@triton.jit
def _drawn_token(sampled, last_positive, vocab):
    return tl.where(sampled >= 0, sampled, tl.where(last_positive >= 0, last_positive, vocab - 1))


@triton.jit
def _draw_over_row(weights, weight_args, coin, vocab, BLOCK_V: tl.constexpr):
    """Inverse-CDF draw over a whole row, two passes of BLOCK_V tiles: the total of
    ``weights(offset, index, mask, weight_args)`` (a JIT function and a tuple; ``index`` is
    ``offset + arange(BLOCK_V)``), then the first index whose running sum exceeds
    ``coin * total``, stopping there."""
    lanes = tl.arange(0, BLOCK_V)
    lane_total = tl.zeros((BLOCK_V,), dtype=tl.float32)  # one reduction at the end, not per tile
    for offset in range(0, vocab, BLOCK_V):
        index = offset + lanes
        lane_total += weights(offset, index, index < vocab, weight_args)
    threshold = coin * tl.sum(lane_total, axis=0)
    running = tl.zeros((), dtype=tl.float32)
    sampled = tl.full((), -1, tl.int64)
    last_positive = tl.full((), -1, tl.int64)
    offset = tl.zeros((), dtype=tl.int64)
    while (offset < vocab) & (sampled < 0):
        index = offset + lanes
        w = weights(offset, index, index < vocab, weight_args)
        running, sampled, last_positive = _draw_tile(w, index, threshold, running, sampled, last_positive, vocab)
        offset += BLOCK_V
    return _drawn_token(sampled, last_positive, vocab)


# ----------------------------------------------------------------------------- drop-in op


@triton.jit
def _residual(offset, index, mask, rows):
    """``relu(target - draft)`` over a tile; ``rows``: (target row, draft row, the tokens the walk
    rejected there, which of those slots hold one). The draft row is zero on input and the walk
    wrote only at rejected tokens, so it is read only in tiles holding one: one row read, not two."""
    target_row_ptr, draft_row_ptr, rejected, is_rejected = rows
    in_tile = is_rejected & (rejected >= offset) & (rejected < offset + index.shape[0])
    draft_written = tl.max(in_tile.to(tl.int32), axis=0) > 0
    target = tl.load(target_row_ptr + index, mask=mask, other=0.0)
    draft = tl.load(draft_row_ptr + index, mask=tl.where(draft_written, mask, False), other=0.0)
    return tl.maximum(target - draft, 0.0)


@triton.jit
def _sampling_target_only_kernel(predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr,
                                 retrive_index_ptr, next_token_ptr, next_sibling_ptr, coins_ptr,
                                 final_coins_ptr, target_ptr, draft_ptr, threshold_single, threshold_acc,
                                 vocab, N: tl.constexpr, MAX_ACCEPTS: tl.constexpr, BLOCK_V: tl.constexpr,
                                 BLOCK_N: tl.constexpr):
    b = tl.program_id(0)
    last_row = tree_entry(retrive_index_ptr, b, N, 0)
    write_accept_slot(accept_index_ptr, b, MAX_ACCEPTS, 0, last_row)
    coin = tl.load(coins_ptr + b.to(tl.int64) * N)
    prob_acc = tl.zeros((), dtype=tl.float32)
    accepted = tl.zeros((), dtype=tl.int32)
    cur = tree_entry(next_token_ptr, b, N, 0)
    steps = tl.zeros((), dtype=tl.int32)
    slots = tl.arange(0, BLOCK_N)
    rejected = tl.full((BLOCK_N,), -1, tl.int64)  # tokens rejected at the current row, in order
    rejected_count = tl.zeros((), dtype=tl.int32)
    while (cur != -1) & (accepted < MAX_ACCEPTS) & (steps < N):
        token = tree_entry(cand_ptr, b, N, cur)
        q = tl.load(target_ptr + last_row * vocab + token)
        prob_acc += q
        if _accept(coin, prob_acc, q, threshold_single, threshold_acc):
            prob_acc = 0.0
            coin, accepted, last_row = _take_child(coins_ptr, predicts_ptr, accept_index_ptr, retrive_index_ptr, b, N,
                                                   MAX_ACCEPTS, accepted, last_row, cur, token)
            rejected_count = 0
            cur = tree_entry(next_token_ptr, b, N, cur)
        else:
            tl.store(draft_ptr + last_row * vocab + token, q)
            rejected = tl.where(slots == rejected_count, token.to(tl.int64), rejected)
            rejected_count += 1
            cur = tree_entry(next_sibling_ptr, b, N, cur)
        steps += 1
    tl.store(accept_num_ptr + b, accepted)

    # The bonus token: relu(target - draft) at the last accepted row (where the draft row holds
    # the rejected children's probabilities; none after a full-depth accept).
    tl.debug_barrier()  # the rejected-sibling stores above must be visible to every lane
    rows = (target_ptr + last_row * vocab, draft_ptr + last_row * vocab, rejected, slots < rejected_count)
    token = _draw_over_row(_residual, rows, tl.load(final_coins_ptr + b), vocab, BLOCK_V)
    tl.store(predicts_ptr + last_row, token.to(tl.int32))


_launch_sampling_target_only = Launcher(_sampling_target_only_kernel)


def tree_speculative_sampling_target_only(predicts: torch.Tensor, accept_index: torch.Tensor,
                                          accept_token_num: torch.Tensor, candidates: torch.Tensor,
                                          retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
                                          retrive_next_sibling: torch.Tensor, uniform_samples: torch.Tensor,
                                          uniform_samples_for_final_sampling: torch.Tensor,
                                          target_probs: torch.Tensor, draft_probs: torch.Tensor,
                                          threshold_single: float = 1.0, threshold_acc: float = 1.0,
                                          deterministic: bool = True, *, block_v: int = 8192) -> None:
    """Drop-in for ``sgl_kernel.tree_speculative_sampling_target_only``, in place.

    Shapes (``bs`` requests, ``n`` verify rows each, ``S+1 = accept_index.shape[1]``, vocab V):
    ``predicts`` ``[bs*n]`` int32, ``accept_index`` ``[bs, S+1]`` int32 (pre-filled -1),
    ``accept_token_num`` ``[bs]`` int32 (outputs, as in
    :func:`~sglang_eagle_ext.kernels.verify_greedy.verify_tree_greedy`); ``candidates`` and the
    ``retrive_*`` links ``[bs, n]`` int64 (``retrive_index[b, t] == b*n + t``);
    ``uniform_samples`` ``[bs, n]`` float32 (the coin of node t), ``uniform_samples_for_final_sampling``
    ``[bs]`` float32; ``target_probs`` ``[bs, n, V]`` float32; ``draft_probs`` ``[bs, n, V]``
    float32, zeros on input, used as scratch: the target probability of each rejected child is
    written at its parent's row (and only what the op wrote is read back: the bonus draw reads the
    draft row just in the tiles that hold a rejected child of the last accepted node).

    Semantics (SGLang's): walking from the root, child c of the current node (tried in sibling
    order) with target probability ``q`` adds ``q`` to a running sum ``acc``; it is accepted when
    ``coin <= acc / max(threshold_acc, 1e-9)`` or ``q >= threshold_single``, where ``coin`` is the
    coin of the current node; acceptance moves to c and resets ``acc``. With both thresholds 1 this
    samples exactly from the target. The bonus token is drawn from ``relu(target - draft)`` at the
    last accepted row (``draft`` not subtracted after S accepts) by
    inverse CDF in vocabulary order (first index whose running sum exceeds
    ``final_coin * sum``). ``deterministic`` is accepted for compatibility: this kernel always is.
    ``block_v`` is the vocabulary tile of the residual passes.
    """
    del deterministic
    bs, n = candidates.shape
    _sampling_target_only_specialised(block_v, n, accept_index.shape[1] - 1).launch(
        (bs,), predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
        draft_probs, float(threshold_single), max(float(threshold_acc), 1e-9), target_probs.shape[-1])


@functools.lru_cache(maxsize=None)
def _sampling_target_only_specialised(block_v: int, n: int, max_accepts: int):
    """The tree's sizes are compile-time constants: fixed for a server's run, and each runtime
    argument costs host time at every launch."""
    return _launch_sampling_target_only.specialise(N=n, MAX_ACCEPTS=max_accepts, BLOCK_V=block_v,
                                                   BLOCK_N=block_n(n), num_warps=16)


# ----------------------------------------------------------------------------- from logits


@triton.jit
def _order_key32(x):
    """int32 key of float32 ``x`` ordered like the floats (NaN aside): larger float, larger key."""
    bits = x.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _order_key(x):
    """The same order as unsigned 32-bit keys, held in int64 (radix digits are unsigned)."""
    return _order_key32(x).to(tl.int64) + 0x80000000


@triton.jit
def _key_value32(key):
    """The float32 whose int32 order key is ``key`` (the inverse of :func:`_order_key32`)."""
    return tl.where(key >= 0, key, key ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)


@triton.jit
def _key_value(key):
    """The same from the unsigned order held in int64 (the inverse of :func:`_order_key`)."""
    return _key_value32((key - 0x80000000).to(tl.int32))


@triton.jit
def _logits(row_ptr, index, mask):
    return tl.load(row_ptr + index, mask=mask, other=float("-inf")).to(tl.float32)


@triton.jit
def _request_filters(temperatures_ptr, top_ks_ptr, top_ps_ptr, b, vocab):
    """``(scale, top_k, top_p, top_k_active, top_p_active)`` of request ``b``; ``scale`` is
    log2(e) / T, so that ``exp((z - max) / T) == exp2((z - max) * scale)``."""
    scale = 1.4426950408889634 / tl.load(temperatures_ptr + b).to(tl.float32)
    top_k = tl.load(top_ks_ptr + b).to(tl.int32)
    top_p = tl.load(top_ps_ptr + b).to(tl.float32)
    return scale, top_k, top_p, (top_k > 0) & (top_k < vocab), top_p < 1.0


# --- pass 1: one program per (row, chunk)


@triton.jit
def _append_at_or_above(z, index, valid, floor, base, shortlist_row_ptr, SLOTS: tl.constexpr):
    """Store every valid token of ``z`` (1-D) whose key is >= ``floor`` in a shortlist, in the
    order of ``index``, from slot ``base`` on; returns ``base`` plus how many there were."""
    key = _order_key32(z)
    collect = (valid & (key >= floor)).to(tl.int32)
    slot = base + tl.cumsum(collect, axis=0) - 1
    tl.store(shortlist_row_ptr + slot, (key.to(tl.int64) << 32) | index.to(tl.int64),
             mask=(collect > 0) & (slot < SLOTS))
    return base + tl.sum(collect, axis=0)


@triton.jit
def _sweep(row_ptr, first, vocab, scale, segment_max_ptr, keep_segments, CHUNK: tl.constexpr, TILE: tl.constexpr,
           SEGMENT: tl.constexpr):
    """One streaming read of a chunk: ``(chunk max, sum exp2((z - chunk max) * scale))``; where
    ``keep_segments`` (filtered rows), the int32 key of each segment's max is stored at
    ``segment_max_ptr``. (The maxima cost no time where not stored: a second copy of the loop
    for unfiltered rows measured the same.)"""
    tile_segments = tl.arange(0, TILE // SEGMENT)
    store_segments = tl.where(keep_segments, tile_segments >= 0, False)
    # A tile as [segments, SEGMENT]: each segment's max is a reduction along its row, in registers.
    lanes = tile_segments[:, None] * SEGMENT + tl.arange(0, SEGMENT)[None, :]
    # Per lane, a running max and the mass against it, rescaled when the max grows: one exp2
    # per token (of the smaller of token and max, against the larger).
    lane_max = tl.full((TILE // SEGMENT, SEGMENT), float("-inf"), tl.float32)
    lane_mass = tl.zeros((TILE // SEGMENT, SEGMENT), dtype=tl.float32)
    for start in range(0, CHUNK, TILE):
        index = first + start + lanes
        z = _logits(row_ptr, index, index < vocab)
        tl.store(segment_max_ptr + start // SEGMENT + tile_segments, _order_key32(tl.max(z, axis=1)),
                 mask=store_segments)
        grows = z > lane_max
        new_max = tl.maximum(lane_max, z)
        # Against 0 while the lane holds only -inf: exp2(-inf) = 0, no mass. A NaN logit: NaN mass.
        ratio = tl.exp2((tl.where(grows, lane_max, z) - tl.where(new_max > float("-inf"), new_max, 0.0)) * scale)
        lane_mass = tl.where(grows, lane_mass * ratio + 1.0, lane_mass + ratio)
        lane_max = new_max
    chunk_max = tl.max(tl.max(lane_max, axis=1), axis=0)
    mass = tl.sum(tl.sum(lane_mass * tl.exp2((lane_max - chunk_max) * scale), axis=1), axis=0)
    return chunk_max, tl.where(chunk_max > float("-inf"), mass, 0.0)  # an all -inf chunk holds no mass


@triton.jit
def _floor_of_rank(keys, rank, ROUNDS: tl.constexpr = 3, FANOUT: tl.constexpr = 16):
    """An int32 key ``t`` with at least ``rank`` (>= 1) of ``keys`` >= ``t``, just below the
    rank-th largest: each round counts the keys at or above FANOUT evenly spaced values at once
    and keeps the interval where the count falls below ``rank`` (a few reductions, where a sort
    takes dozens of exchange steps). The search runs over the float values between the smallest
    finite and the largest key (order keys are far from even in value, and -inf would widen
    the range), so it ends within ``(max - min) / FANOUT**ROUNDS`` of the rank-th largest."""
    values = _key_value32(keys)
    finite = values > float("-inf")
    low = tl.min(tl.where(finite, values, float("inf")), axis=0)  # count at or above: >= rank (checked below)
    high = tl.max(values, axis=0)
    steps = tl.arange(0, FANOUT)
    for _ in tl.static_range(ROUNDS):
        thresholds = low + (high - low) * (steps.to(tl.float32) / FANOUT)  # thresholds[0] == low
        counts = tl.sum((values[:, None] >= thresholds[None, :]).to(tl.int32), axis=0)
        step = tl.max(tl.where(counts >= rank, steps, 0), axis=0)  # counts fall as thresholds rise
        high = tl.where(step == FANOUT - 1, high, pick(thresholds, steps, step + 1))
        low = pick(thresholds, steps, step)
    # Fewer finite keys than rank: every key counts. A zero floor takes -0.0's key, the smaller.
    low = tl.where(tl.sum(finite.to(tl.int32), axis=0) >= rank, tl.where(low == 0.0, -0.0, low), float("-inf"))
    return _order_key32(low)


@triton.jit
def _chunk_pass_kernel(logits_ptr, stride_row, temperatures_ptr, top_ks_ptr, top_ps_ptr, scratch_ptr, n, vocab,
                       num_chunks, select_max,
                       CHUNK: tl.constexpr, TILE: tl.constexpr, SEGMENT: tl.constexpr, GROUPS: tl.constexpr,
                       HOT: tl.constexpr, GATHER: tl.constexpr, SLOTS: tl.constexpr):
    """Statistics and shortlist of one chunk of one row, reading its logits once from memory.

    Stats record (int32 x4): chunk max, ``sum exp2((z - chunk max) * scale)`` (both float bits),
    the shortlist floor (int32 key) and the number of tokens at or above it (may exceed SLOTS:
    the shortlist then overflowed). The shortlist holds every token of the chunk whose key is >=
    the floor, packed ``key << 32 | index``, in token order. The floor is at most the chunk's
    s-th largest key (s = top-k, or ``select_max`` for top-p alone): the chunk is cut into
    segments of SEGMENT neighbouring tokens (a cache line of float32 logits at 32), segments into
    GROUPS groups of neighbours, and the floor is a key with at least s group maxima at or above
    it (just below the s-th largest), so s distinct tokens are >= it.

    One streaming sweep of TILE tokens, with no exchange between lanes but the segment maxima:
    it keeps a running max per lane and the mass against it, and stores the maximum of each
    segment (filtered rows only). Only segments whose max is >= the floor (the "hot" ones, about
    s) hold a shortlisted token, so the shortlist comes from a gather of just those segments
    (whole cache lines, GATHER per step); when more than HOT segments are hot (ties), from a
    second sweep of the chunk.

    ``scratch_ptr``: the scratch sized by :class:`_Plan`; its int32 part holds the stats
    records, then ``CHUNK // SEGMENT`` segment maxima per record, then HOT hot segment ids per
    record.
    """
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    shortlist_ptr = scratch_ptr
    stats_ptr = _int32_scratch(scratch_ptr, tl.num_programs(0), num_chunks, SLOTS)
    scale, top_k, top_p, top_k_active, top_p_active = _request_filters(
        temperatures_ptr, top_ks_ptr, top_ps_ptr, row // n, vocab)
    # How many best tokens the shortlists must cover; 0: the row is unfiltered, or top-k is
    # beyond what shortlists decide, and nothing is collected.
    cover = tl.where(top_k_active, tl.where(top_k <= select_max, top_k, 0), tl.where(top_p_active, select_max, 0))

    SEGMENTS: tl.constexpr = CHUNK // SEGMENT
    record = row.to(tl.int64) * num_chunks + chunk
    records = tl.num_programs(0).to(tl.int64) * num_chunks
    segment_max_ptr = stats_ptr + 4 * records + record * SEGMENTS
    hot_list_ptr = stats_ptr + (4 + SEGMENTS) * records + record * HOT
    row_ptr = logits_ptr + row.to(tl.int64) * stride_row
    first = chunk * CHUNK
    chunk_max, mass = _sweep(row_ptr, first, vocab, scale, segment_max_ptr, cover > 0, CHUNK, TILE, SEGMENT)

    floor = tl.full((), 0x7FFFFFFF, tl.int32)
    count = tl.zeros((), dtype=tl.int32)
    if cover > 0:
        shortlist_row_ptr = shortlist_ptr + record * SLOTS
        tl.debug_barrier()  # the segment maxima stored by every thread are visible to every thread
        segment_keys = tl.load(segment_max_ptr + tl.arange(0, SEGMENTS))
        floor = _floor_of_rank(tl.max(tl.reshape(segment_keys, (GROUPS, SEGMENTS // GROUPS)), axis=1), cover)
        is_hot = (segment_keys >= floor).to(tl.int32)  # segments that hold a token at or above the floor
        hot = tl.sum(is_hot, axis=0)
        if hot <= HOT:
            # The hot segments' ids in order, compacted through a scratch row, then read at once.
            tl.store(hot_list_ptr + tl.cumsum(is_hot, axis=0) - 1, tl.arange(0, SEGMENTS), mask=is_hot > 0)
            tl.debug_barrier()
            # GATHER segments per step: a few steps, in few registers (the sweep's occupancy).
            for gathered in range(0, hot, GATHER):
                hot_slots = gathered + tl.arange(0, GATHER)
                live = hot_slots < hot
                hot_segment = tl.load(hot_list_ptr + hot_slots, mask=live, other=0)
                index = first + hot_segment[:, None] * SEGMENT + tl.arange(0, SEGMENT)[None, :]
                valid = live[:, None] & (index < vocab)
                z = _logits(row_ptr, index, valid)
                count = _append_at_or_above(tl.reshape(z, (GATHER * SEGMENT,)), tl.reshape(index, (GATHER * SEGMENT,)),
                                            tl.reshape(valid, (GATHER * SEGMENT,)), floor, count, shortlist_row_ptr,
                                            SLOTS)
        else:
            for start in range(0, CHUNK, TILE):
                index = first + start + tl.arange(0, TILE)
                valid = index < vocab
                count = _append_at_or_above(_logits(row_ptr, index, valid), index, valid, floor, count,
                                            shortlist_row_ptr, SLOTS)
    stats = stats_ptr + record * 4
    tl.store(stats, chunk_max.to(tl.int32, bitcast=True))
    tl.store(stats + 1, mass.to(tl.int32, bitcast=True))
    tl.store(stats + 2, floor)
    tl.store(stats + 3, count)


# --- pass 2: one program per row (its filter from the shortlists)


@triton.jit
def _row_stats(stats_ptr, first_record, num_chunks, scale, CHUNKS: tl.constexpr):
    """``(row_max, total mass, complete_key, counts)`` of a row from its chunk records. Every
    token whose key is >= ``complete_key`` (the highest chunk floor, unsigned domain) is in some
    shortlist, unless one overflowed (a count above SLOTS)."""
    chunks = tl.arange(0, CHUNKS)
    real = chunks < num_chunks
    stats = stats_ptr + (first_record + chunks) * 4
    chunk_max = tl.where(real, tl.load(stats, mask=real, other=0).to(tl.float32, bitcast=True), float("-inf"))
    chunk_mass = tl.load(stats + 1, mask=real, other=0).to(tl.float32, bitcast=True)
    floors = tl.load(stats + 2, mask=real, other=-0x7FFFFFFF - 1)
    counts = tl.load(stats + 3, mask=real, other=0)
    row_max = tl.max(chunk_max, axis=0)
    live = chunk_max > float("-inf")
    total = tl.sum(tl.where(live, chunk_mass * tl.exp2((tl.where(live, chunk_max, row_max) - row_max) * scale), 0.0),
                   axis=0)
    return row_max, total, tl.max(floors, axis=0).to(tl.int64) + 0x80000000, counts


@triton.jit
def _shortlist(shortlist_ptr, first_record, num_chunks, counts, CHUNKS: tl.constexpr, SLOTS: tl.constexpr):
    """A row's shortlists side by side, ``[CHUNKS * SLOTS]`` packed entries (present ones in token
    order, absent ones between the chunks'), and which slots hold one."""
    chunks = tl.arange(0, CHUNKS)
    slots = tl.arange(0, SLOTS)
    present = (chunks < num_chunks)[:, None] & (slots[None, :] < counts[:, None])
    packed = tl.load(shortlist_ptr + (first_record + chunks)[:, None] * SLOTS + slots[None, :], mask=present,
                     other=-0x7FFFFFFFFFFFFFFF - 1)
    return tl.reshape(packed, (CHUNKS * SLOTS,)), tl.reshape(present.to(tl.int32), (CHUNKS * SLOTS,)) > 0


@triton.jit
def _filter_from_shortlists(shortlist_ptr, first_record, num_chunks, counts, complete_key, row_max, total_mass,
                            scale, top_k, top_p, top_k_active, top_p_active,
                            CHUNKS: tl.constexpr, SLOTS: tl.constexpr):
    """Top-k / top-p from the shortlists: ``(decided, floor_key, total)``. A rank or a running
    sum is exact where the token reached is at or above ``complete_key`` (every better token is
    then in the shortlists); otherwise ``decided`` is False."""
    packed, present = _shortlist(shortlist_ptr, first_record, num_chunks, counts, CHUNKS, SLOTS)
    # Ranks and running sums need the keys alone: sort 32-bit keys, absent slots last (the smallest).
    ranked = tl.sort(tl.where(present, (packed >> 32).to(tl.int32), -0x7FFFFFFF - 1), descending=True)
    positions = tl.arange(0, CHUNKS * SLOTS)
    present = positions < tl.sum(present.to(tl.int32), axis=0)
    keys = ranked.to(tl.int64) + 0x80000000
    e = tl.where(present, tl.exp2((_key_value(keys) - row_max) * scale), 0.0)
    decided = tl.full((), 1, tl.int1)
    floor_key = tl.zeros((), dtype=tl.int64)
    kept_mass = total_mass
    if top_k_active:
        floor_key = pick(keys, positions, top_k - 1)
        decided = (top_k <= tl.sum(present.to(tl.int32), axis=0)) & (floor_key >= complete_key)
        kept_mass = tl.sum(tl.where(keys >= floor_key, e, 0.0), axis=0)
    total = kept_mass
    if top_p_active:
        reached = present & (keys >= floor_key) & (keys >= complete_key) & (tl.cumsum(e, axis=0) >= top_p * kept_mass)
        first = tl.min(tl.where(reached, positions, CHUNKS * SLOTS), axis=0)
        decided = decided & (first < CHUNKS * SLOTS)
        floor_key = pick(keys, positions, first)
        total = tl.sum(tl.where(keys >= floor_key, e, 0.0), axis=0)
    return decided, floor_key, total


@triton.jit
def _shortlist_filter(stats_ptr, shortlist_ptr, first_record, num_chunks, scale, top_k, top_p, top_k_active,
                      top_p_active, select_max, CHUNKS: tl.constexpr, SLOTS: tl.constexpr):
    """Filter of one row from its shortlists: ``(row_max, row_mass, floor_key, total, decided,
    in_shortlists)``; token i keeps ``exp2((z_i - row_max) * scale) / total`` when
    ``key(z_i) >= floor_key``, else 0. Unfiltered rows are decided (floor 0, the row's mass);
    ``in_shortlists``: filtered, and top-k / top-p were decided there, so every kept token is in
    them. Other filtered rows (top-k above ``select_max``, an overflowed shortlist, a top-p pivot
    below the covered tokens) are not decided: :func:`_exact_filter` takes them."""
    row_max, row_mass, complete_key, counts = _row_stats(stats_ptr, first_record, num_chunks, scale, CHUNKS)
    floor_key = tl.zeros((), dtype=tl.int64)
    total = row_mass
    filtered = top_k_active | top_p_active
    in_shortlists = filtered & (tl.max(counts, axis=0) <= SLOTS) & ~(top_k_active & (top_k > select_max))
    if in_shortlists:
        in_shortlists, floor_key, total = _filter_from_shortlists(
            shortlist_ptr, first_record, num_chunks, counts, complete_key, row_max, row_mass, scale, top_k, top_p,
            top_k_active, top_p_active, CHUNKS, SLOTS)
    return row_max, row_mass, floor_key, total, ~filtered | in_shortlists, in_shortlists


@triton.jit
def _exact_filter(row_ptr, vocab, scale, row_max, row_mass, top_k, top_p, top_k_active, top_p_active,
                  BLOCK_V: tl.constexpr):
    """``(floor_key, total)`` of a filtered row by passes over the whole row: radix select for
    top-k, bisection for top-p (nothing the shortlists left behind is used)."""
    floor_key = tl.zeros((), dtype=tl.int64)
    total = row_mass
    if top_k_active:
        floor_key = _kth_largest_key_in_row(row_ptr, vocab, top_k, BLOCK_V)
        total = _mass_at_or_above(row_ptr, vocab, scale, row_max, floor_key, BLOCK_V)
    if top_p_active:
        floor_key, total = _top_p_by_bisection(row_ptr, vocab, scale, row_max, floor_key, top_p * total, total,
                                               BLOCK_V)
    return floor_key, total


@triton.jit
def _filters_ptr(scratch_ptr, rows, num_chunks, SLOTS: tl.constexpr):
    """Start of the row filters in the scratch (int64): after the shortlists of every record,
    which start it."""
    return scratch_ptr + rows.to(tl.int64) * num_chunks * SLOTS


@triton.jit
def _int32_scratch(scratch_ptr, rows, num_chunks, SLOTS: tl.constexpr):
    """Start of the int32 part of the scratch (stats records first): after the row filters."""
    return (_filters_ptr(scratch_ptr, rows, num_chunks, SLOTS) + rows.to(tl.int64) * 5).to(tl.pointer_type(tl.int32))


@triton.jit
def _row_filter_kernel(scratch_ptr, temperatures_ptr, top_ks_ptr, top_ps_ptr, n, vocab,
                       num_chunks, select_max, CHUNKS: tl.constexpr, SLOTS: tl.constexpr):
    """Launch 2: the shortlist filter of every row at once (one program per row), so that the
    walk, which visits rows one after another, only reads it. Record (int64 x5): row max, row
    mass, total (float bits), floor key, flags (1: decided, 2: in the shortlists), in the int64
    scratch after the shortlists."""
    row = tl.program_id(0)
    shortlist_ptr = scratch_ptr
    stats_ptr = _int32_scratch(scratch_ptr, tl.num_programs(0), num_chunks, SLOTS)
    scale, top_k, top_p, top_k_active, top_p_active = _request_filters(
        temperatures_ptr, top_ks_ptr, top_ps_ptr, row // n, vocab)
    row_max, row_mass, floor_key, total, decided, in_shortlists = _shortlist_filter(
        stats_ptr, shortlist_ptr, row.to(tl.int64) * num_chunks, num_chunks, scale, top_k, top_p, top_k_active,
        top_p_active, select_max, CHUNKS, SLOTS)
    record = _filters_ptr(shortlist_ptr, tl.num_programs(0), num_chunks, SLOTS) + row.to(tl.int64) * 5
    tl.store(record, row_max.to(tl.int32, bitcast=True).to(tl.int64))
    tl.store(record + 1, row_mass.to(tl.int32, bitcast=True).to(tl.int64))
    tl.store(record + 2, total.to(tl.int32, bitcast=True).to(tl.int64))
    tl.store(record + 3, floor_key)
    tl.store(record + 4, decided.to(tl.int64) | (in_shortlists.to(tl.int64) << 1))


@triton.jit
def _row_filter(row_ptr, filters_ptr, row, vocab, scale, top_k, top_p, top_k_active, top_p_active,
                BLOCK_V: tl.constexpr):
    """``(row_max, floor_key, total, in_shortlists)`` of a row: its record from launch 2, or
    exact passes over the row where the shortlists did not decide it."""
    record = filters_ptr + row * 5
    row_max = tl.load(record).to(tl.int32).to(tl.float32, bitcast=True)
    total = tl.load(record + 2).to(tl.int32).to(tl.float32, bitcast=True)
    floor_key = tl.load(record + 3)
    flags = tl.load(record + 4)
    if (flags & 1) == 0:
        row_mass = tl.load(record + 1).to(tl.int32).to(tl.float32, bitcast=True)
        floor_key, total = _exact_filter(row_ptr, vocab, scale, row_max, row_mass, top_k, top_p, top_k_active,
                                         top_p_active, BLOCK_V)
    return row_max, floor_key, total, (flags & 2) != 0


@triton.jit
def _digit_counts(key, candidate, prefix, shift: tl.constexpr):
    """Histogram of the 8-bit digit at ``shift`` over the candidates whose higher digits equal
    ``prefix``'s (radix select, most significant digit first)."""
    if shift != 24:
        candidate = candidate & ((key >> (shift + 8)) == (prefix >> (shift + 8)))
    digit = tl.where(candidate, (key >> shift) & 255, 0).to(tl.int32)
    counts = tl.histogram(digit, 256)
    return tl.where(tl.arange(0, 256) == 0, counts - tl.sum((~candidate).to(tl.int32), axis=0), counts)


@triton.jit
def _choose_digit(counts, remaining, prefix, shift: tl.constexpr):
    """The digit holding the ``remaining``-th largest candidate; returns the new remaining rank
    among the candidates with that digit and the extended prefix."""
    bins = tl.arange(0, 256)
    at_or_above = tl.cumsum(counts, axis=0, reverse=True)
    chosen = tl.max(tl.where(at_or_above >= remaining, bins, 0), axis=0)
    remaining -= pick(at_or_above - counts, bins, chosen)
    return remaining, prefix | (chosen.to(tl.int64) << shift)


@triton.jit
def _kth_largest_key_in_row(row_ptr, vocab, k, BLOCK_V: tl.constexpr):
    """Key of the k-th largest ``z`` of a row (1 <= k <= vocab), four passes over the row."""
    lanes = tl.arange(0, BLOCK_V)
    prefix = tl.zeros((), dtype=tl.int64)
    remaining = k.to(tl.int32)
    for shift in tl.static_range(24, -1, -8):
        counts = tl.zeros((256,), dtype=tl.int32)
        for offset in range(0, vocab, BLOCK_V):
            index = offset + lanes
            valid = index < vocab
            counts += _digit_counts(_order_key(_logits(row_ptr, index, valid)), valid, prefix, shift)
        remaining, prefix = _choose_digit(counts, remaining, prefix, shift)
    return prefix


@triton.jit
def _mass_at_or_above(row_ptr, vocab, scale, row_max, floor_key, BLOCK_V: tl.constexpr):
    lanes = tl.arange(0, BLOCK_V)
    mass = tl.zeros((BLOCK_V,), dtype=tl.float32)
    for offset in range(0, vocab, BLOCK_V):
        index = offset + lanes
        z = _logits(row_ptr, index, index < vocab)
        mass += tl.where(_order_key(z) >= floor_key, tl.exp2((z - row_max) * scale), 0.0)
    return tl.sum(mass, axis=0)


@triton.jit
def _top_p_by_bisection(row_ptr, vocab, scale, row_max, low, target_mass, low_mass, BLOCK_V: tl.constexpr):
    """Largest key whose mass at or above reaches ``target_mass`` (keys >= ``low`` only), and
    that mass: the top-p pivot, found by bisection over the 32-bit key range."""
    high = tl.full((), 1 << 32, tl.int64)
    while high - low > 1:
        middle = (low + high) // 2
        mass = _mass_at_or_above(row_ptr, vocab, scale, row_max, middle, BLOCK_V)
        if mass >= target_mass:
            low = middle
            low_mass = mass
        else:
            high = middle
    return low, low_mass


# --- pass 3: one program per request (the walk)


@triton.jit
def _token_prob(row_ptr, token, scale, row_max, floor_key, total):
    z = tl.load(row_ptr + token).to(tl.float32)
    return tl.where(_order_key(z) >= floor_key, tl.exp2((z - row_max) * scale) / total, 0.0)


@triton.jit
def _without_tried_children(p, index, cand_ptr, next_token_ptr, next_sibling_ptr, b, n, parent, active):
    """``p`` over tokens ``index``, zero at the tokens of ``parent``'s children when ``active``:
    the residual of the last accepted row drops the children tried there (walked from memory,
    a few compares per child, instead of a tile-by-children broadcast)."""
    cur = tl.where(active, tree_entry(next_token_ptr, b, n, parent), -1)
    steps = tl.zeros((), dtype=tl.int32)
    while (cur != -1) & (steps < n):
        p = tl.where(index == tree_entry(cand_ptr, b, n, cur), 0.0, p)
        cur = tree_entry(next_sibling_ptr, b, n, cur)
        steps += 1
    return p


@triton.jit
def _filtered_residual(offset, index, mask, row_filter):
    """Filtered target probabilities of a tile, without the tried children (see above);
    ``row_filter``: the row and its filter, then the tree pointers and the children to drop."""
    (row_ptr, scale, row_max, floor_key, total, cand_ptr, next_token_ptr, next_sibling_ptr, b, n, parent,
     drop_children) = row_filter
    z = _logits(row_ptr, index, mask)
    p = tl.where(mask & (_order_key(z) >= floor_key), tl.exp2((z - row_max) * scale) / total, 0.0)
    return _without_tried_children(p, index, cand_ptr, next_token_ptr, next_sibling_ptr, b, n, parent, drop_children)


@triton.jit
def _draw_from_shortlists(shortlist_ptr, stats_ptr, first_record, num_chunks, row_max, scale, floor_key, total,
                          coin, vocab, cand_ptr, next_token_ptr, next_sibling_ptr, b, n, parent, drop_children,
                          CHUNKS: tl.constexpr, SLOTS: tl.constexpr):
    """The residual draw when every kept token is in the row's shortlists: the inverse CDF in
    registers. Each shortlist lists its chunk's tokens in token order and the chunks follow each
    other, so the present entries are in vocabulary order already (absent ones weigh nothing)."""
    counts = tl.load(stats_ptr + (first_record + tl.arange(0, CHUNKS)) * 4 + 3, mask=tl.arange(0, CHUNKS) < num_chunks,
                     other=0)
    packed, present = _shortlist(shortlist_ptr, first_record, num_chunks, counts, CHUNKS, SLOTS)
    keys = (packed >> 32).to(tl.int32).to(tl.int64) + 0x80000000
    index = tl.where(present, packed & 0xFFFFFFFF, vocab)
    w = tl.where(present & (keys >= floor_key), tl.exp2((_key_value(keys) - row_max) * scale) / total, 0.0)
    w = _without_tried_children(w, index, cand_ptr, next_token_ptr, next_sibling_ptr, b, n, parent, drop_children)
    running, sampled, last_positive = _draw_tile(w, index, coin * tl.sum(w, axis=0), tl.zeros((), tl.float32),
                                                 tl.full((), -1, tl.int64), tl.full((), -1, tl.int64), vocab)
    return _drawn_token(sampled, last_positive, vocab)


@triton.jit
def _walk_kernel(predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr, retrive_index_ptr, next_token_ptr,
                 next_sibling_ptr, coins_ptr, final_coins_ptr, logits_ptr, stride_row, temperatures_ptr, top_ks_ptr,
                 top_ps_ptr, scratch_ptr, threshold_single, threshold_acc, n, max_accepts, vocab,
                 num_chunks, BLOCK_V: tl.constexpr, CHUNKS: tl.constexpr, SLOTS: tl.constexpr):
    b = tl.program_id(0)
    scale, top_k, top_p, top_k_active, top_p_active = _request_filters(
        temperatures_ptr, top_ks_ptr, top_ps_ptr, b, vocab)
    shortlist_ptr = scratch_ptr
    filters_ptr = _filters_ptr(scratch_ptr, tl.num_programs(0) * n, num_chunks, SLOTS)
    stats_ptr = _int32_scratch(scratch_ptr, tl.num_programs(0) * n, num_chunks, SLOTS)

    last_row = tree_entry(retrive_index_ptr, b, n, 0)
    last_local = tl.zeros((), dtype=tl.int64)
    write_accept_slot(accept_index_ptr, b, max_accepts, 0, last_row)
    row_ptr = logits_ptr + last_row * stride_row
    row_max = tl.zeros((), dtype=tl.float32)
    floor_key = tl.zeros((), dtype=tl.int64)
    total = tl.zeros((), dtype=tl.float32)
    in_shortlists = tl.zeros((), dtype=tl.int1)
    coin = tl.load(coins_ptr + b.to(tl.int64) * n)
    prob_acc = tl.zeros((), dtype=tl.float32)
    accepted = tl.zeros((), dtype=tl.int32)
    cur = tree_entry(next_token_ptr, b, n, 0)
    steps = tl.zeros((), dtype=tl.int32)
    # One loop step either filters the row just reached (first, and after each accept, also
    # after the last one: the bonus draw needs it) or tries one child there. A single call
    # site of the filter, whose exact fallback passes are large, halves the compiled code.
    unfiltered = tl.full((), 1, tl.int1)
    while unfiltered | ((cur != -1) & (accepted < max_accepts) & (steps < n)):
        if unfiltered:
            row_max, floor_key, total, in_shortlists = _row_filter(
                row_ptr, filters_ptr, last_row, vocab, scale, top_k, top_p, top_k_active, top_p_active, BLOCK_V)
            unfiltered = False
        else:
            token = tree_entry(cand_ptr, b, n, cur)
            q = _token_prob(row_ptr, token, scale, row_max, floor_key, total)
            prob_acc += q
            if _accept(coin, prob_acc, q, threshold_single, threshold_acc):
                prob_acc = 0.0
                coin, accepted, last_row = _take_child(coins_ptr, predicts_ptr, accept_index_ptr, retrive_index_ptr, b,
                                                       n, max_accepts, accepted, last_row, cur, token)
                last_local = cur
                row_ptr = logits_ptr + last_row * stride_row
                unfiltered = True
                cur = tree_entry(next_token_ptr, b, n, cur)
            else:
                cur = tree_entry(next_sibling_ptr, b, n, cur)
            steps += 1
    tl.store(accept_num_ptr + b, accepted)

    # Residual at the last accepted row: the children tried there were all rejected (unless the
    # walk stopped at full depth), so their tokens drop out of the target distribution.
    drop_children = accepted < max_accepts
    final_coin = tl.load(final_coins_ptr + b)
    if in_shortlists:
        token = _draw_from_shortlists(shortlist_ptr, stats_ptr, last_row * num_chunks, num_chunks, row_max, scale,
                                      floor_key, total, final_coin, vocab, cand_ptr, next_token_ptr,
                                      next_sibling_ptr, b, n, last_local, drop_children, CHUNKS, SLOTS)
    else:
        # unfiltered rows and rows the shortlists could not decide: two passes over the row
        row_filter = (row_ptr, scale, row_max, floor_key, total, cand_ptr, next_token_ptr, next_sibling_ptr, b, n,
                      last_local, drop_children)
        token = _draw_over_row(_filtered_residual, row_filter, final_coin, vocab, BLOCK_V)
    tl.store(predicts_ptr + last_row, token.to(tl.int32))


_launch_chunk_pass = Launcher(_chunk_pass_kernel)
_launch_row_filters = Launcher(_row_filter_kernel)
_launch_walk = Launcher(_walk_kernel)


def tree_sampling_from_logits(predicts: torch.Tensor, accept_index: torch.Tensor,
                              accept_token_num: torch.Tensor, candidates: torch.Tensor,
                              retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
                              retrive_next_sibling: torch.Tensor, uniform_samples: torch.Tensor,
                              uniform_samples_for_final_sampling: torch.Tensor, logits: torch.Tensor,
                              temperatures: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor,
                              threshold_single: float = 1.0, threshold_acc: float = 1.0, *,
                              block_v: int = CHUNK, scratch_slots: int = SHORTLIST_SLOTS, tile: int = TILE) -> None:
    """SGLang's verify sampling (softmax with temperature, top-k renorm, top-p renorm,
    :func:`tree_speculative_sampling_target_only`) fused, straight from the logits, in place.

    Arguments as in :func:`tree_speculative_sampling_target_only`, with ``target_probs`` and
    ``draft_probs`` replaced by ``logits`` ``[bs*n, V]`` (float32, bfloat16 or float16, unit
    stride along V) and the per-request ``temperatures`` ``[bs]`` (or ``[bs, 1]``) float32 > 0,
    ``top_ks`` ``[bs]`` int32/int64 and ``top_ps`` ``[bs]`` float32 in (0, 1].

    The target distribution of a row, exactly (ties included):

    1. top-k: keep every token whose logit is >= the k-th largest logit of the row, so tokens
       tied with the k-th are all kept (more than k may survive); ``k <= 0`` or ``k >= V`` keeps
       all. (Temperature is monotone, so ranking logits ranks ``logits / T``.)
    2. top-p: order the kept tokens by logit, descending; find the first place where the running
       sum of ``exp((logit - max) / T)`` reaches ``top_p`` times the kept total; keep every kept
       token whose logit is >= the logit there (ties with the pivot kept). ``top_p >= 1`` keeps all.
    3. ``p = exp((logit - max) / T) / sum`` over the survivors (computed as ``exp2`` with the
       factor ``log2(e) / T``, float32).

    These are SGLang's semantics (softmax of ``logits / T``, then FlashInfer's renorm kernels)
    wherever ranking by logit and by probability agree, i.e. unless distinct logits round to one
    probability. The walk and the bonus draw are those of
    :func:`tree_speculative_sampling_target_only`; the bonus residual at the last accepted row is
    ``p`` without the tokens of the children tried there.

    How: launch 1 reads every row once, ``block_v`` logits per program (a chunk), and keeps per
    chunk its max, its mass and a shortlist of ``scratch_slots`` slots holding every token at or
    above a floor that is at most the chunk's s-th best (s = top-k, or ``SELECT_MAX`` for top-p
    alone). Then every token at or above the highest floor of a row is in its shortlists, and
    launch 2 (one program per row) decides top-k (k <= ``SELECT_MAX``) and a top-p pivot among
    the covered tokens in registers. Launch 3 (one program per request) walks the tree with those
    filters and draws the bonus token from the shortlists. Rows the shortlists cannot decide
    (top-k above ``SELECT_MAX``, more than ``scratch_slots`` tokens of a chunk at its floor, e.g.
    ties; a top-p pivot below the covered tokens) take exact radix-select and bisection passes
    over the row in the walk instead, as do unfiltered rows for the bonus draw. Scratch:
    ``[bs*n, chunks, scratch_slots]`` int64 shortlists (``chunks = ceil(V / block_v)``),
    ``[bs*n, 5]`` int64 row filters, then ``[bs*n, chunks, 4]`` int32 statistics,
    ``[bs*n, chunks, block_v / 32]`` int32 segment maxima and ``[bs*n, chunks, HOT_SEGMENTS]``
    int32 hot segment ids, in one allocation per call (each kernel finds its parts); no host
    sync, one compilation per vocabulary size. ``temperatures``, ``top_ks`` and ``top_ps`` are
    read as contiguous ``[bs]`` vectors (a ``[bs, 1]`` one is the same memory).
    ``block_v`` (a power of two >= 2), ``scratch_slots`` and ``tile`` (powers of two; the row
    pass's loop step) change speed only, never results.
    """
    bs, n = candidates.shape
    rows, vocab = logits.shape
    assert rows == bs * n and logits.stride(1) == 1
    plan = _plan(rows, vocab, block_v, scratch_slots, tile, CHUNK_PASS_WARPS, HOT_SEGMENTS, GATHER_SEGMENTS)
    # No reshape of the per-request vectors: the kernels index them as flat memory, and every
    # view costs host time (a few us each, more than a launch's GPU time at small batches).
    scratch = _row_pass(logits, n, temperatures, top_ks, top_ps, plan)
    plan.row_filters.launch((rows,), scratch, temperatures, top_ks, top_ps, n, vocab, plan.num_chunks, plan.select_max)
    plan.walk.launch(
        (bs,), predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, logits, logits.stride(0),
        temperatures, top_ks, top_ps, scratch, float(threshold_single), max(float(threshold_acc), 1e-9), n,
        accept_index.shape[1] - 1, vocab, plan.num_chunks)


class _Plan(NamedTuple):
    """The launches of :func:`tree_sampling_from_logits` for one call shape, and their sizes."""

    chunk_pass: Specialised
    row_filters: Specialised
    walk: Specialised
    num_chunks: int
    select_max: int
    int64_words: int  # shortlists (scratch_slots per record), row filters (5 per row)
    scratch_words: int  # int64 words in all: then stats records (4 int32 each), segment maxima, hot segment ids


@functools.lru_cache(maxsize=256)
def _plan(rows: int, vocab: int, block_v: int, scratch_slots: int, tile: int, num_warps: int, hot_segments: int,
          gather_segments: int) -> _Plan:
    """Worked out once per call shape: host time counts at small batches."""
    tile = min(tile, block_v)
    groups = min(GROUPS, max(block_v // 2, 1))
    segment = min(SEGMENT, tile, block_v // groups)
    segments = block_v // segment
    hot = min(hot_segments, segments)
    num_chunks = triton.cdiv(vocab, block_v)
    chunks = triton.next_power_of_2(num_chunks)
    walk_tile = min(block_v, WALK_TILE)
    records = rows * num_chunks
    int64_words = records * scratch_slots + rows * 5
    return _Plan(
        _launch_chunk_pass.specialise(CHUNK=block_v, TILE=tile, SEGMENT=segment, GROUPS=groups, HOT=hot,
                                      GATHER=min(gather_segments, hot), SLOTS=scratch_slots, num_warps=num_warps),
        _launch_row_filters.specialise(CHUNKS=chunks, SLOTS=scratch_slots, num_warps=ROW_FILTER_WARPS),
        _launch_walk.specialise(BLOCK_V=walk_tile, CHUNKS=chunks, SLOTS=scratch_slots, num_warps=_warps(walk_tile)),
        num_chunks, min(SELECT_MAX, groups, scratch_slots // 2), int64_words,
        int64_words + triton.cdiv(records * (4 + segments + hot), 2))


def _row_pass(logits, n, temperatures, top_ks, top_ps, plan: _Plan) -> torch.Tensor:
    """Launch 1 into fresh scratch (one int64 allocation, no views: the kernels find their
    parts); returns the scratch."""
    scratch = logits.new_empty((plan.scratch_words,), dtype=torch.int64)
    plan.chunk_pass.launch((logits.shape[0], plan.num_chunks), logits, logits.stride(0), temperatures, top_ks,
                           top_ps, scratch, n, logits.shape[1], plan.num_chunks, plan.select_max)
    return scratch


def _warps(block_v: int) -> int:
    return 16 if block_v >= 8192 else 4


def chunk_pass(logits: torch.Tensor, n: int, temperatures: torch.Tensor, top_ks: torch.Tensor,
               top_ps: torch.Tensor, block_v: int = CHUNK, scratch_slots: int = SHORTLIST_SLOTS,
               tile: int = TILE, num_warps: int = CHUNK_PASS_WARPS, hot_segments: int = HOT_SEGMENTS,
               gather_segments: int = GATHER_SEGMENTS):
    """Launch 1 of :func:`tree_sampling_from_logits` alone (exposed for tests and tuning): returns
    the statistics ``[rows, chunks, 4]`` int32, the shortlists ``[rows, chunks, scratch_slots]``
    int64, the number of chunks and the coverage bound ``select_max`` the shortlists were built
    for. ``tile`` (a power of two; capped at ``block_v``), ``num_warps``, ``hot_segments`` and
    ``gather_segments`` (powers of two) change speed only."""
    rows, vocab = logits.shape
    assert rows % n == 0 and logits.stride(1) == 1
    plan = _plan(rows, vocab, block_v, scratch_slots, tile, num_warps, hot_segments, gather_segments)
    scratch = _row_pass(logits, n, temperatures, top_ks, top_ps, plan)
    records = rows * plan.num_chunks
    return (scratch[plan.int64_words:].view(torch.int32)[:records * 4].view(rows, plan.num_chunks, 4),
            scratch[:records * scratch_slots].view(rows, plan.num_chunks, scratch_slots),
            plan.num_chunks, plan.select_max)
