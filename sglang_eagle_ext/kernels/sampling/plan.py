"""Launch planning of the fused sampler: its tuning constants, and for one call shape the three
specialised launches and the sizes they share (worked out once: host time counts at small
batches)."""

from __future__ import annotations

import functools
from typing import NamedTuple

import triton

from sglang_eagle_ext.kernels.launch import Specialised
from sglang_eagle_ext.kernels.sampling import scratch
from sglang_eagle_ext.kernels.sampling.row_filter import launch_row_filters
from sglang_eagle_ext.kernels.sampling.row_pass import launch_chunk_pass
from sglang_eagle_ext.kernels.sampling.walk import launch_walk

SELECT_MAX = 64  # top-k up to this, and top-p alone within this many best tokens, decided from the shortlists
SHORTLIST_SLOTS = 128  # (key, index) slots per chunk shortlist: the best SELECT_MAX tokens plus ties and slack
# Row pass: logits per program (a chunk), per loop step, warps per program; each the fastest
# value probed on the benchmark's shapes (benchmarks/results/tree_kernels_tuning.md). Long chunks:
# fewer programs pay the floor search and the gather, and each row filter merges fewer
# shortlists. Few warps: the tail of a program needs many registers, and the other programs on
# an SM keep streaming while one runs its tail.
CHUNK = 65536
TILE = 2048
CHUNK_PASS_WARPS = 4
WALK_TILE = 16384  # logits per loop step of the walk's passes over a whole row
ROW_FILTER_WARPS = 4  # per program of launch 2 (a row's shortlists: a few hundred entries)
SEGMENT = 32  # neighbouring tokens whose max the row pass keeps: a 128-byte line of float32 logits
GROUPS = 256  # a chunk's segments fall into this many groups (>= SELECT_MAX); their maxima bound its ranks
HOT_SEGMENTS = 128  # segments the shortlist gather reads (about SELECT_MAX hold the best; ties); beyond: a sweep
GATHER_SEGMENTS = 32  # segments it reads per step


class Plan(NamedTuple):
    """The launches of :func:`~.from_logits.tree_sampling_from_logits` for one call shape, and
    their sizes."""

    chunk_pass: Specialised  # launch 1, grid (rows, num_chunks)
    row_filters: Specialised  # launch 2, grid (rows,)
    walk: Specialised  # launch 3, grid (bs,)
    num_chunks: int  # chunks per row: ceil(vocab / block_v)
    select_max: int  # top-k up to this, and top-p alone within this many best tokens, from the shortlists
    scratch_words: int  # int64 words of the call's scratch (:mod:`.scratch`)


@functools.lru_cache(maxsize=256)
def plan_launches(rows: int, vocab: int, block_v: int, scratch_slots: int, tile: int, num_warps: int,
                  hot_segments: int, gather_segments: int, strict_acceptance: bool) -> Plan:
    """The plan of a call shape: ``block_v`` logits per chunk, ``scratch_slots`` shortlist
    slots, the row pass's loop step ``tile`` (capped at ``block_v``), ``num_warps`` per row-pass
    program, ``hot_segments`` segments the gather may read, ``gather_segments`` of them per step,
    and the walk's acceptance test (``strict_acceptance``: SGLang 0.5.21+'s)."""
    tile = min(tile, block_v)
    groups = min(GROUPS, max(block_v // 2, 1))
    segment = min(SEGMENT, tile, block_v // groups)
    segments = block_v // segment
    hot = min(hot_segments, segments)
    num_chunks = triton.cdiv(vocab, block_v)
    chunks = triton.next_power_of_2(num_chunks)
    walk_tile = min(block_v, WALK_TILE)
    return Plan(
        launch_chunk_pass.specialise(CHUNK=block_v, TILE=tile, SEGMENT=segment, GROUPS=groups, HOT=hot,
                                     GATHER=min(gather_segments, hot), SLOTS=scratch_slots, num_warps=num_warps),
        launch_row_filters.specialise(CHUNKS=chunks, SLOTS=scratch_slots, num_warps=ROW_FILTER_WARPS),
        launch_walk.specialise(BLOCK_V=walk_tile, CHUNKS=chunks, SLOTS=scratch_slots, STRICT=strict_acceptance,
                               num_warps=_warps(walk_tile)),
        num_chunks, min(SELECT_MAX, groups, scratch_slots // 2),
        scratch.scratch_words(rows, num_chunks, scratch_slots, segments, hot))


def _warps(block_v: int) -> int:
    return 16 if block_v >= 8192 else 4
