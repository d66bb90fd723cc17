"""Greedy tree verification: accept the longest path whose draft tokens equal the target's argmax.

Two entry points:

* :func:`verify_tree_greedy`: drop-in for ``sgl_kernel.verify_tree_greedy`` (takes the argmax).
* :func:`verify_tree_greedy_from_logits`: argmax over the target logits and the tree walk in one
  launch, reading each needed row once (see its docstring for the two launch plans).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch
import triton
import triton.language as tl

from sglang_eagle_ext.kernels import workspace
from sglang_eagle_ext.kernels.launch import Launcher
from sglang_eagle_ext.kernels.device import order_key32, pick, tree_entry, write_accept_slot
from sglang_eagle_ext.kernels.verify_shapes import block_n, check_verify_logits


@triton.jit
def _greedy_walk(b, n, max_accepts, predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr,
                 retrive_index_ptr, next_token_ptr, next_sibling_ptr, targets, nodes,
                 logits_ptr, stride_row, vocab, chunk, keys_ptr, tickets_ptr, part, parts, max_polls,
                 LAZY: tl.constexpr, BLOCK_V: tl.constexpr):
    """Walk request ``b``: at each node take the first child (in sibling order) whose token equals
    the target's token at that node; stop at a leaf, when none matches, or after ``max_accepts``.

    The target token at a node is ``targets[node]``, or with ``LAZY`` the argmax of the node's
    logits row, computed when the walk reaches the node (rows off the accepted path are never
    read) by the ``parts`` programs of the request together (:func:`_path_row_argmax`). They all
    walk the same path; the last one, ``part == parts - 1``, writes the outputs (in the
    interpreter, which runs programs one after another, it is the one that finds every part
    arrived: the tests check the shared reduction through it).
    """
    levels = max_accepts + 1
    writer = part == parts - 1
    last_row = tree_entry(retrive_index_ptr, b, n, 0)
    if LAZY:
        target = _path_row_argmax(logits_ptr + last_row * stride_row, vocab, chunk, part, parts,
                                  keys_ptr + b * levels, tickets_ptr + b * (levels + 1), max_polls, BLOCK_V)
    else:
        target = pick(targets, nodes, 0)
    if writer:
        write_accept_slot(accept_index_ptr, b, max_accepts, 0, last_row)
    accepted = tl.zeros((), dtype=tl.int32)
    cur = tree_entry(next_token_ptr, b, n, 0)
    steps = tl.zeros((), dtype=tl.int32)
    # Each node is visited at most once in a well-formed tree: n steps cut corrupt (cyclic) links.
    while (cur != -1) & (accepted < max_accepts) & (steps < n):
        if tree_entry(cand_ptr, b, n, cur) == target:
            if writer:
                tl.store(predicts_ptr + last_row, target.to(tl.int32))
            accepted += 1
            last_row = tree_entry(retrive_index_ptr, b, n, cur)
            if writer:
                write_accept_slot(accept_index_ptr, b, max_accepts, accepted, last_row)
            if LAZY:
                target = _path_row_argmax(logits_ptr + last_row * stride_row, vocab, chunk, part, parts,
                                          keys_ptr + b * levels + accepted,
                                          tickets_ptr + b * (levels + 1) + accepted, max_polls, BLOCK_V)
            else:
                target = pick(targets, nodes, cur)
            cur = tree_entry(next_token_ptr, b, n, cur)
        else:
            cur = tree_entry(next_sibling_ptr, b, n, cur)
        steps += 1
    if writer:
        tl.store(accept_num_ptr + b, accepted)
        tl.store(predicts_ptr + last_row, target.to(tl.int32))


@triton.jit
def _verify_greedy_kernel(predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr, retrive_index_ptr,
                          next_token_ptr, next_sibling_ptr, target_ptr, n, max_accepts,
                          BLOCK_N: tl.constexpr):
    b = tl.program_id(0)
    nodes = tl.arange(0, BLOCK_N)
    targets = tl.load(target_ptr + b.to(tl.int64) * n + nodes, mask=nodes < n, other=-1)
    _greedy_walk(b, n, max_accepts, predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr,
                 retrive_index_ptr, next_token_ptr, next_sibling_ptr, targets, nodes,
                 target_ptr, 0, 0, 0, target_ptr, target_ptr, 0, 1, 0, LAZY=False, BLOCK_V=16)


@triton.jit
def _argmax_key(value, index):
    """int64 key whose maximum is torch.argmax's answer: larger value first, then smaller index;
    NaN above everything (torch treats NaN as the maximum); -0.0 equal to +0.0."""
    ordered = tl.where(value != value, 0x7FFFFFFF, order_key32(value))
    return (ordered.to(tl.int64) << 32) | (0x7FFFFFFF - index).to(tl.int64)


@triton.jit
def _key_token(key):
    return (0x7FFFFFFF - (key & 0xFFFFFFFF)).to(tl.int64)


@triton.jit
def _greedy_from_logits_kernel(logits_ptr, stride_row, vocab, chunk, keys_ptr, tickets_ptr,
                               predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr,
                               retrive_index_ptr, next_token_ptr, next_sibling_ptr,
                               n, max_accepts, programs_per_request,
                               BLOCK_V: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    start = tl.program_id(1) * chunk
    best, best_index = _lane_argmax(logits_ptr + row.to(tl.int64) * stride_row, start,
                                    tl.minimum(start + chunk, vocab), BLOCK_V)
    tl.atomic_max(keys_ptr + row, tl.max(_argmax_key(best, best_index), axis=0))

    b = row // n
    tl.debug_barrier()
    ticket = tl.atomic_add(tickets_ptr + b, 1)
    if ticket == programs_per_request - 1:
        nodes = tl.arange(0, BLOCK_N)
        keys = tl.atomic_xchg(keys_ptr + b * n + nodes, -0x7FFFFFFFFFFFFFFF - 1, mask=nodes < n)
        tl.atomic_xchg(tickets_ptr + b, 0)
        _greedy_walk(b, n, max_accepts, predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr,
                     retrive_index_ptr, next_token_ptr, next_sibling_ptr, _key_token(keys), nodes,
                     logits_ptr, stride_row, vocab, chunk, keys_ptr, tickets_ptr, 0, 1, 0,
                     LAZY=False, BLOCK_V=BLOCK_V)


@triton.jit
def _lane_argmax(row_ptr, start, end, BLOCK_V: tl.constexpr):
    """Per lane: the first maximum over the lane's indices in ``[start, end)`` (NaN counts as the
    maximum), as ``(value, index)`` vectors; reduce them with :func:`_argmax_key`."""
    lanes = tl.arange(0, BLOCK_V)
    best = tl.full((BLOCK_V,), float("-inf"), tl.float32)
    best_index = start + lanes
    for offset in range(start, end, BLOCK_V):
        index = offset + lanes
        x = tl.load(row_ptr + index, mask=index < end, other=float("-inf")).to(tl.float32)
        take = (x > best) | ((x != x) & (best == best))
        best = tl.where(take, x, best)
        best_index = tl.where(take, index, best_index)
    return best, best_index


@triton.jit
def _path_row_argmax(row_ptr, vocab, chunk, part, parts, key_ptr, ticket_ptr, max_polls,
                     BLOCK_V: tl.constexpr):
    """argmax of one logits row, shared by ``parts`` programs: program ``part`` reduces the slice
    ``[part*chunk, (part+1)*chunk)`` into the row's key slot and arrival ticket, then waits (at
    most ``max_polls`` polls) until every part has arrived and reads the row's key. A program
    that waits longer, because the others are not resident on the GPU, reduces the whole row
    itself: same answer, and no program can wait for ever."""
    start = part * chunk
    best, best_index = _lane_argmax(row_ptr, start, tl.minimum(start + chunk, vocab), BLOCK_V)
    key = tl.max(_argmax_key(best, best_index), axis=0)
    if parts > 1:
        tl.atomic_max(key_ptr, key)
        tl.debug_barrier()
        arrived = tl.atomic_add(ticket_ptr, 1) + 1
        polls = tl.zeros((), dtype=tl.int32)
        while (arrived < parts) & (polls < max_polls):
            arrived = tl.atomic_add(ticket_ptr, 0)
            polls += 1
        if arrived >= parts:
            key = tl.atomic_max(key_ptr, key)  # the old value: every part's maximum
        else:
            best, best_index = _lane_argmax(row_ptr, 0, vocab, BLOCK_V)
            key = tl.max(_argmax_key(best, best_index), axis=0)
    return _key_token(key)


@triton.jit
def _greedy_lazy_kernel(logits_ptr, stride_row, vocab, chunk, keys_ptr, tickets_ptr, predicts_ptr,
                        accept_index_ptr, accept_num_ptr, cand_ptr, retrive_index_ptr, next_token_ptr,
                        next_sibling_ptr, n, max_accepts, max_polls,
                        BLOCK_V: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_LEVELS: tl.constexpr):
    # A request's parts are adjacent in launch order (part = axis 0): the GPU starts blocks in that
    # order, so when not all fit at once the first requests finish and free their SMs for the rest.
    part = tl.program_id(0)
    parts = tl.num_programs(0)
    b = tl.program_id(1)
    nodes = tl.arange(0, BLOCK_N)
    _greedy_walk(b, n, max_accepts, predicts_ptr, accept_index_ptr, accept_num_ptr, cand_ptr,
                 retrive_index_ptr, next_token_ptr, next_sibling_ptr, nodes, nodes,
                 logits_ptr, stride_row, vocab, chunk, keys_ptr, tickets_ptr, part, parts, max_polls,
                 LAZY=True, BLOCK_V=BLOCK_V)
    if parts > 1:
        # The request's last program out puts its key slots and tickets back (workspace contract).
        levels = max_accepts + 1
        tl.debug_barrier()
        if tl.atomic_add(tickets_ptr + b * (levels + 1) + levels, 1) == parts - 1:
            slots = tl.arange(0, BLOCK_LEVELS)
            tl.atomic_xchg(keys_ptr + b * levels + slots, -0x7FFFFFFFFFFFFFFF - 1, mask=slots < levels)
            tl.atomic_xchg(tickets_ptr + b * (levels + 1) + slots, 0, mask=slots < levels + 1)


_verify_from_targets = Launcher(_verify_greedy_kernel)
_verify_split = Launcher(_greedy_from_logits_kernel)
_verify_lazy = Launcher(_greedy_lazy_kernel)

# The lazy plan pays a hand-off between programs at each level; it is chosen where the rows it
# skips would take longer to read than that hand-off: more than this many bytes per level (the
# measured hand-off: benchmarks/results/tree_kernels_tuning.md).
LAZY_SKIPPED_BYTES_PER_LEVEL = 12_000_000


def _multiprocessors(device: torch.device) -> int:
    """SMs of a CUDA device; a small stand-in elsewhere (the interpreter)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 8


# The kernels with one shape's compile-time constants bound, once (keyword handling costs host time).
@functools.lru_cache(maxsize=None)
def _specialised_walk(n: int):
    return _verify_from_targets.specialise(BLOCK_N=block_n(n), num_warps=1)


@functools.lru_cache(maxsize=None)
def _specialised_lazy(n: int, levels: int, block_v: int, num_warps: int):
    return _verify_lazy.specialise(BLOCK_V=block_v, BLOCK_N=block_n(n),
                                   BLOCK_LEVELS=triton.next_power_of_2(levels + 1), num_warps=num_warps)


@functools.lru_cache(maxsize=None)
def _specialised_split(n: int, block_v: int, num_warps: int):
    return _verify_split.specialise(BLOCK_V=block_v, BLOCK_N=block_n(n), num_warps=num_warps)


def verify_tree_greedy(predicts: torch.Tensor, accept_index: torch.Tensor, accept_token_num: torch.Tensor,
                       candidates: torch.Tensor, retrive_index: torch.Tensor,
                       retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor,
                       target_predict: torch.Tensor) -> None:
    """Drop-in for ``sgl_kernel.verify_tree_greedy``: greedy tree acceptance, in place.

    Shapes (``bs`` requests, ``n`` verify rows each, ``S+1 = accept_index.shape[1]``):

    * ``predicts`` (out): ``[bs*n]`` int32; ``predicts[r]`` = token emitted after verify row r,
      written only for rows on the accepted path (others keep their value).
    * ``accept_index`` (out): ``[bs, S+1]`` int32, pre-filled -1 by the caller: flat rows of the
      accepted path, root first.
    * ``accept_token_num`` (out): ``[bs]`` int32, accepted draft tokens.
    * ``candidates``: ``[bs, n]`` int64 tokens of the verify rows (column 0 = bonus token).
    * ``retrive_index`` / ``retrive_next_token`` / ``retrive_next_sibling``: ``[bs, n]`` int64 as
      :func:`~sglang_eagle_ext.kernels.tree_build.build_tree_kernel_efficient` writes them
      (``retrive_index[b, t] == b*n + t``).
    * ``target_predict``: ``[bs, n]`` int64, the target's argmax at every verify row.

    Semantics: starting at the root, take the first child (following next-sibling links) whose
    candidate equals the target token at the current node, up to S times; ``predicts`` gets the
    target token at every accepted node, including the last (the bonus token).
    """
    bs, n = candidates.shape
    _specialised_walk(n).launch((bs,), predicts, accept_index, accept_token_num, candidates, retrive_index,
                         retrive_next_token, retrive_next_sibling, target_predict, n, accept_index.shape[1] - 1)


def verify_tree_greedy_from_logits(predicts: torch.Tensor, accept_index: torch.Tensor,
                                   accept_token_num: torch.Tensor, candidates: torch.Tensor,
                                   retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
                                   retrive_next_sibling: torch.Tensor, logits: torch.Tensor, *,
                                   lazy: Optional[bool] = None, block_v: Optional[int] = None,
                                   target_programs: Optional[int] = None, num_warps: Optional[int] = None,
                                   max_polls: Optional[int] = None) -> None:
    """:func:`verify_tree_greedy` on ``target_predict = logits.argmax(-1)``, fused in one launch.

    ``logits``: ``[bs*n, V]`` float32, bfloat16 or float16 with unit stride along V. The argmax is
    exactly ``torch.argmax``'s: the first index of the maximum, NaN counting as the maximum.

    Two launch plans, same results:

    * lazy (default when the rows off any path, ``bs*(n-S-1)`` of them, hold more than
      ``LAZY_SKIPPED_BYTES_PER_LEVEL`` bytes per level): the programs of a request walk the tree together and
      reduce a row only when the walk reaches its node, so only the accepted path's rows are read
      (at most ``S+1`` of a request's ``n``). Each path row is split over ``parts`` programs
      (about ``target_programs / bs``, default: two programs per SM in all) that meet at a
      per-row key slot and arrival ticket of the per-device
      :mod:`~sglang_eagle_ext.kernels.workspace`; a program that waits more than ``max_polls``
      polls reduces the row alone, so the plan cannot hang when not all programs are resident.
    * split: every row is cut into vocabulary slices over about ``target_programs`` programs
      (default: four per SM); each reduces its slice to a packed (value, index) key and ``atomic_max``-es
      it into the row's workspace slot; the request's last program to arrive (an arrival ticket)
      reads and resets its slots and walks the tree.

    ``block_v`` (vocabulary tile), ``target_programs`` and ``num_warps`` tune the plans (defaults:
    the best of a sweep over the benchmark's shapes, ``benchmarks/results/tree_kernels_tuning.md``);
    the grid depends on the batch, the compiled kernels do not.
    """
    bs, n = candidates.shape
    check_verify_logits("verify_tree_greedy_from_logits", logits, bs, n)
    vocab = logits.shape[1]
    kernel, grid, leading, trailing = _greedy_plan(bs, n, vocab, logits.element_size(), accept_index.shape[1] - 1,
                                                   logits.device, lazy, block_v, target_programs, num_warps,
                                                   max_polls)
    kernel.launch(grid, logits, logits.stride(0), *leading, predicts, accept_index, accept_token_num, candidates,
                  retrive_index, retrive_next_token, retrive_next_sibling, *trailing)


@functools.lru_cache(maxsize=256)
def _greedy_plan(bs: int, n: int, vocab: int, element_size: int, max_accepts: int, device: torch.device,
                 lazy: Optional[bool], block_v: Optional[int], target_programs: Optional[int],
                 num_warps: Optional[int], max_polls: Optional[int]):
    """The launch of :func:`verify_tree_greedy_from_logits` for one call shape, worked out once
    (host time counts at small batches): ``(specialised kernel, grid, arguments after the logits'
    stride, arguments after the tree's)``."""
    rows = bs * n
    levels = max_accepts + 1
    if lazy is None:
        lazy = bs * (n - levels) * vocab * element_size > levels * LAZY_SKIPPED_BYTES_PER_LEVEL
    if lazy:
        block_v = block_v or 2048
        slices = triton.cdiv(vocab, block_v)
        parts = max(1, min(slices, (target_programs or 2 * _multiprocessors(device)) // bs))
        chunk = triton.cdiv(slices, parts) * block_v
        parts = triton.cdiv(vocab, chunk)
        return (_specialised_lazy(n, levels, block_v, num_warps or 16), (parts, bs),
                (vocab, chunk, workspace.argmax_keys(device, bs * levels),
                 workspace.tickets(device, bs * (levels + 1))),
                (n, max_accepts, max_polls or (1 << 16 if device.type == "cuda" else 2)))
    block_v = block_v or 1024
    slices = triton.cdiv(vocab, block_v)
    splits = max(1, min(slices, triton.cdiv(target_programs or 4 * _multiprocessors(device), rows)))
    chunk = triton.cdiv(slices, splits) * block_v
    splits = triton.cdiv(vocab, chunk)
    return (_specialised_split(n, block_v, num_warps or 8), (rows, splits),
            (vocab, chunk, workspace.argmax_keys(device, rows), workspace.tickets(device, bs)),
            (n, max_accepts, n * splits))
