"""The drop-in op: SGLang's ``tree_speculative_sampling_target_only`` on ready-made target
probabilities. One program per request walks the tree; the residual draw is vectorised over the
vocabulary."""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from sglang_eagle_ext.kernels.launch import Launcher
from sglang_eagle_ext.kernels.device import accept, draw_over_row, take_child, tree_entry, write_accept_slot
from sglang_eagle_ext.kernels.verify_shapes import block_n


@triton.jit
def _residual(offset, index, mask, rows):
    """``relu(target - draft)`` over a tile; ``rows``: (target row, draft row, the tokens the walk
    rejected there, which of those slots hold one). The draft row is zero on input and the walk
    wrote only at rejected tokens, so it is read only in tiles holding one: one row read, not two."""
    target_row_ptr, draft_row_ptr, rejected, is_rejected = rows
    in_tile = is_rejected & (rejected >= offset) & (rejected < offset + index.shape[0])
    draft_written = tl.max(in_tile.to(tl.int32), axis=0) > 0
    target = tl.load(target_row_ptr + index, mask=mask, other=0.0)
    draft = tl.load(draft_row_ptr + index, mask=tl.where(draft_written, mask, False), other=0.0)
    return tl.maximum(target - draft, 0.0)


@triton.jit
def _sampling_target_only_kernel(predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr,
                                 retrive_index_ptr, next_token_ptr, next_sibling_ptr, coins_ptr,
                                 final_coins_ptr, target_ptr, draft_ptr, threshold_single, threshold_acc,
                                 vocab, N: tl.constexpr, MAX_ACCEPTS: tl.constexpr, BLOCK_V: tl.constexpr,
                                 BLOCK_N: tl.constexpr, STRICT: tl.constexpr):
    b = tl.program_id(0)
    last_row = tree_entry(retrive_index_ptr, b, N, 0)
    write_accept_slot(accept_index_ptr, b, MAX_ACCEPTS, 0, last_row)
    coin = tl.load(coins_ptr + b.to(tl.int64) * N)
    prob_acc = tl.zeros((), dtype=tl.float32)
    accepted = tl.zeros((), dtype=tl.int32)
    cur = tree_entry(next_token_ptr, b, N, 0)
    steps = tl.zeros((), dtype=tl.int32)
    slots = tl.arange(0, BLOCK_N)
    rejected = tl.full((BLOCK_N,), -1, tl.int64)  # tokens rejected at the current row, in order
    rejected_count = tl.zeros((), dtype=tl.int32)
    while (cur != -1) & (accepted < MAX_ACCEPTS) & (steps < N):
        token = tree_entry(cand_ptr, b, N, cur)
        q = tl.load(target_ptr + last_row * vocab + token)
        prob_acc += q
        if accept(coin, prob_acc, q, threshold_single, threshold_acc, STRICT):
            prob_acc = 0.0
            coin, accepted, last_row = take_child(coins_ptr, predicts_ptr, accept_index_ptr, retrive_index_ptr, b, N,
                                                  MAX_ACCEPTS, accepted, last_row, cur, token)
            rejected_count = 0
            cur = tree_entry(next_token_ptr, b, N, cur)
        else:
            tl.store(draft_ptr + last_row * vocab + token, q)
            rejected = tl.where(slots == rejected_count, token.to(tl.int64), rejected)
            rejected_count += 1
            cur = tree_entry(next_sibling_ptr, b, N, cur)
        steps += 1
    tl.store(accept_num_ptr + b, accepted)

    # The bonus token: relu(target - draft) at the last accepted row (where the draft row holds
    # the rejected children's probabilities; none after a full-depth accept).
    tl.debug_barrier()  # the rejected-sibling stores above must be visible to every lane
    rows = (target_ptr + last_row * vocab, draft_ptr + last_row * vocab, rejected, slots < rejected_count)
    token = draw_over_row(_residual, rows, tl.load(final_coins_ptr + b), vocab, BLOCK_V)
    tl.store(predicts_ptr + last_row, token.to(tl.int32))


_launch_sampling_target_only = Launcher(_sampling_target_only_kernel)


def tree_speculative_sampling_target_only(predicts: torch.Tensor, accept_index: torch.Tensor,
                                          accept_token_num: torch.Tensor, candidates: torch.Tensor,
                                          retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
                                          retrive_next_sibling: torch.Tensor, uniform_samples: torch.Tensor,
                                          uniform_samples_for_final_sampling: torch.Tensor,
                                          target_probs: torch.Tensor, draft_probs: torch.Tensor,
                                          threshold_single: float = 1.0, threshold_acc: float = 1.0,
                                          deterministic: bool = True, *, strict_acceptance: bool = False,
                                          block_v: int = 8192) -> None:
    r"""Target-only tree speculative sampling, in place: drop-in for
    ``sgl_kernel.tree_speculative_sampling_target_only``.

    Walking from the root of each request's verify tree, child ``c`` of the current node (tried in
    sibling order) with target probability ``q`` adds ``q`` to a running sum ``acc``; it is
    accepted when ``coin <= acc / max(threshold_acc, 1e-9)`` or ``q >= threshold_single``, where
    ``coin`` is the coin of the current node (with ``strict_acceptance``, SGLang 0.5.21+'s test:
    ``q > 0`` and (``coin < acc / max(threshold_acc, 1e-9)`` or ``q >= threshold_single``));
    acceptance moves to ``c`` and resets ``acc``. With
    both thresholds 1 this samples exactly from the target (SGLang's semantics). The bonus token
    is drawn from ``relu(target - draft)`` at the last accepted row (``draft`` not subtracted
    after ``S`` accepts) by inverse CDF in vocabulary order: the first index whose running sum
    exceeds ``final_coin * sum``.

    ``bs`` requests, ``n`` verify rows each, ``S`` draft steps, vocabulary ``V``.

    Parameters
    ----------
    predicts: torch.Tensor
        Output, shape ``(bs * n,)``, int32: ``predicts[r]`` is the token emitted after verify row
        ``r``, written only for rows on the accepted path (others keep their value).
    accept_index: torch.Tensor
        Output, shape ``(bs, S + 1)``, int32, pre-filled with -1 by the caller: flat verify rows
        of the accepted path, root first.
    accept_token_num: torch.Tensor
        Output, shape ``(bs,)``, int32: accepted draft tokens per request.
    candidates: torch.Tensor
        Tokens of the verify rows, shape ``(bs, n)``, int64 (column 0: the root's token).
    retrive_index: torch.Tensor
        Flat verify row of each node, shape ``(bs, n)``, int64, ``retrive_index[b, t] == b*n + t``.
    retrive_next_token: torch.Tensor
        First child of each node or -1, shape ``(bs, n)``, int64.
    retrive_next_sibling: torch.Tensor
        Next sibling of each node or -1, shape ``(bs, n)``, int64 (as
        :func:`~sglang_eagle_ext.kernels.tree_build.build_tree_kernel_efficient` writes the links).
    uniform_samples: torch.Tensor
        Coin of each node, shape ``(bs, n)``, float32 in ``[0, 1)``.
    uniform_samples_for_final_sampling: torch.Tensor
        Coin of each request's bonus draw, shape ``(bs,)``, float32 in ``[0, 1)``.
    target_probs: torch.Tensor
        Target probabilities of every verify row, shape ``(bs, n, V)``, float32.
    draft_probs: torch.Tensor
        Scratch, shape ``(bs, n, V)``, float32, zeros on input: the target probability of each
        rejected child is written at its parent's row. Only what the op wrote is read back (the
        bonus draw reads the draft row just in the tiles holding a rejected child of the last
        accepted node).
    threshold_single: float
        Accept a child whose target probability is at least this, default ``1.0``.
    threshold_acc: float
        Divides the running sum in the acceptance test (at least ``1e-9``), default ``1.0``.
    deterministic: bool
        Accepted for compatibility: this kernel always is deterministic.
    strict_acceptance: bool
        The acceptance test of SGLang 0.5.21+ (its JIT op), default ``False``: that of
        ``sgl_kernel``'s op, which releases up to 0.5.20 call.
    block_v: int
        Vocabulary tile of the residual passes (a power of two); speed only, never results.

    Returns
    -------
    None
        The outputs are written in place.
    """
    del deterministic
    bs, n = candidates.shape
    _sampling_target_only_specialised(block_v, n, accept_index.shape[1] - 1, strict_acceptance).launch(
        (bs,), predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
        draft_probs, float(threshold_single), max(float(threshold_acc), 1e-9), target_probs.shape[-1])


@functools.lru_cache(maxsize=None)
def _sampling_target_only_specialised(block_v: int, n: int, max_accepts: int, strict: bool):
    """The tree's sizes are compile-time constants: fixed for a server's run, and each runtime
    argument costs host time at every launch."""
    return _launch_sampling_target_only.specialise(N=n, MAX_ACCEPTS=max_accepts, BLOCK_V=block_v,
                                                   BLOCK_N=block_n(n), STRICT=strict, num_warps=16)
