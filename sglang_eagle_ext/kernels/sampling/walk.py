"""Launch 3 of the fused sampler, the walk: one program per request walks its tree with the row
filters of launch 2 (it loads single logits only: those of the draft tokens it tries) and draws
the bonus token from the shortlists. Rows the shortlists could not decide take exact passes over
the row here (:mod:`.exact_filter`), as do unfiltered rows for the bonus draw."""

from __future__ import annotations

import triton
import triton.language as tl

from sglang_eagle_ext.kernels.launch import Launcher
from sglang_eagle_ext.kernels.device import (
    accept,
    draw_over_row,
    draw_tile,
    drawn_token,
    key_value,
    load_logits,
    order_key,
    request_filters,
    take_child,
    tree_entry,
    write_accept_slot,
)
from sglang_eagle_ext.kernels.sampling import scratch
from sglang_eagle_ext.kernels.sampling.exact_filter import exact_filter
from sglang_eagle_ext.kernels.sampling.row_filter import shortlist


@triton.jit
def _row_filter(row_ptr, filters_ptr, row, vocab, scale, top_k, top_p, top_k_active, top_p_active,
                BLOCK_V: tl.constexpr):
    """``(row_max, floor_key, total, in_shortlists)`` of a row: its record from launch 2, or
    exact passes over the row where the shortlists did not decide it."""
    record = scratch.filter_record(filters_ptr, row)
    row_max = tl.load(record + scratch.FILTER_ROW_MAX).to(tl.int32).to(tl.float32, bitcast=True)
    total = tl.load(record + scratch.FILTER_TOTAL).to(tl.int32).to(tl.float32, bitcast=True)
    floor_key = tl.load(record + scratch.FILTER_FLOOR_KEY)
    flags = tl.load(record + scratch.FILTER_FLAGS)
    if scratch.flags_undecided(flags):
        row_mass = tl.load(record + scratch.FILTER_ROW_MASS).to(tl.int32).to(tl.float32, bitcast=True)
        floor_key, total = exact_filter(row_ptr, vocab, scale, row_max, row_mass, top_k, top_p, top_k_active,
                                        top_p_active, BLOCK_V)
    return row_max, floor_key, total, scratch.flags_in_shortlists(flags)


@triton.jit
def _token_prob(row_ptr, token, scale, row_max, floor_key, total):
    z = tl.load(row_ptr + token).to(tl.float32)
    return tl.where(order_key(z) >= floor_key, tl.exp2((z - row_max) * scale) / total, 0.0)


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
    z = load_logits(row_ptr, index, mask)
    p = tl.where(mask & (order_key(z) >= floor_key), tl.exp2((z - row_max) * scale) / total, 0.0)
    return _without_tried_children(p, index, cand_ptr, next_token_ptr, next_sibling_ptr, b, n, parent, drop_children)


@triton.jit
def _draw_from_shortlists(shortlist_ptr, stats_ptr, first_record, num_chunks, row_max, scale, floor_key, total,
                          coin, vocab, cand_ptr, next_token_ptr, next_sibling_ptr, b, n, parent, drop_children,
                          CHUNKS: tl.constexpr, SLOTS: tl.constexpr):
    """The residual draw when every kept token is in the row's shortlists: the inverse CDF in
    registers. Each shortlist lists its chunk's tokens in token order and the chunks follow each
    other, so the present entries are in vocabulary order already (absent ones weigh nothing)."""
    counts = tl.load(scratch.stats_record(stats_ptr, first_record + tl.arange(0, CHUNKS)) + scratch.STAT_COUNT,
                     mask=tl.arange(0, CHUNKS) < num_chunks, other=0)
    packed, present = shortlist(shortlist_ptr, first_record, num_chunks, counts, CHUNKS, SLOTS)
    keys = (packed >> 32).to(tl.int32).to(tl.int64) + 0x80000000
    index = tl.where(present, packed & 0xFFFFFFFF, vocab)
    w = tl.where(present & (keys >= floor_key), tl.exp2((key_value(keys) - row_max) * scale) / total, 0.0)
    w = _without_tried_children(w, index, cand_ptr, next_token_ptr, next_sibling_ptr, b, n, parent, drop_children)
    running, sampled, last_positive = draw_tile(w, index, coin * tl.sum(w, axis=0), tl.zeros((), tl.float32),
                                                tl.full((), -1, tl.int64), tl.full((), -1, tl.int64), vocab)
    return drawn_token(sampled, last_positive, vocab)


# Not specialised on values: they follow the drafting shape, which an adaptive server changes per step, and
# each new specialisation (a 1, a multiple of 16) compiles mid-serving: 1.1-2.6 s stalls (H200, 2026-11-29).
@triton.jit(do_not_specialize=["n", "max_accepts"])
def _walk_kernel(predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr, retrive_index_ptr, next_token_ptr,
                 next_sibling_ptr, coins_ptr, final_coins_ptr, logits_ptr, stride_row, temperatures_ptr, top_ks_ptr,
                 top_ps_ptr, scratch_ptr, threshold_single, threshold_acc, n, max_accepts, vocab,
                 num_chunks, BLOCK_V: tl.constexpr, CHUNKS: tl.constexpr, SLOTS: tl.constexpr,
                 STRICT: tl.constexpr):
    b = tl.program_id(0)
    scale, top_k, top_p, top_k_active, top_p_active = request_filters(
        temperatures_ptr, top_ks_ptr, top_ps_ptr, b, vocab)
    shortlist_ptr = scratch_ptr
    filters_ptr = scratch.row_filters(scratch_ptr, tl.num_programs(0) * n, num_chunks, SLOTS)
    stats_ptr = scratch.int32_part(scratch_ptr, tl.num_programs(0) * n, num_chunks, SLOTS)

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
    # site of the filter keeps its large exact fallback passes compiled once.
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
            if accept(coin, prob_acc, q, threshold_single, threshold_acc, STRICT):
                prob_acc = 0.0
                coin, accepted, last_row = take_child(coins_ptr, predicts_ptr, accept_index_ptr, retrive_index_ptr, b,
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
        token = draw_over_row(_filtered_residual, row_filter, final_coin, vocab, BLOCK_V)
    tl.store(predicts_ptr + last_row, token.to(tl.int32))


launch_walk = Launcher(_walk_kernel)
