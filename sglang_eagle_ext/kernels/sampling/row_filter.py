"""Launch 2 of the fused sampler, the row filters: one program per row merges the row's chunk
statistics and shortlists and decides top-k / top-p there in registers, leaving the row's filter
record for the walk (launch 3), which visits rows one after another and then only reads it."""

from __future__ import annotations

import triton
import triton.language as tl

from sglang_eagle_ext.kernels.launch import Launcher
from sglang_eagle_ext.kernels.sampling import scratch
from sglang_eagle_ext.kernels.device import key_value, pick, request_filters


@triton.jit
def _row_stats(stats_ptr, first_record, num_chunks, scale, CHUNKS: tl.constexpr):
    """``(row_max, total mass, complete_key, counts)`` of a row from its chunk records. Every
    token whose key is >= ``complete_key`` (the highest chunk floor, unsigned domain) is in some
    shortlist, unless one overflowed (a count above SLOTS)."""
    chunks = tl.arange(0, CHUNKS)
    real = chunks < num_chunks
    stats = scratch.stats_record(stats_ptr, first_record + chunks)
    chunk_max = tl.where(real, tl.load(stats + scratch.STAT_MAX, mask=real, other=0).to(tl.float32, bitcast=True),
                         float("-inf"))
    chunk_mass = tl.load(stats + scratch.STAT_MASS, mask=real, other=0).to(tl.float32, bitcast=True)
    floors = tl.load(stats + scratch.STAT_FLOOR, mask=real, other=-0x7FFFFFFF - 1)
    counts = tl.load(stats + scratch.STAT_COUNT, mask=real, other=0)
    row_max = tl.max(chunk_max, axis=0)
    live = chunk_max > float("-inf")
    total = tl.sum(tl.where(live, chunk_mass * tl.exp2((tl.where(live, chunk_max, row_max) - row_max) * scale), 0.0),
                   axis=0)
    return row_max, total, tl.max(floors, axis=0).to(tl.int64) + 0x80000000, counts


@triton.jit
def shortlist(shortlist_ptr, first_record, num_chunks, counts, CHUNKS: tl.constexpr, SLOTS: tl.constexpr):
    """A row's shortlists side by side, ``[CHUNKS * SLOTS]`` packed entries (present ones in token
    order, absent ones between the chunks'), and which slots hold one."""
    chunks = tl.arange(0, CHUNKS)
    slots = tl.arange(0, SLOTS)
    present = (chunks < num_chunks)[:, None] & (slots[None, :] < counts[:, None])
    packed = tl.load(scratch.shortlist_record(shortlist_ptr, (first_record + chunks)[:, None], SLOTS) + slots[None, :],
                     mask=present, other=-0x7FFFFFFFFFFFFFFF - 1)
    return tl.reshape(packed, (CHUNKS * SLOTS,)), tl.reshape(present.to(tl.int32), (CHUNKS * SLOTS,)) > 0


@triton.jit
def _filter_from_shortlists(shortlist_ptr, first_record, num_chunks, counts, complete_key, row_max, total_mass,
                            scale, top_k, top_p, top_k_active, top_p_active,
                            CHUNKS: tl.constexpr, SLOTS: tl.constexpr):
    """Top-k / top-p from the shortlists: ``(decided, floor_key, total)``. A rank or a running
    sum is exact where the token reached is at or above ``complete_key`` (every better token is
    then in the shortlists); otherwise ``decided`` is False."""
    packed, present = shortlist(shortlist_ptr, first_record, num_chunks, counts, CHUNKS, SLOTS)
    # Ranks and running sums need the keys alone: sort 32-bit keys, absent slots last (the smallest).
    ranked = tl.sort(tl.where(present, (packed >> 32).to(tl.int32), -0x7FFFFFFF - 1), descending=True)
    positions = tl.arange(0, CHUNKS * SLOTS)
    present = positions < tl.sum(present.to(tl.int32), axis=0)
    keys = ranked.to(tl.int64) + 0x80000000
    e = tl.where(present, tl.exp2((key_value(keys) - row_max) * scale), 0.0)
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
    below the covered tokens) are not decided: the walk takes them by exact passes
    (:func:`~.exact_filter.exact_filter`)."""
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


# Not specialised on values: they follow the drafting shape, which an adaptive server changes per step, and
# each new specialisation (a 1, a multiple of 16) compiles mid-serving: 1.1-2.6 s stalls (H200, 2026-11-29).
@triton.jit(do_not_specialize=["n"])
def _row_filter_kernel(scratch_ptr, temperatures_ptr, top_ks_ptr, top_ps_ptr, n, vocab,
                       num_chunks, select_max, CHUNKS: tl.constexpr, SLOTS: tl.constexpr):
    """The shortlist filter of every row at once (one program per row) into the row's filter
    record in the scratch (:mod:`.scratch`)."""
    row = tl.program_id(0)
    shortlist_ptr = scratch_ptr
    stats_ptr = scratch.int32_part(scratch_ptr, tl.num_programs(0), num_chunks, SLOTS)
    scale, top_k, top_p, top_k_active, top_p_active = request_filters(
        temperatures_ptr, top_ks_ptr, top_ps_ptr, row // n, vocab)
    row_max, row_mass, floor_key, total, decided, in_shortlists = _shortlist_filter(
        stats_ptr, shortlist_ptr, row.to(tl.int64) * num_chunks, num_chunks, scale, top_k, top_p, top_k_active,
        top_p_active, select_max, CHUNKS, SLOTS)
    record = scratch.filter_record(scratch.row_filters(shortlist_ptr, tl.num_programs(0), num_chunks, SLOTS),
                                   row.to(tl.int64))
    tl.store(record + scratch.FILTER_ROW_MAX, row_max.to(tl.int32, bitcast=True).to(tl.int64))
    tl.store(record + scratch.FILTER_ROW_MASS, row_mass.to(tl.int32, bitcast=True).to(tl.int64))
    tl.store(record + scratch.FILTER_TOTAL, total.to(tl.int32, bitcast=True).to(tl.int64))
    tl.store(record + scratch.FILTER_FLOOR_KEY, floor_key)
    tl.store(record + scratch.FILTER_FLAGS, scratch.filter_flags(decided, in_shortlists))


launch_row_filters = Launcher(_row_filter_kernel)
