"""Helpers shared by the verify kernels: device functions, and the register width of a tree.

The sequential tree walk reads single entries of a request's ``[n]`` tree rows with scalar loads:
after the first touch they hit L1, cheaper than a block-wide reduction over a register vector
when a program has many warps.
"""

import triton
import triton.language as tl


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
