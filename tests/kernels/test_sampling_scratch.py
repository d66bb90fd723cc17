"""The fused sampler's scratch layout: the host sizes (what the plan allocates, where the test
hook reads) and the kernels' address helpers describe the same parts, which neither overlap nor
run past the allocation."""

import pytest
import torch
import triton
import triton.language as tl

from sglang_eagle_ext.kernels.sampling import scratch

SENTINEL = -0x5A5A5A5A5A5A5A5B  # what the buffer holds before the kernel writes: no part's mark


@triton.jit
def _mark_parts(scratch_ptr, num_chunks, SLOTS: tl.constexpr, SEGMENTS: tl.constexpr, HOT: tl.constexpr):
    """One program per (row, chunk) writes its record's mark into every word of each part it owns:
    1 shortlist, 2 row filter (chunk 0 only), 3 stats, 4 segment maxima, 5 hot segment ids."""
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    rows = tl.num_programs(0)
    record = row.to(tl.int64) * num_chunks + chunk
    records = rows.to(tl.int64) * num_chunks
    slots = tl.arange(0, SLOTS)
    tl.store(scratch.shortlist_record(scratch_ptr, record, SLOTS) + slots, tl.full((SLOTS,), 1, tl.int64))
    words = tl.arange(0, 8)
    if chunk == 0:
        filters_ptr = scratch.row_filters(scratch_ptr, rows, num_chunks, SLOTS)
        tl.store(scratch.filter_record(filters_ptr, row.to(tl.int64)) + words, tl.full((8,), 2, tl.int64),
                 mask=words < scratch.FILTER_WORDS)
    stats_ptr = scratch.int32_part(scratch_ptr, rows, num_chunks, SLOTS)
    tl.store(scratch.stats_record(stats_ptr, record) + words, tl.full((8,), 3, tl.int32),
             mask=words < scratch.STATS_WORDS)
    tl.store(scratch.segment_maxima(stats_ptr, records, record, SEGMENTS) + tl.arange(0, SEGMENTS),
             tl.full((SEGMENTS,), 4, tl.int32))
    tl.store(scratch.hot_segment_ids(stats_ptr, records, record, SEGMENTS, HOT) + tl.arange(0, HOT),
             tl.full((HOT,), 5, tl.int32))


@pytest.mark.parametrize("rows, chunks, slots, segments, hot", [(3, 2, 8, 16, 4), (1, 1, 4, 2, 1), (2, 3, 16, 8, 8)])
def test_parts_follow_each_other_inside_the_allocation(rows, chunks, slots, segments, hot):
    words = scratch.scratch_words(rows, chunks, slots, segments, hot)
    guard = 8
    buffer = torch.full((words + guard,), SENTINEL, dtype=torch.int64)
    _mark_parts[(rows, chunks)](buffer, chunks, SLOTS=slots, SEGMENTS=segments, HOT=hot)
    records = rows * chunks
    int64_words = scratch.int64_words(rows, chunks, slots)
    assert int64_words == records * slots + rows * scratch.FILTER_WORDS.value
    assert buffer[:records * slots].eq(1).all()
    assert buffer[records * slots:int64_words].eq(2).all()
    int32_part = buffer[int64_words:words].view(torch.int32)
    marks = ([3] * records * scratch.STATS_WORDS.value + [4] * records * segments + [5] * records * hot)
    assert int32_part[:len(marks)].tolist() == marks
    assert buffer[words:].eq(SENTINEL).all()  # nothing past the allocation
    tail = int32_part[len(marks):].tolist()
    assert len(tail) in (0, 1)  # the int32 parts fill the allocation, rounded up to an int64 word
    assert tail == torch.tensor([SENTINEL]).view(torch.int32).tolist()[2 - len(tail):]  # the rounding is not written
