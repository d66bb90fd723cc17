"""Pure-PyTorch references for the tree kernels, written from the semantics, one request at a time.

They are slow on purpose: plain Python loops over requests and nodes, so that each line can be
checked against the prose in the kernels' docstrings. Tests compare the Triton tree-build and
greedy kernels with these (exact equality) and, on the GPU, with SGLang's own ops. The sampling ops
have their own references beside them (:mod:`sglang_eagle_ext.kernels.sampling.reference`,
vectorised, what a CPU-only host samples with): the sampling functions here are the independent
oracle the tests hold those to.

Every function mirrors the argument list and the in-place contract of the kernel it describes.
"""

from __future__ import annotations

import torch

from sglang_eagle_ext.kernels.tree_mask_modes import FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING


def parent_position(parent_list_row, selected_row, topk: int, t: int):
    """Local index of draft node ``t``'s parent (0 is the root), or None when it is not in the tree.

    Node ``t`` (1..n-1) is flat id ``selected_row[t-1]``; the k children of ``parent_list_row[j]``
    occupy flat ids ``[j*k, (j+1)*k)``; the parent is the first selected node with that flat id.
    """
    parent_block = int(selected_row[t - 1]) // topk
    if parent_block == 0:
        return 0
    if parent_block < 0 or parent_block >= len(parent_list_row):
        return None
    parent_flat_id = int(parent_list_row[parent_block])
    for q, flat_id in enumerate(selected_row.tolist()):
        if flat_id == parent_flat_id:
            return q + 1
    return None


def build_tree_reference(parent_list, selected_index, verified_seq_len, tree_mask, positions,
                         retrive_index, retrive_next_token, retrive_next_sibling,
                         topk: int, depth: int, draft_token_num: int, tree_mask_mode: int) -> None:
    """Reference for :func:`sglang_eagle_ext.kernels.tree_build.build_tree_kernel_efficient`."""
    bs, n = selected_index.shape[0], draft_token_num
    seq_lens = verified_seq_len.tolist()
    mask_bytes = tree_mask.view(torch.uint8)
    bytes_per_row = mask_bytes.numel() // (bs * n) if tree_mask_mode == QLEN_ONLY_BITPACKING else 0
    for b in range(bs):
        parents = [None] + [parent_position(parent_list[b], selected_index[b], topk, t) for t in range(1, n)]
        retrive_index[b] = b * n + torch.arange(n)
        retrive_next_token[b] = -1
        retrive_next_sibling[b] = -1
        for t in range(n - 1, 0, -1):  # descending: each child list ends up ascending
            p = parents[t]
            if p is None:
                continue
            retrive_next_sibling[b, t] = retrive_next_token[b, p]
            retrive_next_token[b, p] = t
        for t in range(n):
            chain = []
            c = t
            while c != 0 and c is not None and len(chain) < n - 1:
                chain.append(c)
                c = parents[c]
            positions[b * n + t] = seq_lens[b] + len(chain)
            row = [False] * n
            row[0] = True
            for c in chain:
                row[c] = True
            if tree_mask_mode == FULL_MASK:
                start = n * n * b + n * sum(seq_lens[:b]) + t * (seq_lens[b] + n) + seq_lens[b]
                tree_mask[start:start + n] = torch.tensor(row)
            elif tree_mask_mode == QLEN_ONLY:
                start = n * n * b + n * t
                tree_mask[start:start + n] = torch.tensor(row)
            else:
                packed = sum(1 << j for j, bit in enumerate(row) if bit)
                start = (b * n + t) * bytes_per_row
                for i in range(bytes_per_row):
                    mask_bytes[start + i] = (packed >> (8 * i)) & 0xFF


def _walk(bs, n, max_accepts, retrive_index, retrive_next_token, retrive_next_sibling, try_child):
    """The shared accept loop: ``try_child(b, row, child) -> bool`` decides one child.

    Returns per request the accepted flat rows, root first. Each node is visited at most once in
    a well-formed tree, so n steps cut corrupt (cyclic) links, as in the kernels.
    """
    paths = []
    for b in range(bs):
        path = [int(retrive_index[b, 0])]
        cur, steps = int(retrive_next_token[b, 0]), 0
        while cur != -1 and len(path) <= max_accepts and steps < n:
            steps += 1
            if try_child(b, path[-1], cur):
                path.append(int(retrive_index[b, cur]))
                cur = int(retrive_next_token[b, cur])
            else:
                cur = int(retrive_next_sibling[b, cur])
        paths.append(path)
    return paths


def verify_tree_greedy_reference(predicts, accept_index, accept_token_num, candidates,
                                 retrive_index, retrive_next_token, retrive_next_sibling,
                                 target_predict) -> None:
    """Reference for :func:`sglang_eagle_ext.kernels.verify_greedy.verify_tree_greedy`."""
    bs, n = candidates.shape
    flat_target = target_predict.reshape(-1)

    def try_child(b, row, child):
        return int(candidates[b, child]) == int(flat_target[row])

    for b, path in enumerate(_walk(bs, n, accept_index.shape[1] - 1, retrive_index,
                                        retrive_next_token, retrive_next_sibling, try_child)):
        for j, row in enumerate(path):
            accept_index[b, j] = row
            predicts[row] = flat_target[row]  # the accepted child's token, or the bonus token
        accept_token_num[b] = len(path) - 1


def sample_residual_reference(residual: torch.Tensor, coin: float) -> int:
    """Inverse-CDF draw in vocabulary order: the first index whose running sum exceeds
    ``coin * sum(residual)``; if rounding leaves none, the last positive index, else ``V - 1``."""
    w = residual.double()
    u = coin * float(w.sum())
    above = torch.nonzero(torch.cumsum(w, 0) > u)
    if len(above):
        return int(above[0])
    positive = torch.nonzero(w > 0)
    return int(positive[-1]) if len(positive) else residual.numel() - 1


def tree_sampling_reference(predicts, accept_index, accept_token_num, candidates, retrive_index,
                            retrive_next_token, retrive_next_sibling, uniform_samples,
                            uniform_samples_for_final_sampling, target_probs, draft_probs,
                            threshold_single: float = 1.0, threshold_acc: float = 1.0,
                            strict_acceptance: bool = False) -> None:
    """Reference for
    :func:`sglang_eagle_ext.kernels.sampling.tree_speculative_sampling_target_only`
    (``strict_acceptance``: SGLang 0.5.21+'s test, as in its ``sampling.cuh``)."""
    bs, n = candidates.shape
    max_accepts = accept_index.shape[1] - 1
    probs = target_probs.reshape(bs * n, -1)
    scratch = draft_probs.reshape(bs * n, -1)
    # Thresholds and sums are float32, as in the kernel.
    threshold_acc = torch.tensor(max(float(threshold_acc), 1e-9), dtype=torch.float32)
    threshold_single = torch.tensor(threshold_single, dtype=torch.float32)
    state = {}

    def try_child(b, row, child):
        prob_acc, coin = state[b]
        token = int(candidates[b, child])
        q = probs[row, token]
        prob_acc = prob_acc + q
        if strict_acceptance:
            accepted = bool(q > 0) and (bool(coin < prob_acc / threshold_acc) or bool(q >= threshold_single))
        else:
            accepted = bool(coin <= prob_acc / threshold_acc) or bool(q >= threshold_single)
        if accepted:
            state[b] = (torch.zeros((), dtype=torch.float32), uniform_samples[b, child])
            return True
        scratch[row, token] = q
        state[b] = (prob_acc, coin)
        return False

    for b in range(bs):
        state[b] = (torch.zeros((), dtype=torch.float32), uniform_samples[b, 0])
    for b, path in enumerate(_walk(bs, n, max_accepts, retrive_index, retrive_next_token,
                                        retrive_next_sibling, try_child)):
        for j, row in enumerate(path[:-1]):
            accept_index[b, j] = row
            predicts[row] = candidates.reshape(-1)[path[j + 1]]
        last = path[-1]
        accept_index[b, len(path) - 1] = last
        accept_token_num[b] = len(path) - 1
        residual = probs[last] if len(path) - 1 == max_accepts else torch.relu(probs[last] - scratch[last])
        predicts[last] = sample_residual_reference(residual, float(uniform_samples_for_final_sampling[b]))


def filtered_probs_reference(logits_row: torch.Tensor, temperature: float, top_k: int,
                             top_p: float) -> torch.Tensor:
    """Float64 target distribution of one row under the fused sampler's semantics.

    top-k keeps every token whose logit is >= the k-th largest logit (all when ``k <= 0`` or
    ``k >= V``); top-p sorts the kept tokens by logit, descending, and keeps every token whose
    logit is >= the logit at the first place where the running sum of
    ``exp((logit - max) / temperature)`` reaches ``top_p`` times the kept total (all when
    ``top_p >= 1``); the result is that weight over the survivors, normalised.
    """
    x = logits_row.float()
    e = torch.exp((x.double() - float(x.max())) / temperature)
    vocab = x.numel()
    kept = torch.ones(vocab, dtype=torch.bool)
    if 0 < top_k < vocab:
        kept &= x >= torch.topk(x, top_k).values[-1]
    if top_p < 1.0:
        order = torch.argsort(torch.where(kept, x, torch.tensor(float("-inf"))), descending=True, stable=True)
        running = torch.cumsum(torch.where(kept, e, 0.0)[order], 0)
        cut = int(torch.nonzero(running >= top_p * running[-1])[0])
        kept &= x >= x[order[cut]]
    w = torch.where(kept, e, 0.0)
    return w / w.sum()


def fused_tree_sampling_reference(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                  retrive_next_token, retrive_next_sibling, uniform_samples,
                                  uniform_samples_for_final_sampling, logits, temperatures, top_ks,
                                  top_ps, threshold_single: float = 1.0, threshold_acc: float = 1.0,
                                  strict_acceptance: bool = False) -> None:
    """Reference for :func:`sglang_eagle_ext.kernels.sampling.tree_sampling_from_logits`:
    the target-only tree sampler applied to :func:`filtered_probs_reference` of every row."""
    bs, n = candidates.shape
    rows = [filtered_probs_reference(logits[r], float(temperatures[r // n]), int(top_ks[r // n]),
                                     float(top_ps[r // n])).float() for r in range(bs * n)]
    target_probs = torch.stack(rows).reshape(bs, n, -1)
    tree_sampling_reference(predicts, accept_index, accept_token_num, candidates, retrive_index,
                            retrive_next_token, retrive_next_sibling, uniform_samples,
                            uniform_samples_for_final_sampling, target_probs,
                            torch.zeros_like(target_probs), threshold_single, threshold_acc, strict_acceptance)
