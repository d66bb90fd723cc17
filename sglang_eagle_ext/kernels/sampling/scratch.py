"""The scratch of :func:`~sglang_eagle_ext.kernels.sampling.tree_sampling_from_logits`, defined
here and nowhere else: the record widths, the field of each word, where each part starts.

One int64 allocation per call (no views on the host: every kernel finds its parts from the call
shape), shared by the three launches. With ``records = rows * num_chunks`` (record
``row * num_chunks + chunk``), ``SLOTS`` shortlist slots, ``SEGMENTS`` segment maxima and ``HOT``
hot-segment ids per record (the plan's sizes, :mod:`.plan`), it holds, in order:

int64 words

1. **shortlists** ``[records, SLOTS]``, from word 0 (:func:`shortlist_record`). Launch 1 writes
   every token of the chunk whose key is >= the chunk's floor, packed ``key << 32 | token``, in
   token order, as far as ``SLOTS`` allow: the first ``min(count, SLOTS)`` slots hold one
   (``count``: the stats record's ``STAT_COUNT``), the rest is stale.
2. **row filters** ``[rows, FILTER_WORDS]`` (:func:`row_filters`, :func:`filter_record`), written
   by launch 2, read by launch 3: ``FILTER_ROW_MAX``, ``FILTER_ROW_MASS``, ``FILTER_TOTAL``
   (float32 bits as int32, widened), ``FILTER_FLOOR_KEY`` (unsigned order key: a token is kept
   when its key is >= it), ``FILTER_FLAGS`` (:func:`filter_flags`: decided, in the shortlists).

int32 words, from int64 word :func:`int64_words` on (:func:`int32_part`)

3. **stats** ``[records, STATS_WORDS]`` (:func:`stats_record`), written by launch 1:
   ``STAT_MAX`` (the chunk's max) and ``STAT_MASS`` (``sum exp2((z - chunk max) * scale)``) as
   float32 bits, ``STAT_FLOOR`` (the shortlist floor, an int32 order key) and ``STAT_COUNT`` (the
   tokens at or above it; above ``SLOTS`` the shortlist overflowed).
4. **segment maxima** ``[records, SEGMENTS]`` int32 order keys (:func:`segment_maxima`), launch 1's own.
5. **hot segment ids** ``[records, HOT]`` (:func:`hot_segment_ids`), launch 1's own.

The widths are ``tl.constexpr`` values, so the kernels and the host read the same ones (on the
host: ``.value``).
"""

from __future__ import annotations

import triton
import triton.language as tl

# Row-filter record: int64 words per row and the field of each.
FILTER_WORDS = tl.constexpr(5)
FILTER_ROW_MAX = tl.constexpr(0)
FILTER_ROW_MASS = tl.constexpr(1)
FILTER_TOTAL = tl.constexpr(2)
FILTER_FLOOR_KEY = tl.constexpr(3)
FILTER_FLAGS = tl.constexpr(4)

# Stats record: int32 words per (row, chunk) and the field of each.
STATS_WORDS = tl.constexpr(4)
STAT_MAX = tl.constexpr(0)
STAT_MASS = tl.constexpr(1)
STAT_FLOOR = tl.constexpr(2)
STAT_COUNT = tl.constexpr(3)


# ----------------------------------------------------------------------------- host: sizes


def int64_words(rows: int, num_chunks: int, slots: int) -> int:
    """int64 words of the shortlists and the row filters: where the int32 part starts."""
    return rows * num_chunks * slots + rows * FILTER_WORDS.value


def scratch_words(rows: int, num_chunks: int, slots: int, segments: int, hot: int) -> int:
    """int64 words of a call's scratch: the int64 parts, then the int32 parts rounded up."""
    records = rows * num_chunks
    return int64_words(rows, num_chunks, slots) + triton.cdiv(records * (STATS_WORDS.value + segments + hot), 2)


# ----------------------------------------------------------------------------- device: parts


@triton.jit
def shortlist_record(scratch_ptr, record, SLOTS: tl.constexpr):
    """The shortlist of ``record`` (int64 entries): the shortlists start the scratch."""
    return scratch_ptr + record * SLOTS


@triton.jit
def row_filters(scratch_ptr, rows, num_chunks, SLOTS: tl.constexpr):
    """Start of the row filters (int64): after the shortlists of every record."""
    return scratch_ptr + rows.to(tl.int64) * num_chunks * SLOTS


@triton.jit
def filter_record(filters_ptr, row):
    """The row-filter record of ``row``, from the start of the row filters."""
    return filters_ptr + row * FILTER_WORDS


@triton.jit
def filter_flags(decided, in_shortlists):
    """The ``FILTER_FLAGS`` word of a row filter."""
    return decided.to(tl.int64) | (in_shortlists.to(tl.int64) << 1)


@triton.jit
def flags_undecided(flags):
    """Whether a ``FILTER_FLAGS`` word says the shortlists did not decide the row."""
    return (flags & 1) == 0


@triton.jit
def flags_in_shortlists(flags):
    """Whether a ``FILTER_FLAGS`` word says every kept token of the row is in its shortlists."""
    return (flags & 2) != 0


@triton.jit
def int32_part(scratch_ptr, rows, num_chunks, SLOTS: tl.constexpr):
    """Start of the int32 part (the stats records first): after the row filters."""
    return (row_filters(scratch_ptr, rows, num_chunks, SLOTS) + rows.to(tl.int64) * FILTER_WORDS).to(
        tl.pointer_type(tl.int32))


@triton.jit
def stats_record(stats_ptr, record):
    """The stats record of ``record``, from the start of the int32 part."""
    return stats_ptr + record * STATS_WORDS


@triton.jit
def segment_maxima(stats_ptr, records, record, SEGMENTS: tl.constexpr):
    """The segment maxima of ``record`` (``records`` in all): after the stats records."""
    return stats_ptr + STATS_WORDS * records + record * SEGMENTS


@triton.jit
def hot_segment_ids(stats_ptr, records, record, SEGMENTS: tl.constexpr, HOT: tl.constexpr):
    """The hot-segment ids of ``record`` (``records`` in all): after the segment maxima."""
    return stats_ptr + (STATS_WORDS + SEGMENTS) * records + record * HOT
