"""The launches of the fused sampler: its tuning constants, for one call shape the three
specialised kernels and the sizes they share (worked out once: host time counts at small
batches), and the three launches themselves (:meth:`Plan.sample`), all made here."""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
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

    def row_pass(self, logits: torch.Tensor, n: int, temperatures: torch.Tensor, top_ks: torch.Tensor,
                 top_ps: torch.Tensor) -> torch.Tensor:
        """Launch 1 into fresh scratch (one int64 allocation, no views: the kernels find their
        parts); returns the scratch."""
        buffer = logits.new_empty((self.scratch_words,), dtype=torch.int64)
        self.chunk_pass.launch((logits.shape[0], self.num_chunks), logits, logits.stride(0), temperatures, top_ks,
                               top_ps, buffer, n, logits.shape[1], self.num_chunks, self.select_max)
        return buffer

    def sample(self, predicts: torch.Tensor, accept_index: torch.Tensor, accept_token_num: torch.Tensor,
               candidates: torch.Tensor, retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
               retrive_next_sibling: torch.Tensor, uniform_samples: torch.Tensor,
               uniform_samples_for_final_sampling: torch.Tensor, logits: torch.Tensor, temperatures: torch.Tensor,
               top_ks: torch.Tensor, top_ps: torch.Tensor, threshold_single: float, threshold_acc: float) -> None:
        """The three launches of :func:`~.from_logits.tree_sampling_from_logits` (its arguments)."""
        bs, n = candidates.shape
        rows, vocab = logits.shape
        # No reshape of the per-request vectors: the kernels index them as flat memory, and every
        # view costs host time, which is what small batches are made of.
        buffer = self.row_pass(logits, n, temperatures, top_ks, top_ps)
        self.row_filters.launch((rows,), buffer, temperatures, top_ks, top_ps, n, vocab, self.num_chunks,
                                self.select_max)
        self.walk.launch(
            (bs,), predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
            retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, logits, logits.stride(0),
            temperatures, top_ks, top_ps, buffer, float(threshold_single), max(float(threshold_acc), 1e-9), n,
            accept_index.shape[1] - 1, vocab, self.num_chunks)


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
