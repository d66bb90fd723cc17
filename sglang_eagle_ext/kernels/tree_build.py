"""Build the verify tree of an EAGLE draft round: attention mask, positions and traversal links.

One Triton program per request builds the whole ``n x n`` tree in registers: parent lookup, child
and sibling links and the ancestor closure are all vector operations over the request's ``n``
nodes, so there is one launch, no host synchronisation, and no recompilation for a new batch size
(the tree's sizes, the mask mode and the fill switches are compile-time constants; none depends
on the batch size).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch
import triton
import triton.language as tl

from sglang_eagle_ext.kernels.launch import Launcher
from sglang_eagle_ext.kernels.tree_mask_modes import (
    FULL_MASK,
    QLEN_ONLY,
    QLEN_ONLY_BITPACKING,
    bitpacked_bytes_per_row,
)

MAX_DRAFT_TOKENS = 256  # one program holds n x n tiles in registers


@triton.jit
def _build_tree_kernel(
    parent_list_ptr, selected_ptr, seq_len_ptr, mask_ptr, positions_ptr,
    retrive_index_ptr, next_token_ptr, next_sibling_ptr, bonus_ptr, draft_in_ptr, draft_out_ptr,
    TOPK: tl.constexpr, PARENT_WIDTH: tl.constexpr, N: tl.constexpr, MASK_MODE: tl.constexpr,
    BYTES_PER_ROW: tl.constexpr, FILL_PREFIX: tl.constexpr, WRITE_DRAFT_TOKENS: tl.constexpr,
    SLAB_OUTPUTS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_PREFIX: tl.constexpr,
):
    if SLAB_OUTPUTS:
        # build_eagle_tree's outputs are the slabs of one [5, bs, n] int64 buffer: one pointer
        # stands for five (each pointer argument costs host time at launch).
        slab = tl.num_programs(0).to(tl.int64) * N
        next_token_ptr = retrive_index_ptr + slab
        next_sibling_ptr = retrive_index_ptr + 2 * slab
        positions_ptr = retrive_index_ptr + 3 * slab
        draft_out_ptr = retrive_index_ptr + 4 * slab
    b = tl.program_id(0)
    row = tl.program_id(1)  # programs (b, t) pre-fill row t's prefix columns; (b, 0) builds the tree
    mask_ptr = mask_ptr.to(tl.pointer_type(tl.uint8))  # bool, uint8 or bit-packed words: bytes here
    seq_len = tl.load(seq_len_ptr + b)

    # Start of request b's FULL_MASK block: n*n*b + n*sum(seq_len[:b]), summed here, not on the host.
    prefix_total = tl.zeros((), dtype=tl.int64)
    if MASK_MODE == 0:
        for start in range(0, b, BLOCK_B):
            ids = start + tl.arange(0, BLOCK_B)
            prefix_total += tl.sum(tl.load(seq_len_ptr + ids, mask=ids < b, other=0).to(tl.int64))
    row_stride = seq_len + N
    block_start = N * N * b.to(tl.int64) + N * prefix_total

    if FILL_PREFIX:
        row_start = block_start + row * row_stride
        for col in range(0, seq_len, BLOCK_PREFIX):
            cols = col + tl.arange(0, BLOCK_PREFIX)
            tl.store(mask_ptr + row_start + cols, tl.full((BLOCK_PREFIX,), 1, tl.uint8), mask=cols < seq_len)

    if row == 0:
        nodes = tl.arange(0, BLOCK_N)
        is_draft = (nodes >= 1) & (nodes < N)
        in_tree = nodes < N
        # Node t >= 1 is flat id selected[t-1]; its parent's flat id is parent_list[flat // TOPK].
        flat_id = tl.load(selected_ptr + b * (N - 1) + nodes - 1, mask=is_draft, other=-1)
        parent_block = flat_id // TOPK
        child_of_root = is_draft & (parent_block == 0)
        has_parent_block = is_draft & (parent_block > 0) & (parent_block < PARENT_WIDTH)
        parent_flat = tl.load(parent_list_ptr + b * PARENT_WIDTH + parent_block, mask=has_parent_block, other=-1)
        # Parent = first selected node (column) whose flat id matches; -1 when absent ("invalid tree").
        match = (parent_flat[:, None] == flat_id[None, :]) & has_parent_block[:, None] & is_draft[None, :]
        first_match = tl.min(tl.where(match, nodes[None, :], BLOCK_N), axis=1)
        parent = tl.where(child_of_root, 0, tl.where(first_match < BLOCK_N, first_match, -1))

        # Children in ascending order: first child = smallest child, next sibling = next larger one.
        is_child = parent[None, :] == nodes[:, None]
        first_child = tl.min(tl.where(is_child, nodes[None, :], BLOCK_N), axis=1)
        same_parent = (parent[None, :] == parent[:, None]) & (nodes[None, :] > nodes[:, None]) & (parent[:, None] >= 0)
        next_sibling = tl.min(tl.where(same_parent, nodes[None, :], BLOCK_N), axis=1)
        links = b * N + nodes
        tl.store(retrive_index_ptr + links, links.to(tl.int64), mask=in_tree)
        tl.store(next_token_ptr + links, tl.where(first_child < BLOCK_N, first_child, -1).to(tl.int64), mask=in_tree)
        tl.store(next_sibling_ptr + links, tl.where(next_sibling < BLOCK_N, next_sibling, -1).to(tl.int64),
                 mask=in_tree)

        # Ancestor closure: walk every row up its parent chain at once; stop at the root or at a
        # missing parent; a chain holds at most n-1 nodes, which also cuts cycles of corrupt input.
        in_chain = (nodes[:, None] == nodes[None, :]) & is_draft[:, None]
        depth = is_draft.to(tl.int32)
        cur = tl.where(is_draft, parent, 0)
        active = cur > 0
        steps = tl.full((), 1, tl.int32)
        while (tl.max(active.to(tl.int32), axis=0) > 0) & (steps < N - 1):
            in_chain |= (cur[:, None] == nodes[None, :]) & active[:, None]
            depth += active.to(tl.int32)
            grand_parent = tl.sum(tl.where(nodes[None, :] == cur[:, None], parent[None, :], 0), axis=1)
            cur = tl.where(active, grand_parent, cur)
            active = cur > 0
            steps += 1
        tl.store(positions_ptr + links, seq_len + depth.to(tl.int64), mask=in_tree)

        bits = in_chain | (nodes[None, :] == 0)
        if MASK_MODE == 2:
            packed = tl.reshape(bits.to(tl.int32), (BLOCK_N, BYTES_PER_ROW, 8))
            weights = tl.reshape(1 << (nodes % 8), (1, BYTES_PER_ROW, 8))
            row_bytes = tl.sum(packed * weights, axis=2).to(tl.uint8)
            byte_ids = tl.arange(0, BYTES_PER_ROW)
            offsets = (b * N + nodes)[:, None] * BYTES_PER_ROW + byte_ids[None, :]
            tl.store(mask_ptr + offsets, row_bytes, mask=in_tree[:, None])
        else:
            if MASK_MODE == 0:
                offsets = block_start + nodes[:, None] * row_stride + seq_len + nodes[None, :]
            else:
                offsets = N * N * b + nodes[:, None] * N + nodes[None, :]
            tl.store(mask_ptr + offsets, bits.to(tl.uint8), mask=in_tree[:, None] & in_tree[None, :])

        if WRITE_DRAFT_TOKENS:
            drafts = tl.load(draft_in_ptr + b * (N - 1) + nodes - 1, mask=is_draft)
            bonus = tl.load(bonus_ptr + b)
            tl.store(draft_out_ptr + links, tl.where(nodes == 0, bonus, drafts), mask=in_tree)


_build_tree = Launcher(_build_tree_kernel)


@functools.lru_cache(maxsize=None)
def _specialised(topk: int, parent_width: int, n: int, mode: int, fill_prefix: bool, write_drafts: bool,
                 slab_outputs: bool = False):
    """The kernel with one tree shape's compile-time constants bound (once: host time counts).
    The tree's sizes are constants too: fixed for a server's run, and each runtime argument costs
    host time at every launch."""
    if n > MAX_DRAFT_TOKENS:
        raise ValueError(f"at most {MAX_DRAFT_TOKENS} draft tokens per request, got {n}")
    block_n = max(8, triton.next_power_of_2(n))
    return _build_tree.specialise(
        TOPK=topk, PARENT_WIDTH=parent_width, N=n, MASK_MODE=mode,
        BYTES_PER_ROW=bitpacked_bytes_per_row(n) if mode == QLEN_ONLY_BITPACKING else 1,
        FILL_PREFIX=fill_prefix, WRITE_DRAFT_TOKENS=write_drafts, SLAB_OUTPUTS=slab_outputs, BLOCK_N=block_n,
        BLOCK_B=1024, BLOCK_PREFIX=1024, num_warps=4 if block_n <= 64 else 8)


def _launch(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
            retrive_next_token, retrive_next_sibling, topk, n, mode, fill_prefix,
            bonus_tokens=None, draft_tokens=None, draft_tokens_out=None, slab_outputs=False):
    """Pointers a compile-time switch leaves unused are passed as None (no launch cost)."""
    _specialised(topk, parent_list.shape[1], n, mode, fill_prefix, bonus_tokens is not None, slab_outputs).launch(
        (selected_index.shape[0], n if fill_prefix else 1),
        parent_list, selected_index, verified_seq_len, tree_mask, positions,
        retrive_index, retrive_next_token, retrive_next_sibling, bonus_tokens, draft_tokens, draft_tokens_out)


def build_tree_kernel_efficient(parent_list: torch.Tensor, selected_index: torch.Tensor,
                                verified_seq_len: torch.Tensor, tree_mask: torch.Tensor,
                                positions: torch.Tensor, retrive_index: torch.Tensor,
                                retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor,
                                topk: int, depth: int, draft_token_num: int,
                                tree_mask_mode: int) -> None:
    """Drop-in for ``sgl_kernel.build_tree_kernel_efficient``: fill a verify tree in place.

    Shapes (``bs`` requests, ``k = topk``, ``S = depth`` draft steps, ``n = draft_token_num``):

    * ``parent_list``: ``[bs, k*(S-1)+1]`` int64 (``[bs, 0]`` when S=1). Entry j is the flat id of
      the node whose k children hold flat ids ``[j*k, (j+1)*k)``; entry 0 is the root.
    * ``selected_index``: ``[bs, n-1]`` int64, ascending, values in ``[0, k + (S-1)*k*k)``:
      draft node ``t`` (1..n-1) is flat id ``selected_index[b, t-1]``.
    * ``verified_seq_len``: ``[bs]`` int64, committed length of each request.
    * ``tree_mask`` (out): bool or uint8 in the layout of ``tree_mask_mode`` (see
      :mod:`~sglang_eagle_ext.kernels.tree_mask_modes`); bit-packed: any integer dtype, zero-filled
      or not (every byte of each row is written). FULL_MASK prefix columns are not written.
    * ``positions`` (out): ``[bs*n]`` int64, ``seq_len[b] + depth(t)`` (root depth 0).
    * ``retrive_index`` (out): ``[bs, n]`` int64, ``b*n + t``.
    * ``retrive_next_token`` / ``retrive_next_sibling`` (out): ``[bs, n]`` int64, first child
      (smallest local index) and next sibling (next larger index) or -1. Every entry is written,
      so the -1 pre-fill SGLang does is not needed.

    Semantics: the parent of node t is the root when ``selected_index[b, t-1] // k == 0``, else
    the first selected node whose flat id equals ``parent_list[b, selected_index[b, t-1] // k]``.
    Row t of the mask is set at the root and at every node of t's ancestor chain (t included).
    Invalid trees (a selected node whose parent is not selected, from score ties or NaN): the
    node gets no link and its chain stops at the missing parent. SGLang's CUDA op prints a
    warning and skips the link too, but reads past the request's row in its chain walk, so
    masks and positions of such nodes are only defined here. ``depth`` is accepted for
    signature compatibility; the chain length is bounded by n-1.
    """
    del depth  # the parent list's width already says how many steps there were
    _launch(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
            retrive_next_token, retrive_next_sibling, int(topk), int(draft_token_num), int(tree_mask_mode),
            False)


def build_eagle_tree(bonus_tokens: torch.Tensor, parent_list: torch.Tensor,
                     top_scores_index: torch.Tensor, draft_tokens: torch.Tensor,
                     seq_lens: torch.Tensor, seq_lens_sum: int, topk: int, spec_steps: int,
                     num_verify_tokens: int, tree_mask_mode: int = FULL_MASK,
                     tree_mask_buf: Optional[torch.Tensor] = None,
                     position_buf: Optional[torch.Tensor] = None, fill_prefix_mask: bool = True):
    """Replacement for SGLang's ``build_tree_kernel_efficient`` Python wrapper, in one launch.

    Arguments as in SGLang (``bonus_tokens`` is 0.5.11's ``verified_id``: ``[bs]``;
    ``draft_tokens``: ``[bs, n-1]``; ``seq_lens``: ``[bs]`` int64; ``seq_lens_sum`` its sum).
    Returns ``(tree_mask, positions, retrieve_index, retrieve_next_token, retrieve_next_sibling,
    draft_tokens)`` with SGLang's shapes, dtypes and layouts: ``retrieve_*`` are three ``[bs, n]``
    slabs of one int64 buffer (as SGLang's) and ``draft_tokens`` is the flat ``[bs*n]``
    ``[bonus, drafts...]`` per request.

    Differences in how, not what: SGLang fills the whole mask with True, pre-fills the links with
    -1 and concatenates the draft tokens in separate launches; here the kernel writes the FULL_MASK
    prefix columns itself (when ``fill_prefix_mask``), every link entry, and the token list, so
    the buffers are allocated uninitialised. A given ``tree_mask_buf`` is written in place
    (bit-packed rows: all bytes of each row are written).
    """
    bs, n = seq_lens.shape[0], int(num_verify_tokens)
    mode = int(tree_mask_mode)
    # new_empty (dtype and device from seq_lens) parses fewer arguments than torch.empty: every
    # allocation and view costs host time, more than the kernel's GPU time.
    if tree_mask_buf is not None:
        tree_mask = tree_mask_buf
    elif mode == FULL_MASK:
        tree_mask = seq_lens.new_empty((seq_lens_sum * n + n * n * bs,), dtype=torch.bool)
    elif mode == QLEN_ONLY:
        tree_mask = seq_lens.new_empty((n * n * bs,), dtype=torch.bool)
    else:
        dtype = {1: torch.uint8, 2: torch.uint16, 4: torch.uint32}[bitpacked_bytes_per_row(n)]
        tree_mask = seq_lens.new_empty((n * bs,), dtype=dtype)
    # One int64 allocation for the links, positions and tokens, cut by one unbind; flat views by
    # view(-1), which costs less host time than ravel().
    token_dtype = draft_tokens.dtype
    if bonus_tokens.dtype != token_dtype:
        token_dtype = torch.result_type(bonus_tokens, draft_tokens)
    slabs = 5 if token_dtype == torch.long else 4
    retrieve_index, next_token, next_sibling, positions_slab, *tokens_slab = seq_lens.new_empty(
        (slabs, bs, n), dtype=torch.long).unbind(0)
    positions = position_buf if position_buf is not None else positions_slab.view(-1)
    tokens_out = tokens_slab[0].view(-1) if tokens_slab else seq_lens.new_empty((bs * n,), dtype=token_dtype)
    fill_prefix = mode == FULL_MASK and bool(fill_prefix_mask)
    if tokens_slab and position_buf is None:  # every output in the one buffer: pass its start only
        _launch(parent_list, top_scores_index, seq_lens, tree_mask, None, retrieve_index, None, None, int(topk),
                n, mode, fill_prefix, bonus_tokens, draft_tokens, None, slab_outputs=True)
    else:
        _launch(parent_list, top_scores_index, seq_lens, tree_mask, positions, retrieve_index, next_token,
                next_sibling, int(topk), n, mode, fill_prefix, bonus_tokens, draft_tokens, tokens_out)
    return tree_mask, positions, retrieve_index, next_token, next_sibling, tokens_out
