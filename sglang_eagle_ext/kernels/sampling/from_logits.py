"""The fused sampler: temperature, top-k, top-p, the accept/reject walk and the residual draw
straight from the logits, in three launches (:mod:`.row_pass`, :mod:`.row_filter`, :mod:`.walk`)
planned and made by :mod:`.plan`, sharing one scratch allocation (:mod:`.scratch`)."""

from __future__ import annotations

import torch

from sglang_eagle_ext.kernels.sampling.plan import (
    CHUNK,
    CHUNK_PASS_WARPS,
    GATHER_SEGMENTS,
    HOT_SEGMENTS,
    SHORTLIST_SLOTS,
    TILE,
    plan_launches,
)
from sglang_eagle_ext.kernels.verify_shapes import check_verify_logits


def tree_sampling_from_logits(predicts: torch.Tensor, accept_index: torch.Tensor,
                              accept_token_num: torch.Tensor, candidates: torch.Tensor,
                              retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
                              retrive_next_sibling: torch.Tensor, uniform_samples: torch.Tensor,
                              uniform_samples_for_final_sampling: torch.Tensor, logits: torch.Tensor,
                              temperatures: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor,
                              threshold_single: float = 1.0, threshold_acc: float = 1.0, *,
                              strict_acceptance: bool = False, block_v: int = CHUNK,
                              scratch_slots: int = SHORTLIST_SLOTS, tile: int = TILE) -> None:
    r"""SGLang's verify sampling (softmax with temperature, top-k renorm, top-p renorm,
    :func:`~sglang_eagle_ext.kernels.sampling.tree_speculative_sampling_target_only`) fused,
    straight from the logits, in place: no probability tensor and no ``(bs, n, V)`` scratch.

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
    probability. The walk and the bonus draw are those of the drop-in op; the bonus residual at
    the last accepted row is ``p`` without the tokens of the children tried there (rejected
    children are the tried children of the last node).

    How: launch 1 reads every row once, ``block_v`` logits per program (a chunk), and keeps per
    chunk its max, its mass and a shortlist of ``scratch_slots`` slots holding every token at or
    above a floor that is at most the chunk's s-th best (s = top-k, or ``SELECT_MAX`` for top-p
    alone). Then every token at or above the highest floor of a row is in its shortlists, and
    launch 2 (one program per row) decides top-k (k <= ``SELECT_MAX``) and a top-p pivot among
    the covered tokens in registers. Launch 3 (one program per request) walks the tree with those
    filters and draws the bonus token from the shortlists. Rows the shortlists cannot decide
    (top-k above ``SELECT_MAX``, more than ``scratch_slots`` tokens of a chunk at its floor, e.g.
    ties; a top-p pivot below the covered tokens) take exact radix-select and bisection passes
    over the row in the walk instead (slow: one program per row), as do unfiltered rows for the
    bonus draw. One scratch allocation per call (:mod:`~sglang_eagle_ext.kernels.sampling.scratch`),
    no host sync, one compilation per vocabulary size.

    ``bs`` requests, ``n`` verify rows each, ``S`` draft steps, vocabulary ``V``.

    Parameters
    ----------
    predicts, accept_index, accept_token_num: torch.Tensor
        Outputs, as in the drop-in op: ``(bs * n,)``, ``(bs, S + 1)`` (pre-filled with -1 by the
        caller) and ``(bs,)``, int32.
    candidates, retrive_index, retrive_next_token, retrive_next_sibling: torch.Tensor
        The verify tree as in the drop-in op, shape ``(bs, n)`` each, int64.
    uniform_samples, uniform_samples_for_final_sampling: torch.Tensor
        Coins as in the drop-in op, shapes ``(bs, n)`` and ``(bs,)``, float32 in ``[0, 1)``.
    logits: torch.Tensor
        Target logits of every verify row, shape ``(bs * n, V)``, float32, bfloat16 or float16,
        unit stride along ``V``. Replaces the drop-in op's ``target_probs`` and ``draft_probs``.
    temperatures: torch.Tensor
        Per request, shape ``(bs,)`` (or ``(bs, 1)``: the same memory), float32, > 0.
    top_ks: torch.Tensor
        Per request, shape ``(bs,)``, int32 or int64.
    top_ps: torch.Tensor
        Per request, shape ``(bs,)``, float32 in ``(0, 1]``.
    threshold_single, threshold_acc: float
        The acceptance thresholds of the drop-in op, default ``1.0`` (exact sampling).
    strict_acceptance: bool
        The drop-in op's choice of acceptance test (SGLang 0.5.21+'s when True).
    block_v: int
        Logits per chunk of the row pass, a power of two >= 2.
    scratch_slots: int
        Shortlist slots per chunk, a power of two.
    tile: int
        The row pass's loop step, a power of two.

    ``temperatures``, ``top_ks`` and ``top_ps`` are read as contiguous ``bs`` vectors.
    ``block_v``, ``scratch_slots`` and ``tile`` change speed only, never results.

    Returns
    -------
    None
        The outputs are written in place.
    """
    bs, n = candidates.shape
    check_verify_logits("tree_sampling_from_logits", logits, bs, n)
    rows, vocab = logits.shape
    plan = plan_launches(rows, vocab, block_v, scratch_slots, tile, CHUNK_PASS_WARPS, HOT_SEGMENTS, GATHER_SEGMENTS,
                         strict_acceptance)
    plan.sample(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, logits, temperatures,
                top_ks, top_ps, threshold_single, threshold_acc)


def compile_for_vocabulary(vocab: int, device: torch.device, dtype: torch.dtype, *, strict_acceptance: bool) -> None:
    """One call of :func:`tree_sampling_from_logits` on one request's chain of one draft (two rows) of ``vocab``
    logits of ``dtype`` on ``device``, with SGLang's dtypes for the rest, so that Triton compiles the three
    kernels before a server's first sampled verify waits for them (1-2 s each on an H200): what they are
    specialised on is the vocabulary (its chunk count, its divisibility by 16), the dtypes and the acceptance
    test, not the batch, the filters or the drafting shape (``tests/kernels/test_specialisation.py``,
    ``test_compile_ahead.py``). Draws no random numbers: the generators' streams stay where the server left
    them."""
    int32, int64, float32 = (dict(dtype=kind, device=device) for kind in (torch.int32, torch.int64, torch.float32))
    tree_sampling_from_logits(
        torch.zeros(2, **int32), torch.full((1, 2), -1, **int32), torch.zeros(1, **int32),
        torch.tensor([[0, 1]], **int64), torch.tensor([[0, 1]], **int64), torch.tensor([[1, -1]], **int64),
        torch.tensor([[-1, -1]], **int64), torch.full((1, 2), 0.5, **float32), torch.full((1,), 0.5, **float32),
        torch.linspace(-4.0, 4.0, vocab, **float32).to(dtype).repeat(2, 1), torch.ones(1, **float32),
        torch.full((1,), 20, **int32), torch.full((1,), 0.9, **float32), strict_acceptance=strict_acceptance)
