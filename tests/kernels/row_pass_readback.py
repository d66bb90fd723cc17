"""Launch 1 of the fused sampler alone, its scratch read back (test support, and for tuning).

The views follow :mod:`sglang_eagle_ext.kernels.sampling.scratch`, the one definition of the
layout the kernels write."""

import torch

from sglang_eagle_ext.kernels.sampling import plan as sampling_plan
from sglang_eagle_ext.kernels.sampling import scratch


def chunk_pass(logits: torch.Tensor, n: int, temperatures: torch.Tensor, top_ks: torch.Tensor,
               top_ps: torch.Tensor, block_v: int = sampling_plan.CHUNK,
               scratch_slots: int = sampling_plan.SHORTLIST_SLOTS, tile: int = sampling_plan.TILE,
               num_warps: int = sampling_plan.CHUNK_PASS_WARPS, hot_segments: int = sampling_plan.HOT_SEGMENTS,
               gather_segments: int = sampling_plan.GATHER_SEGMENTS):
    """Launch 1 of ``tree_sampling_from_logits`` alone: returns the stats records
    ``[rows, chunks, STATS_WORDS]`` int32 (fields ``scratch.STAT_*``), the shortlists
    ``[rows, chunks, scratch_slots]`` int64, the number of chunks and the coverage bound
    ``select_max`` the shortlists were built for. ``tile`` (a power of two; capped at
    ``block_v``), ``num_warps``, ``hot_segments`` and ``gather_segments`` (powers of two) change
    speed only."""
    rows, vocab = logits.shape
    assert rows % n == 0 and logits.stride(1) == 1
    plan = sampling_plan.plan_launches(rows, vocab, block_v, scratch_slots, tile, num_warps, hot_segments,
                                       gather_segments, strict_acceptance=False)
    buffer = plan.row_pass(logits, n, temperatures, top_ks, top_ps)
    chunks = plan.num_chunks
    stats_words = scratch.STATS_WORDS.value
    int32_part = buffer[scratch.int64_words(rows, chunks, scratch_slots):].view(torch.int32)
    return (int32_part[:rows * chunks * stats_words].view(rows, chunks, stats_words),
            buffer[:rows * chunks * scratch_slots].view(rows, chunks, scratch_slots), chunks, plan.select_max)
