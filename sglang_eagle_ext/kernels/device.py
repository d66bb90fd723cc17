"""Device functions (``@triton.jit``) shared by the kernels: reads and writes of a request's tree
rows, order keys of float32 logits, a request's filters, the acceptance test and step of the
tree walk, and inverse-CDF draws in vocabulary order.

The sequential tree walk reads single entries of a request's ``[n]`` tree rows with scalar loads:
after the first touch they hit L1, cheaper than a block-wide reduction over a register vector
when a program has many warps.
"""

from __future__ import annotations

import triton
import triton.language as tl

# ----------------------------------------------------------------------------- tree rows


@triton.jit
def pick(values, nodes, index):
    """``values[index]`` for a register vector ``values`` laid out over ``nodes`` (a reduction)."""
    return tl.sum(tl.where(nodes == index, values, 0), axis=0)


@triton.jit
def tree_entry(ptr, b, n, node):
    """Entry ``node`` of request ``b`` in a ``[bs, n]`` tree array (candidates, links, rows)."""
    return tl.load(ptr + b.to(tl.int64) * n + node)


@triton.jit
def write_accept_slot(accept_index_ptr, b, max_accepts, slot, row):
    tl.store(accept_index_ptr + b.to(tl.int64) * (max_accepts + 1) + slot, row.to(tl.int32))


# ----------------------------------------------------------------------------- order keys


@triton.jit
def order_key32(x):
    """int32 key of float32 ``x`` ordered like the floats (NaN aside): larger float, larger key;
    -0.0 equal to +0.0, as float comparison (and so top-k / top-p ties) has it."""
    bits = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def order_key(x):
    """The same order as unsigned 32-bit keys, held in int64 (radix digits are unsigned)."""
    return order_key32(x).to(tl.int64) + 0x80000000


@triton.jit
def key_value32(key):
    """The float32 whose int32 order key is ``key`` (the inverse of :func:`order_key32`)."""
    return tl.where(key >= 0, key, key ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)


@triton.jit
def key_value(key):
    """The same from the unsigned order held in int64 (the inverse of :func:`order_key`)."""
    return key_value32((key - 0x80000000).to(tl.int32))


# ----------------------------------------------------------------------------- logits and filters


@triton.jit
def load_logits(row_ptr, index, mask):
    """Logits of a row at ``index`` as float32; -inf where ``mask`` is False."""
    return tl.load(row_ptr + index, mask=mask, other=float("-inf")).to(tl.float32)


@triton.jit
def request_filters(temperatures_ptr, top_ks_ptr, top_ps_ptr, b, vocab):
    """``(scale, top_k, top_p, top_k_active, top_p_active)`` of request ``b``; ``scale`` is
    log2(e) / T, so that ``exp((z - max) / T) == exp2((z - max) * scale)``."""
    scale = 1.4426950408889634 / tl.load(temperatures_ptr + b).to(tl.float32)
    top_k = tl.load(top_ks_ptr + b).to(tl.int32)
    top_p = tl.load(top_ps_ptr + b).to(tl.float32)
    return scale, top_k, top_p, (top_k > 0) & (top_k < vocab), top_p < 1.0


# ----------------------------------------------------------------------------- the walk


@triton.jit
def accept(coin, prob_acc, q, threshold_single, threshold_acc, STRICT: tl.constexpr):
    """SGLang's acceptance test of a child with target probability ``q`` (``prob_acc``: the
    running sum over the children tried at the node, ``q`` included). ``STRICT``: the test of
    SGLang 0.5.21+ (half-open ``coin <`` and no child without target mass), else the earlier one."""
    if STRICT:
        return (q > 0.0) & ((coin < prob_acc / threshold_acc) | (q >= threshold_single))
    return (coin <= prob_acc / threshold_acc) | (q >= threshold_single)


@triton.jit
def take_child(coins_ptr, predicts_ptr, accept_index_ptr, retrive_index_ptr, b, n, max_accepts, accepted,
               last_row, child, token):
    """Accept ``child`` (``token``) of the node whose verify row is ``last_row``: the row predicts
    the token, the child's row becomes the last accepted one and its coin the next coin.
    Returns ``(coin, accepted, last_row)``."""
    tl.store(predicts_ptr + last_row, token.to(tl.int32))
    accepted += 1
    last_row = tree_entry(retrive_index_ptr, b, n, child)
    write_accept_slot(accept_index_ptr, b, max_accepts, accepted, last_row)
    return tl.load(coins_ptr + b.to(tl.int64) * n + child), accepted, last_row


# ----------------------------------------------------------------------------- draws


@triton.jit
def draw_tile(w, index, threshold, running, sampled, last_positive, vocab):
    """One tile of an inverse-CDF draw in vocabulary order: the sample is the first index whose
    running sum exceeds ``threshold``; ``last_positive`` is the fallback when rounding leaves none."""
    cumulative = running + tl.cumsum(w, axis=0)
    hit = tl.min(tl.where(cumulative > threshold, index, vocab), axis=0)
    sampled = tl.where((sampled < 0) & (hit < vocab), hit, sampled)
    last_positive = tl.maximum(last_positive, tl.max(tl.where(w > 0, index, -1), axis=0))
    return running + tl.sum(w, axis=0), sampled, last_positive


@triton.jit
def drawn_token(sampled, last_positive, vocab):
    """The token of a finished draw: the sample, else the last index of positive weight, else
    the last token."""
    return tl.where(sampled >= 0, sampled, tl.where(last_positive >= 0, last_positive, vocab - 1))


@triton.jit
def draw_over_row(weights, weight_args, coin, vocab, BLOCK_V: tl.constexpr):
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
        running, sampled, last_positive = draw_tile(w, index, threshold, running, sampled, last_positive, vocab)
        offset += BLOCK_V
    return drawn_token(sampled, last_positive, vocab)
