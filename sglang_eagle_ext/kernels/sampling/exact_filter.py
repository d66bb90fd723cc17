"""Exact top-k / top-p of a whole row by passes over its logits, for the rows the shortlists
cannot decide (top-k above the plan's ``select_max``, an overflowed shortlist, a top-p pivot below
the covered tokens): radix select for top-k, bisection over the key range for top-p. Run by the
walk (launch 3), one program per request, so slow; nothing the shortlists left behind is used."""

from __future__ import annotations

import triton
import triton.language as tl

from sglang_eagle_ext.kernels.device import load_logits, order_key, pick


@triton.jit
def exact_filter(row_ptr, vocab, scale, row_max, row_mass, top_k, top_p, top_k_active, top_p_active,
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
            counts += _digit_counts(order_key(load_logits(row_ptr, index, valid)), valid, prefix, shift)
        remaining, prefix = _choose_digit(counts, remaining, prefix, shift)
    return prefix


@triton.jit
def _mass_at_or_above(row_ptr, vocab, scale, row_max, floor_key, BLOCK_V: tl.constexpr):
    """``sum exp2((z - row_max) * scale)`` over the tokens of a row whose key is >= ``floor_key``."""
    lanes = tl.arange(0, BLOCK_V)
    mass = tl.zeros((BLOCK_V,), dtype=tl.float32)
    for offset in range(0, vocab, BLOCK_V):
        index = offset + lanes
        z = load_logits(row_ptr, index, index < vocab)
        mass += tl.where(order_key(z) >= floor_key, tl.exp2((z - row_max) * scale), 0.0)
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
