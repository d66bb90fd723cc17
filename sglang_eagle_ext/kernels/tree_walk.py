"""Helpers shared by the verify kernels: device functions, the register width of a tree, and the
check of the logits the fused entry points are given.

The sequential tree walk reads single entries of a request's ``[n]`` tree rows with scalar loads:
after the first touch they hit L1, cheaper than a block-wide reduction over a register vector
when a program has many warps.
"""

import torch
import triton
import triton.language as tl


def check_verify_logits(entry_point: str, logits: torch.Tensor, bs: int, n: int) -> None:
    """Raise ``ValueError`` unless ``logits`` is ``[bs*n, V]`` with unit stride along ``V``: the
    fused kernels index it as one row per verify row, contiguous along the vocabulary, and would
    read out of bounds otherwise."""
    if logits.dim() != 2 or logits.shape[0] != bs * n:
        raise ValueError(f"{entry_point}: logits must be [bs*n, V], one row per verify row of the "
                         f"[{bs}, {n}] candidates ({bs * n} rows); got shape {tuple(logits.shape)}")
    if logits.stride(1) != 1:
        raise ValueError(f"{entry_point}: logits must have unit stride along the vocabulary; got "
                         f"strides {tuple(logits.stride())} (pass logits.contiguous())")


def block_n(n: int) -> int:
    """Register width of a request's ``n`` tree nodes in the verify kernels (at least 16 lanes)."""
    return max(16, triton.next_power_of_2(n))


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
