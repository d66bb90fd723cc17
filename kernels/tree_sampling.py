"""Target-only tree speculative sampling: accept draft children by the target distribution, then
draw the bonus token from what is left.

Two entry points:

* :func:`tree_speculative_sampling_target_only`: drop-in for SGLang's op of that name, which
  takes ready-made ``target_probs`` and a zeroed ``draft_probs`` scratch.
* :func:`tree_sampling_from_logits`: temperature, top-k, top-p, the accept/reject walk and the
  residual draw straight from the logits. A request's walk only ever needs the rows on its
  accepted path, so only those rows are read (the others never are), with no probability tensor
  and no ``[bs, n, V]`` scratch: rejected children are the tried children of the last node.

One program per request walks the tree; the row work (filtering statistics, the final draw) is
vectorised over the vocabulary.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sglang_eagle_ext.kernels.tree_walk import pick, tree_entry, write_accept_slot

SELECT_MAX = 512  # top-k up to this, and top-p alone among this many best tokens, work in registers
SCRATCH_SLOTS = 1024  # collected (key, index) pairs per request


@triton.jit
def _accept(coin, prob_acc, q, threshold_single, threshold_acc):
    return (coin <= prob_acc / threshold_acc) | (q >= threshold_single)


@triton.jit
def _draw_tile(w, index, threshold, running, sampled, last_positive, vocab):
    """One tile of an inverse-CDF draw in vocabulary order: the sample is the first index whose
    running sum exceeds ``threshold``; ``last_positive`` is the fallback when rounding leaves none."""
    cumulative = running + tl.cumsum(w, axis=0)
    hit = tl.min(tl.where(cumulative > threshold, index, vocab), axis=0)
    sampled = tl.where((sampled < 0) & (hit < vocab), hit, sampled)
    last_positive = tl.maximum(last_positive, tl.max(tl.where(w > 0, index, -1), axis=0))
    return running + tl.sum(w, axis=0), sampled, last_positive


@triton.jit
def _drawn_token(sampled, last_positive, vocab):
    return tl.where(sampled >= 0, sampled, tl.where(last_positive >= 0, last_positive, vocab - 1))


# ----------------------------------------------------------------------------- drop-in op


@triton.jit
def _residual(target_row_ptr, draft_row_ptr, subtract_draft, index, mask):
    target = tl.load(target_row_ptr + index, mask=mask, other=0.0)
    draft = tl.load(draft_row_ptr + index, mask=mask, other=0.0)
    return tl.maximum(target - tl.where(subtract_draft, draft, 0.0), 0.0)


@triton.jit
def _sampling_target_only_kernel(predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr,
                                 retrive_index_ptr, next_token_ptr, next_sibling_ptr, coins_ptr,
                                 final_coins_ptr, target_ptr, draft_ptr, threshold_single, threshold_acc,
                                 n, max_accepts, vocab, BLOCK_V: tl.constexpr):
    b = tl.program_id(0)
    last_row = tree_entry(retrive_index_ptr, b, n, 0)
    write_accept_slot(accept_index_ptr, b, max_accepts, 0, last_row)
    coin = tl.load(coins_ptr + b.to(tl.int64) * n)
    prob_acc = tl.zeros((), dtype=tl.float32)
    accepted = tl.zeros((), dtype=tl.int32)
    cur = tree_entry(next_token_ptr, b, n, 0)
    steps = tl.zeros((), dtype=tl.int32)
    while (cur != -1) & (accepted < max_accepts) & (steps < n):
        token = tree_entry(cand_ptr, b, n, cur)
        q = tl.load(target_ptr + last_row * vocab + token)
        prob_acc += q
        if _accept(coin, prob_acc, q, threshold_single, threshold_acc):
            prob_acc = 0.0
            coin = tl.load(coins_ptr + b.to(tl.int64) * n + cur)
            tl.store(predicts_ptr + last_row, token.to(tl.int32))
            accepted += 1
            last_row = tree_entry(retrive_index_ptr, b, n, cur)
            write_accept_slot(accept_index_ptr, b, max_accepts, accepted, last_row)
            cur = tree_entry(next_token_ptr, b, n, cur)
        else:
            tl.store(draft_ptr + last_row * vocab + token, q)
            cur = tree_entry(next_sibling_ptr, b, n, cur)
        steps += 1
    tl.store(accept_num_ptr + b, accepted)

    # The bonus token: relu(target - draft) at the last accepted row; after a full-depth accept
    # there were no tried siblings there, so the draft row is not subtracted.
    tl.debug_barrier()  # the rejected-sibling stores above must be visible to every lane
    target_row = target_ptr + last_row * vocab
    draft_row = draft_ptr + last_row * vocab
    subtract = accepted != max_accepts
    lanes = tl.arange(0, BLOCK_V)
    lane_total = tl.zeros((BLOCK_V,), dtype=tl.float32)  # one reduction at the end, not per tile
    for offset in range(0, vocab, BLOCK_V):
        index = offset + lanes
        lane_total += _residual(target_row, draft_row, subtract, index, index < vocab)
    threshold = tl.load(final_coins_ptr + b) * tl.sum(lane_total, axis=0)
    running = tl.zeros((), dtype=tl.float32)
    sampled = tl.full((), -1, tl.int64)
    last_positive = tl.full((), -1, tl.int64)
    offset = tl.zeros((), dtype=tl.int64)
    while (offset < vocab) & (sampled < 0):
        index = offset + lanes
        w = _residual(target_row, draft_row, subtract, index, index < vocab)
        running, sampled, last_positive = _draw_tile(w, index, threshold, running, sampled, last_positive, vocab)
        offset += BLOCK_V
    tl.store(predicts_ptr + last_row, _drawn_token(sampled, last_positive, vocab).to(tl.int32))


def _block_n(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def tree_speculative_sampling_target_only(predicts: torch.Tensor, accept_index: torch.Tensor,
                                          accept_token_num: torch.Tensor, candidates: torch.Tensor,
                                          retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
                                          retrive_next_sibling: torch.Tensor, uniform_samples: torch.Tensor,
                                          uniform_samples_for_final_sampling: torch.Tensor,
                                          target_probs: torch.Tensor, draft_probs: torch.Tensor,
                                          threshold_single: float = 1.0, threshold_acc: float = 1.0,
                                          deterministic: bool = True, *, block_v: int = 8192) -> None:
    """Drop-in for ``sgl_kernel.tree_speculative_sampling_target_only``, in place.

    Shapes (``bs`` requests, ``n`` verify rows each, ``S+1 = accept_index.shape[1]``, vocab V):
    ``predicts`` ``[bs*n]`` int32, ``accept_index`` ``[bs, S+1]`` int32 (pre-filled -1),
    ``accept_token_num`` ``[bs]`` int32 (outputs, as in
    :func:`~sglang_eagle_ext.kernels.verify_greedy.verify_tree_greedy`); ``candidates`` and the
    ``retrive_*`` links ``[bs, n]`` int64 (``retrive_index[b, t] == b*n + t``);
    ``uniform_samples`` ``[bs, n]`` float32 (the coin of node t), ``uniform_samples_for_final_sampling``
    ``[bs]`` float32; ``target_probs`` ``[bs, n, V]`` float32; ``draft_probs`` ``[bs, n, V]``
    float32, zeros on input, used as scratch: the target probability of each rejected child is
    written at its parent's row.

    Semantics (SGLang's): walking from the root, child c of the current node (tried in sibling
    order) with target probability ``q`` adds ``q`` to a running sum ``acc``; it is accepted when
    ``coin <= acc / max(threshold_acc, 1e-9)`` or ``q >= threshold_single``, where ``coin`` is the
    coin of the current node; acceptance moves to c and resets ``acc``. With both thresholds 1 this
    samples exactly from the target. The bonus token is drawn from ``relu(target - draft)`` at the
    last accepted row (``draft`` not subtracted after S accepts) by
    inverse CDF in vocabulary order (first index whose running sum exceeds
    ``final_coin * sum``). ``deterministic`` is accepted for compatibility: this kernel always is.
    ``block_v`` is the vocabulary tile of the residual passes.
    """
    del deterministic
    bs, n = candidates.shape
    vocab = target_probs.shape[-1]
    _sampling_target_only_kernel[(bs,)](
        predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
        draft_probs, float(threshold_single), max(float(threshold_acc), 1e-9), n,
        accept_index.shape[1] - 1, vocab, BLOCK_V=block_v, num_warps=16)


# ----------------------------------------------------------------------------- from logits


@triton.jit
def _order_key32(x):
    """int32 key of float32 ``x`` ordered like the floats (NaN aside): larger float, larger key."""
    bits = x.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _order_key(x):
    """The same order as unsigned 32-bit keys, held in int64 (radix digits are unsigned)."""
    return _order_key32(x).to(tl.int64) + 0x80000000


@triton.jit
def _key_value(key):
    ordered = (key - 0x80000000).to(tl.int32)
    return tl.where(ordered >= 0, ordered, ordered ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)


@triton.jit
def _logits(row_ptr, index, mask):
    return tl.load(row_ptr + index, mask=mask, other=float("-inf")).to(tl.float32)


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
def _kth_largest_key_of(keys, candidate, k):
    """Key of the k-th largest among the candidate entries of a register vector of keys."""
    prefix = tl.zeros((), dtype=tl.int64)
    remaining = k.to(tl.int32)
    for shift in tl.static_range(24, -1, -8):
        remaining, prefix = _choose_digit(_digit_counts(keys, candidate, prefix, shift), remaining, prefix, shift)
    return prefix


@triton.jit
def _kth_largest_key_in_row(row_ptr, vocab, scale, k, BLOCK_V: tl.constexpr):
    """Key of the k-th largest ``z`` of a row (1 <= k <= vocab), four passes over the row."""
    lanes = tl.arange(0, BLOCK_V)
    prefix = tl.zeros((), dtype=tl.int64)
    remaining = k.to(tl.int32)
    for shift in tl.static_range(24, -1, -8):
        counts = tl.zeros((256,), dtype=tl.int32)
        for offset in range(0, vocab, BLOCK_V):
            index = offset + lanes
            valid = index < vocab
            counts += _digit_counts(_order_key(_logits(row_ptr, index, valid)), valid, prefix, shift)
        remaining, prefix = _choose_digit(counts, remaining, prefix, shift)
    return prefix


@triton.jit
def _mass_at_or_above(row_ptr, vocab, scale, row_max, floor_key, BLOCK_V: tl.constexpr):
    lanes = tl.arange(0, BLOCK_V)
    mass = tl.zeros((BLOCK_V,), dtype=tl.float32)
    for offset in range(0, vocab, BLOCK_V):
        index = offset + lanes
        z = _logits(row_ptr, index, index < vocab)
        mass += tl.where(_order_key(z) >= floor_key, tl.exp2((z - row_max) * scale), 0.0)
    return tl.sum(mass, axis=0)


@triton.jit
def _row_filter(row_ptr, vocab, scale, top_k, top_p, scratch_ptr,
                BLOCK_V: tl.constexpr, CANDIDATES: tl.constexpr, SELECT_MAX: tl.constexpr):
    """Filter statistics of one row: ``(row_max, floor_key, total, stored, in_scratch)``; token i
    keeps ``exp(z_i - row_max) / total`` when ``key(z_i) >= floor_key``, else 0.

    Pass 1 keeps each lane's maximum; the s-th largest lane maximum (s = top-k, or SELECT_MAX
    for top-p alone) is at most the row's s-th largest ``z``, so pass 2 (from L2) collects every
    token at or above it (rarely many more than s) into the scratch: ``(key, index)`` pairs,
    ``stored`` of them. Top-k and top-p are then exact in registers, and ``in_scratch`` says all
    surviving tokens are there. Otherwise (more than CANDIDATES collected, top-k above SELECT_MAX,
    or a top-p pivot further down) exact passes over the row take over.
    """
    lanes = tl.arange(0, BLOCK_V)
    lane_max = tl.full((BLOCK_V,), float("-inf"), tl.float32)
    for offset in range(0, vocab, BLOCK_V):
        index = offset + lanes
        lane_max = tl.maximum(lane_max, _logits(row_ptr, index, index < vocab))
    row_max = tl.max(lane_max, axis=0)

    top_k_active = (top_k > 0) & (top_k < vocab)
    top_p_active = top_p < 1.0
    filtered = top_k_active | top_p_active
    counter_ptr = scratch_ptr + CANDIDATES
    floor32 = tl.full((), 0x7FFFFFFF, tl.int32)  # no finite logit reaches it: collect nothing
    if filtered:
        select = tl.where(top_k_active & (top_k <= SELECT_MAX), top_k, tl.minimum(vocab, SELECT_MAX))
        floor32 = (_kth_largest_key_of(_order_key(lane_max), lanes < vocab, select) - 0x80000000).to(tl.int32)
        tl.store(counter_ptr, 0)
    tl.debug_barrier()
    lane_mass = tl.zeros((BLOCK_V,), dtype=tl.float32)
    for offset in range(0, vocab, BLOCK_V):
        index = offset + lanes
        valid = index < vocab
        z = _logits(row_ptr, index, valid)
        key32 = _order_key32(z)
        lane_mass += tl.exp2((z - row_max) * scale)  # masked lanes hold -inf: they add 0
        collect = valid & (key32 >= floor32)
        slot = tl.atomic_add(counter_ptr + tl.zeros_like(index).to(tl.int64), 1, mask=collect)
        tl.store(scratch_ptr + slot, (key32.to(tl.int64) << 32) | index, mask=collect & (slot < CANDIDATES))
    all_mass = tl.sum(lane_mass, axis=0)
    tl.debug_barrier()
    stored = tl.where(filtered, tl.atomic_add(counter_ptr, 0), 0)

    floor_key = tl.zeros((), dtype=tl.int64)
    total = all_mass
    in_scratch = filtered & (stored <= CANDIDATES) & ~(top_k_active & (top_k > SELECT_MAX))
    if in_scratch:
        slots = tl.arange(0, CANDIDATES)
        present = slots < stored
        packed = tl.sort(tl.load(scratch_ptr + slots, mask=present, other=-0x7FFFFFFFFFFFFFFF - 1), descending=True)
        keys = (packed >> 32) + 0x80000000
        e = tl.where(present, tl.exp2((_key_value(keys) - row_max) * scale), 0.0)
        kept_mass = all_mass
        if top_k_active:
            floor_key = pick(keys, slots, top_k - 1)
            kept_mass = tl.sum(tl.where(keys >= floor_key, e, 0.0), axis=0)
        total = kept_mass
        if top_p_active:
            reached = present & (tl.cumsum(e, axis=0) >= top_p * kept_mass)
            first = tl.min(tl.where(reached, slots, CANDIDATES), axis=0)
            if first < CANDIDATES:
                floor_key = pick(keys, slots, first)
                total = tl.sum(tl.where(keys >= floor_key, e, 0.0), axis=0)
            else:
                in_scratch = first < CANDIDATES  # False: the pivot lies below the collected tokens
                floor_key, total = _top_p_by_bisection(row_ptr, vocab, scale, row_max, floor_key,
                                                       top_p * kept_mass, kept_mass, BLOCK_V)
    elif filtered:
        if top_k_active:
            floor_key = _kth_largest_key_in_row(row_ptr, vocab, scale, top_k, BLOCK_V)
            total = _mass_at_or_above(row_ptr, vocab, scale, row_max, floor_key, BLOCK_V)
        if top_p_active:
            floor_key, total = _top_p_by_bisection(row_ptr, vocab, scale, row_max, floor_key,
                                                   top_p * total, total, BLOCK_V)
    return row_max, floor_key, total, stored, in_scratch


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


@triton.jit
def _token_prob(row_ptr, token, scale, row_max, floor_key, total):
    z = tl.load(row_ptr + token).to(tl.float32)
    return tl.where(_order_key(z) >= floor_key, tl.exp2((z - row_max) * scale) / total, 0.0)


@triton.jit
def _filtered_residual(row_ptr, scale, row_max, floor_key, total, rejected, index, mask):
    """Filtered target probabilities of a tile, zero at the ``rejected`` tokens (-1 = none)."""
    z = _logits(row_ptr, index, mask)
    p = tl.where(mask & (_order_key(z) >= floor_key), tl.exp2((z - row_max) * scale) / total, 0.0)
    tile_start = tl.min(index, axis=0)
    in_tile = (rejected >= tile_start) & (rejected < tile_start + index.shape[0])
    if tl.max(in_tile.to(tl.int32), axis=0) > 0:  # rare: compare only where a rejected token lies
        is_rejected = tl.max((index[:, None] == rejected[None, :]).to(tl.int32), axis=1) > 0
        p = tl.where(is_rejected, 0.0, p)
    return p


@triton.jit
def _draw_from_scratch(scratch_ptr, stored, row_max, scale, floor_key, total, rejected, coin, vocab,
                       CANDIDATES: tl.constexpr):
    """The residual draw when every surviving token is in the scratch: sort the survivors by
    vocabulary index and take the inverse CDF in registers."""
    slots = tl.arange(0, CANDIDATES)
    present = slots < stored
    packed = tl.load(scratch_ptr + slots, mask=present, other=0)
    keys = (packed >> 32) + 0x80000000
    index = packed & 0xFFFFFFFF
    is_rejected = tl.max((index[:, None] == rejected[None, :]).to(tl.int32), axis=1) > 0
    w = tl.where(present & (keys >= floor_key) & ~is_rejected, tl.exp2((_key_value(keys) - row_max) * scale) / total, 0.0)
    by_index = tl.sort(tl.where(present, index, vocab + slots) << 32 | w.to(tl.int32, bitcast=True).to(tl.int64))
    w = (by_index & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    index = by_index >> 32
    running, sampled, last_positive = _draw_tile(w, index, coin * tl.sum(w, axis=0), tl.zeros((), tl.float32),
                                                 tl.full((), -1, tl.int64), tl.full((), -1, tl.int64), vocab)
    return _drawn_token(sampled, last_positive, vocab)


@triton.jit
def _sampling_from_logits_kernel(predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr,
                                 retrive_index_ptr, next_token_ptr, next_sibling_ptr, coins_ptr,
                                 final_coins_ptr, logits_ptr, stride_row, temperatures_ptr, top_ks_ptr,
                                 top_ps_ptr, scratch_ptr, threshold_single, threshold_acc,
                                 n, max_accepts, vocab, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr,
                                 CANDIDATES: tl.constexpr, SELECT_MAX: tl.constexpr):
    b = tl.program_id(0)
    nodes = tl.arange(0, BLOCK_N)
    scale = 1.4426950408889634 / tl.load(temperatures_ptr + b).to(tl.float32)  # log2(e) / T: exp via exp2
    top_k = tl.load(top_ks_ptr + b).to(tl.int32)
    top_p = tl.load(top_ps_ptr + b).to(tl.float32)
    scratch = scratch_ptr + b.to(tl.int64) * (CANDIDATES + 1)

    last_row = tree_entry(retrive_index_ptr, b, n, 0)
    last_local = tl.zeros((), dtype=tl.int64)
    write_accept_slot(accept_index_ptr, b, max_accepts, 0, last_row)
    row_ptr = logits_ptr + last_row * stride_row
    row_max, floor_key, total, stored, in_scratch = _row_filter(
        row_ptr, vocab, scale, top_k, top_p, scratch, BLOCK_V, CANDIDATES, SELECT_MAX)
    coin = tl.load(coins_ptr + b.to(tl.int64) * n)
    prob_acc = tl.zeros((), dtype=tl.float32)
    accepted = tl.zeros((), dtype=tl.int32)
    cur = tree_entry(next_token_ptr, b, n, 0)
    steps = tl.zeros((), dtype=tl.int32)
    while (cur != -1) & (accepted < max_accepts) & (steps < n):
        token = tree_entry(cand_ptr, b, n, cur)
        q = _token_prob(row_ptr, token, scale, row_max, floor_key, total)
        prob_acc += q
        if _accept(coin, prob_acc, q, threshold_single, threshold_acc):
            prob_acc = 0.0
            coin = tl.load(coins_ptr + b.to(tl.int64) * n + cur)
            tl.store(predicts_ptr + last_row, token.to(tl.int32))
            accepted += 1
            last_row = tree_entry(retrive_index_ptr, b, n, cur)
            last_local = cur
            write_accept_slot(accept_index_ptr, b, max_accepts, accepted, last_row)
            row_ptr = logits_ptr + last_row * stride_row
            row_max, floor_key, total, stored, in_scratch = _row_filter(
                row_ptr, vocab, scale, top_k, top_p, scratch, BLOCK_V, CANDIDATES, SELECT_MAX)
            cur = tree_entry(next_token_ptr, b, n, cur)
        else:
            cur = tree_entry(next_sibling_ptr, b, n, cur)
        steps += 1
    tl.store(accept_num_ptr + b, accepted)

    # Residual at the last accepted row: the children tried there were all rejected (unless the
    # walk stopped at full depth), so their tokens drop out of the target distribution.
    rejected = _children_tokens(cand_ptr, next_token_ptr, next_sibling_ptr, b, n, last_local, nodes)
    rejected = tl.where(accepted < max_accepts, rejected, -1)
    final_coin = tl.load(final_coins_ptr + b)
    if in_scratch:
        token = _draw_from_scratch(scratch, stored, row_max, scale, floor_key, total, rejected, final_coin, vocab,
                                   CANDIDATES)
    else:
        lanes = tl.arange(0, BLOCK_V)
        residual = tl.zeros((BLOCK_V,), dtype=tl.float32)
        for offset in range(0, vocab, BLOCK_V):
            index = offset + lanes
            residual += _filtered_residual(row_ptr, scale, row_max, floor_key, total, rejected,
                                           index, index < vocab)
        threshold = final_coin * tl.sum(residual, axis=0)
        running = tl.zeros((), dtype=tl.float32)
        sampled = tl.full((), -1, tl.int64)
        last_positive = tl.full((), -1, tl.int64)
        offset = tl.zeros((), dtype=tl.int64)
        while (offset < vocab) & (sampled < 0):
            index = offset + lanes
            w = _filtered_residual(row_ptr, scale, row_max, floor_key, total, rejected, index, index < vocab)
            running, sampled, last_positive = _draw_tile(w, index, threshold, running, sampled, last_positive,
                                                         vocab)
            offset += BLOCK_V
        token = _drawn_token(sampled, last_positive, vocab)
    tl.store(predicts_ptr + last_row, token.to(tl.int32))


@triton.jit
def _children_tokens(cand_ptr, next_token_ptr, next_sibling_ptr, b, n, parent, nodes):
    """Tokens of ``parent``'s children at their node positions over ``nodes``, -1 elsewhere."""
    tokens = tl.full(nodes.shape, -1, tl.int64)
    cur = tree_entry(next_token_ptr, b, n, parent)
    steps = tl.zeros((), dtype=tl.int32)
    while (cur != -1) & (steps < n):
        tokens = tl.where(nodes == cur, tree_entry(cand_ptr, b, n, cur), tokens)
        cur = tree_entry(next_sibling_ptr, b, n, cur)
        steps += 1
    return tokens


def tree_sampling_from_logits(predicts: torch.Tensor, accept_index: torch.Tensor,
                              accept_token_num: torch.Tensor, candidates: torch.Tensor,
                              retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
                              retrive_next_sibling: torch.Tensor, uniform_samples: torch.Tensor,
                              uniform_samples_for_final_sampling: torch.Tensor, logits: torch.Tensor,
                              temperatures: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor,
                              threshold_single: float = 1.0, threshold_acc: float = 1.0, *,
                              block_v: int = 16384, scratch_slots: int = SCRATCH_SLOTS) -> None:
    """SGLang's verify sampling (softmax with temperature, top-k renorm, top-p renorm,
    :func:`tree_speculative_sampling_target_only`) fused, straight from the logits, in place.

    Arguments as in :func:`tree_speculative_sampling_target_only`, with ``target_probs`` and
    ``draft_probs`` replaced by ``logits`` ``[bs*n, V]`` (float32, bfloat16 or float16, unit
    stride along V) and the per-request ``temperatures`` ``[bs]`` (or ``[bs, 1]``) float32 > 0,
    ``top_ks`` ``[bs]`` int32/int64 and ``top_ps`` ``[bs]`` float32 in (0, 1].

    The target distribution of a row, exactly (ties included):

    1. top-k: keep every token whose logit is >= the k-th largest logit of the row, so tokens
       tied with the k-th are all kept (more than k may survive); ``k <= 0`` or ``k >= V`` keeps
       all. (Temperature is monotone, so ranking logits ranks ``logits / T``.)
    2. top-p: order the kept tokens by logit, descending; find the first place where the running
       sum of ``exp((logit - max) / T)`` reaches ``top_p`` times the kept total; keep every kept
       token whose logit is >= the logit there (ties with the pivot kept). ``top_p >= 1`` keeps all.
    3. ``p = exp((logit - max) / T) / sum`` over the survivors (computed as ``exp2`` with the
       factor ``log2(e) / T``, float32).

    These are SGLang's semantics (softmax of ``logits / T``, then FlashInfer's renorm kernels)
    wherever ranking by logit and by probability agree, i.e. unless distinct logits round to one
    probability. The walk and the
    bonus draw are those of :func:`tree_speculative_sampling_target_only`; the bonus residual at
    the last accepted row is ``p`` without the tokens of the children tried there.
    Only the rows of the accepted path are read, each twice (the second time mostly from L2):
    once for per-lane maxima, once to collect the best tokens into a per-request scratch, where
    top-k (k <= ``SELECT_MAX``), top-p and the bonus draw are done in registers. Unfiltered rows
    take two more passes for the draw; rare cases (top-k above ``SELECT_MAX``, more than
    ``SCRATCH_SLOTS`` tokens tied at the threshold, a top-p pivot below the ``SELECT_MAX`` best
    tokens) fall back to exact radix-select and bisection passes over the row (slower).
    Uses a ``[bs, scratch_slots + 1]`` int64 scratch allocated per call (a power of two); ``block_v``
    is the vocabulary tile of every row pass. Both change speed only, never results.
    """
    bs, n = candidates.shape
    rows, vocab = logits.shape
    assert rows == bs * n and logits.stride(1) == 1
    scratch = torch.empty((bs * (scratch_slots + 1),), dtype=torch.int64, device=logits.device)
    _sampling_from_logits_kernel[(bs,)](
        predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, logits,
        logits.stride(0), temperatures.reshape(-1), top_ks.reshape(-1), top_ps.reshape(-1), scratch,
        float(threshold_single), max(float(threshold_acc), 1e-9), n, accept_index.shape[1] - 1, vocab,
        BLOCK_N=_block_n(n), BLOCK_V=block_v, CANDIDATES=scratch_slots,
        SELECT_MAX=min(SELECT_MAX, block_v, scratch_slots // 2),
        num_warps=16)
