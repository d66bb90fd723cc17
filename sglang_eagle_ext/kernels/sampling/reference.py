"""The sampling ops in plain torch, one reference per op, beside the Triton kernels they describe:

* :func:`top_k_renorm_prob`, :func:`top_p_renorm_prob`: SGLang's renorm ops (FlashInfer's
  semantics, which SGLang uses on CUDA), on ``[rows, V]`` probabilities with one ``top_k`` /
  ``top_p`` per row;
* :func:`tree_speculative_sampling_target_only`: the drop-in op (:mod:`.drop_in`), in place;
* :func:`filtered_probs`: the target distribution the fused sampler (:mod:`.from_logits`) samples,
  from the logits, in float64;
* :func:`tree_sampling_from_logits`: the fused sampler, in place.

The first three are also what samples where SGLang has no kernels (a CPU-only host):
:mod:`sglang_eagle_ext.sglang.compat.cpu_sampling` binds them under SGLang's names. Everything is
vectorised over rows and requests: one step of the tree walk visits one node of every request still
walking, so a round costs at most ``n`` steps for ``n`` verify rows per request. Nothing here
imports Triton.

The tests hold each kernel to its reference (the same draws with the same coins) and each reference
to an independent one, written a request and a node at a time
(``tests/kit/kernel_reference.py``, not installed), and on a GPU to SGLang's own ops.
"""

from __future__ import annotations

from typing import Union

import torch

# The smallest accumulated-mass divisor, as SGLang's kernels clamp threshold_acc.
_MIN_THRESHOLD_ACC = 1e-9


def _per_row(value: Union[torch.Tensor, int, float], rows: int, dtype: torch.dtype,
             device: torch.device) -> torch.Tensor:
    """A scalar or one value per row as a ``[rows]`` tensor."""
    values = torch.as_tensor(value, dtype=dtype, device=device).reshape(-1)
    if values.numel() == 1:
        return values.expand(rows)
    if values.numel() != rows:
        raise ValueError(f"expected a scalar or one value per row ({rows}), got {values.numel()} values")
    return values


def _renormalised(weights: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    survivors = torch.where(kept, weights, 0.0)
    return survivors / survivors.sum(dim=-1, keepdim=True)


def _top_k_kept(keys: torch.Tensor, top_ks: torch.Tensor) -> torch.Tensor:
    """Each row's tokens whose key is at least the row's ``top_k``-th largest (ties with it kept);
    the whole row where ``top_k <= 0`` or ``>= V`` (SGLang's ``TOP_K_ALL``)."""
    vocab = keys.shape[-1]
    descending = torch.sort(keys, dim=-1, descending=True).values
    pivot = descending.gather(1, (top_ks.clamp(1, vocab) - 1).unsqueeze(1))
    return (keys >= pivot) | ((top_ks <= 0) | (top_ks >= vocab)).unsqueeze(1)


def _top_p_kept(keys: torch.Tensor, weights: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """Each row's tokens whose key is at least the pivot's: in descending key order, a token is
    needed while the weight above it is still below ``top_p`` of the row's weight, and the last
    needed token is the pivot (ties with it kept). The whole row where ``top_p >= 1``."""
    order = torch.argsort(keys, dim=-1, descending=True, stable=True)
    descending = weights.gather(1, order)
    running = torch.cumsum(descending, dim=-1)
    weight_above = running - descending
    pivot_place = (weight_above < top_ps.unsqueeze(1) * running[:, -1:]).sum(dim=-1, keepdim=True) - 1
    pivot = keys.gather(1, order.gather(1, pivot_place.clamp(min=0)))
    return (keys >= pivot) | (top_ps >= 1.0).unsqueeze(1)


def top_k_renorm_prob(probs: torch.Tensor, top_k: Union[torch.Tensor, int]) -> torch.Tensor:
    """Keep each row's ``top_k`` largest probabilities (every probability equal to the k-th
    largest too), zero the rest and renormalise. ``top_k <= 0`` or ``>= V`` (SGLang's
    ``TOP_K_ALL``) keeps the whole row. Returns a new float32 ``[rows, V]`` tensor."""
    probs = probs.float()
    top_ks = _per_row(top_k, probs.shape[0], torch.int64, probs.device)
    return _renormalised(probs, _top_k_kept(probs, top_ks))


def top_p_renorm_prob(probs: torch.Tensor, top_p: Union[torch.Tensor, float]) -> torch.Tensor:
    """Keep each row's smallest set of largest probabilities whose mass reaches ``top_p`` of the
    row's mass (every probability equal to the smallest kept one too), zero the rest and
    renormalise. ``top_p >= 1`` keeps the whole row. Returns a new float32 ``[rows, V]`` tensor."""
    probs = probs.float()
    top_ps = _per_row(top_p, probs.shape[0], torch.float32, probs.device)
    return _renormalised(probs, _top_p_kept(probs, probs, top_ps))


def filtered_probs(logits: torch.Tensor, temperature: Union[torch.Tensor, float], top_k: Union[torch.Tensor, int],
                   top_p: Union[torch.Tensor, float]) -> torch.Tensor:
    """The fused sampler's target distribution of each row of ``logits`` (``[rows, V]``), float64;
    ``temperature``, ``top_k``, ``top_p``: a scalar or one value per row.

    top-k keeps every token whose logit is at least the k-th largest logit (all when ``k <= 0`` or
    ``k >= V``); top-p orders the kept tokens by logit, descending, and keeps every token whose
    logit is at least the pivot's, the pivot being the last token above which the kept weight
    ``exp((logit - max) / temperature)`` is still below ``top_p`` times the kept total (all when
    ``top_p >= 1``); the result is that weight over the survivors, normalised. Ranking by logit is
    where this differs from :func:`top_k_renorm_prob` and :func:`top_p_renorm_prob` on
    ``softmax(logits / temperature)``: distinct logits may round to one probability.
    """
    x = logits.float()
    rows = x.shape[0]
    temperatures = _per_row(temperature, rows, torch.float64, x.device)
    weights = torch.exp((x.double() - x.max(dim=-1, keepdim=True).values.double()) / temperatures.unsqueeze(1))
    kept = _top_k_kept(x, _per_row(top_k, rows, torch.int64, x.device))
    kept &= _top_p_kept(torch.where(kept, x, float("-inf")), torch.where(kept, weights, 0.0),
                        _per_row(top_p, rows, torch.float32, x.device))
    return _renormalised(weights, kept)


def tree_speculative_sampling_target_only(predicts: torch.Tensor, accept_index: torch.Tensor,
                                          accept_token_num: torch.Tensor, candidates: torch.Tensor,
                                          retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
                                          retrive_next_sibling: torch.Tensor, uniform_samples: torch.Tensor,
                                          uniform_samples_for_final_sampling: torch.Tensor,
                                          target_probs: torch.Tensor, draft_probs: torch.Tensor,
                                          threshold_single: float = 1.0, threshold_acc: float = 1.0,
                                          deterministic: bool = True, *, strict_acceptance: bool) -> None:
    """SGLang's ``tree_speculative_sampling_target_only``, in place (same arguments, shapes and
    dtypes as its CUDA op; see :func:`sglang_eagle_ext.kernels.sampling.tree_speculative_sampling_target_only`
    for the full contract).

    From each request's root, the children of the current node are tried in sibling order; child
    ``c`` with target probability ``q`` (at the current node's row) adds ``q`` to a running sum
    ``acc`` and is accepted when ``coin <= acc / max(threshold_acc, 1e-9)`` or
    ``q >= threshold_single`` (``strict_acceptance``, SGLang 0.5.21+: ``q > 0`` and
    ``coin < acc / ...`` or ``q >= threshold_single``), ``coin`` being the current node's coin.
    Acceptance moves to ``c`` and resets ``acc``; a rejected child's ``q`` is written into
    ``draft_probs`` at its parent's row. The bonus token is drawn at the last accepted row from
    ``relu(target - draft)`` (the target alone after the maximum number of accepts): the first
    token whose running sum exceeds ``final_coin * sum``, else the last positive one, else ``V - 1``.
    ``deterministic`` is accepted for the op's signature: this op always is.
    """
    del deterministic
    if not (0.0 <= threshold_single <= 1.0 and 0.0 <= threshold_acc <= 1.0):
        raise ValueError(f"thresholds must lie in [0, 1]: threshold_single={threshold_single}, "
                         f"threshold_acc={threshold_acc}")
    bs, n = candidates.shape
    max_accepts = accept_index.shape[1] - 1
    vocab = target_probs.shape[-1]
    probs = target_probs.reshape(bs, n, vocab)
    rejected_mass = draft_probs.view(bs, n, vocab)  # a view: the writes are the op's output
    device = candidates.device
    requests = torch.arange(bs, device=device)
    # float32 scalars, as the kernels compute the test
    threshold_single_f32 = torch.tensor(threshold_single, dtype=torch.float32, device=device)
    threshold_acc_f32 = torch.tensor(max(threshold_acc, _MIN_THRESHOLD_ACC), dtype=torch.float32, device=device)

    node = torch.zeros(bs, dtype=torch.int64, device=device)  # the last accepted node (local index)
    coin = uniform_samples[:, 0].float()
    mass = torch.zeros(bs, dtype=torch.float32, device=device)
    accepted = torch.zeros(bs, dtype=torch.int64, device=device)
    child = retrive_next_token[:, 0].clone()
    accept_index[:, 0] = retrive_index[:, 0].to(accept_index.dtype)
    for _ in range(n):  # a request visits each node at most once: n steps end every walk (cyclic links too)
        walking = (child != -1) & (accepted < max_accepts)
        if not bool(walking.any()):
            break
        tried = child.clamp(min=0)
        token = candidates[requests, tried]
        q = probs[requests, node, token].float()
        mass = torch.where(walking, mass + q, mass)
        if strict_acceptance:
            passes = (q > 0) & ((coin < mass / threshold_acc_f32) | (q >= threshold_single_f32))
        else:
            passes = (coin <= mass / threshold_acc_f32) | (q >= threshold_single_f32)
        takes, rejects = walking & passes, walking & ~passes

        rejected_mass[requests[rejects], node[rejects], token[rejects]] = q[rejects]
        parent_row = retrive_index[requests, node]
        predicts[parent_row[takes]] = token[takes].to(predicts.dtype)
        accepted = accepted + takes.long()
        accept_index[requests[takes], accepted[takes]] = retrive_index[requests, tried][takes].to(accept_index.dtype)
        node = torch.where(takes, tried, node)
        coin = torch.where(takes, uniform_samples[requests, tried].float(), coin)
        mass = torch.where(takes, torch.zeros_like(mass), mass)
        child = torch.where(takes, retrive_next_token[requests, tried],
                            torch.where(rejects, retrive_next_sibling[requests, tried], child))
    accept_token_num.copy_(accepted.to(accept_token_num.dtype))

    target_row = probs[requests, node].float()
    walked_below_max = (accepted < max_accepts).unsqueeze(1)
    residual = torch.where(walked_below_max, (target_row - rejected_mass[requests, node]).clamp(min=0.0),
                           target_row).double()  # the draw in float64: no rounding moves a CDF step
    threshold = uniform_samples_for_final_sampling.double() * residual.sum(dim=-1)
    above = torch.cumsum(residual, dim=-1) > threshold.unsqueeze(1)
    positive = residual > 0
    first_above = above.int().argmax(dim=-1)
    last_positive = vocab - 1 - positive.flip(-1).int().argmax(dim=-1)
    bonus = torch.where(above.any(dim=-1), first_above,
                        torch.where(positive.any(dim=-1), last_positive, torch.full_like(first_above, vocab - 1)))
    predicts[retrive_index[requests, node]] = bonus.to(predicts.dtype)


def tree_sampling_from_logits(predicts: torch.Tensor, accept_index: torch.Tensor, accept_token_num: torch.Tensor,
                              candidates: torch.Tensor, retrive_index: torch.Tensor,
                              retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor,
                              uniform_samples: torch.Tensor, uniform_samples_for_final_sampling: torch.Tensor,
                              logits: torch.Tensor, temperatures: torch.Tensor, top_ks: torch.Tensor,
                              top_ps: torch.Tensor, threshold_single: float = 1.0, threshold_acc: float = 1.0, *,
                              strict_acceptance: bool = False) -> None:
    """:func:`sglang_eagle_ext.kernels.sampling.tree_sampling_from_logits`, in place (its arguments,
    less the tiling): :func:`tree_speculative_sampling_target_only` on :func:`filtered_probs` of
    every verify row, rounded to float32, each request's filters applied to its ``n`` rows."""
    bs, n = candidates.shape
    per_row = [values.reshape(-1).repeat_interleave(n) for values in (temperatures, top_ks, top_ps)]
    target_probs = filtered_probs(logits, *per_row).float().reshape(bs, n, -1)
    tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                          retrive_next_token, retrive_next_sibling, uniform_samples,
                                          uniform_samples_for_final_sampling, target_probs,
                                          torch.zeros_like(target_probs), threshold_single, threshold_acc,
                                          strict_acceptance=strict_acceptance)
