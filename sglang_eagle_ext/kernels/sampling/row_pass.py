"""Launch 1 of the fused sampler, the row pass: one program per (row, chunk) reads the chunk's
logits once and leaves its statistics and a shortlist of its best tokens in the scratch."""

from __future__ import annotations

import triton
import triton.language as tl

from sglang_eagle_ext.kernels.launch import Launcher
from sglang_eagle_ext.kernels.sampling import scratch
from sglang_eagle_ext.kernels.device import key_value32, load_logits, order_key32, pick, request_filters


@triton.jit
def _append_at_or_above(z, index, valid, floor, base, shortlist_row_ptr, SLOTS: tl.constexpr):
    """Store every valid token of ``z`` (1-D) whose key is >= ``floor`` in a shortlist, in the
    order of ``index``, from slot ``base`` on; returns ``base`` plus how many there were."""
    key = order_key32(z)
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
    ``segment_max_ptr``. One loop serves both kinds of row: for unfiltered ones the stores are
    masked off, not compiled out (a copy of the loop without them was no faster)."""
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
        z = load_logits(row_ptr, index, index < vocab)
        tl.store(segment_max_ptr + start // SEGMENT + tile_segments, order_key32(tl.max(z, axis=1)),
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
    values = key_value32(keys)
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
    return order_key32(low)


# Not specialised on values: they follow the drafting shape, which an adaptive server changes per step, and
# each new specialisation (a 1, a multiple of 16) compiles mid-serving: 1.1-2.6 s stalls (H200, 2026-11-29).
@triton.jit(do_not_specialize=["n"])
def _chunk_pass_kernel(logits_ptr, stride_row, temperatures_ptr, top_ks_ptr, top_ps_ptr, scratch_ptr, n, vocab,
                       num_chunks, select_max,
                       CHUNK: tl.constexpr, TILE: tl.constexpr, SEGMENT: tl.constexpr, GROUPS: tl.constexpr,
                       HOT: tl.constexpr, GATHER: tl.constexpr, SLOTS: tl.constexpr):
    """Statistics and shortlist of one chunk of one row, reading its logits once from memory,
    into the chunk's stats record and shortlist in the scratch (:mod:`.scratch`).

    The shortlist holds every token of the chunk whose key is >= the floor. The floor is at most
    the chunk's s-th largest key (s = top-k, or ``select_max`` for top-p alone): the chunk is cut
    into segments of SEGMENT neighbouring tokens (a cache line of float32 logits at 32), segments
    into GROUPS groups of neighbours, and the floor is a key with at least s group maxima at or
    above it (just below the s-th largest), so s distinct tokens are >= it.

    One streaming sweep of TILE tokens, with no exchange between lanes but the segment maxima:
    it keeps a running max per lane and the mass against it, and stores the maximum of each
    segment (filtered rows only). Only segments whose max is >= the floor (the "hot" ones, about
    s) hold a shortlisted token, so the shortlist comes from a gather of just those segments
    (whole cache lines, GATHER per step); when more than HOT segments are hot (ties), from a
    second sweep of the chunk.
    """
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    shortlist_ptr = scratch_ptr
    stats_ptr = scratch.int32_part(scratch_ptr, tl.num_programs(0), num_chunks, SLOTS)
    scale, top_k, top_p, top_k_active, top_p_active = request_filters(
        temperatures_ptr, top_ks_ptr, top_ps_ptr, row // n, vocab)
    # How many best tokens the shortlists must cover; 0: the row is unfiltered, or top-k is
    # beyond what shortlists decide, and nothing is collected.
    cover = tl.where(top_k_active, tl.where(top_k <= select_max, top_k, 0), tl.where(top_p_active, select_max, 0))

    SEGMENTS: tl.constexpr = CHUNK // SEGMENT
    record = row.to(tl.int64) * num_chunks + chunk
    records = tl.num_programs(0).to(tl.int64) * num_chunks
    segment_max_ptr = scratch.segment_maxima(stats_ptr, records, record, SEGMENTS)
    hot_list_ptr = scratch.hot_segment_ids(stats_ptr, records, record, SEGMENTS, HOT)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_row
    first = chunk * CHUNK
    chunk_max, mass = _sweep(row_ptr, first, vocab, scale, segment_max_ptr, cover > 0, CHUNK, TILE, SEGMENT)

    floor = tl.full((), 0x7FFFFFFF, tl.int32)
    count = tl.zeros((), dtype=tl.int32)
    if cover > 0:
        shortlist_row_ptr = scratch.shortlist_record(shortlist_ptr, record, SLOTS)
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
                z = load_logits(row_ptr, index, valid)
                count = _append_at_or_above(tl.reshape(z, (GATHER * SEGMENT,)), tl.reshape(index, (GATHER * SEGMENT,)),
                                            tl.reshape(valid, (GATHER * SEGMENT,)), floor, count, shortlist_row_ptr,
                                            SLOTS)
        else:
            for start in range(0, CHUNK, TILE):
                index = first + start + tl.arange(0, TILE)
                valid = index < vocab
                count = _append_at_or_above(load_logits(row_ptr, index, valid), index, valid, floor, count,
                                            shortlist_row_ptr, SLOTS)
    stats = scratch.stats_record(stats_ptr, record)
    tl.store(stats + scratch.STAT_MAX, chunk_max.to(tl.int32, bitcast=True))
    tl.store(stats + scratch.STAT_MASS, mass.to(tl.int32, bitcast=True))
    tl.store(stats + scratch.STAT_FLOOR, floor)
    tl.store(stats + scratch.STAT_COUNT, count)


launch_chunk_pass = Launcher(_chunk_pass_kernel)
