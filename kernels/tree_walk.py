"""Device helpers shared by the verify kernels: a request's tree in registers, and scalar reads.

A request's ``n`` nodes are loaded once as ``[BLOCK_N]`` vectors; the sequential tree walk then
reads single entries with a masked reduction instead of a dependent global load per step.
"""

import triton
import triton.language as tl


@triton.jit
def pick(values, nodes, index):
    """``values[index]`` for a register vector ``values`` laid out over ``nodes``."""
    return tl.sum(tl.where(nodes == index, values, 0), axis=0)


@triton.jit
def load_tree(cand_ptr, retrive_index_ptr, next_token_ptr, next_sibling_ptr, b, n, nodes):
    """Candidates, flat verify rows and links of request ``b`` (all int64 ``[BLOCK_N]``)."""
    in_tree = nodes < n
    base = b.to(tl.int64) * n
    candidates = tl.load(cand_ptr + base + nodes, mask=in_tree, other=-1)
    rows = tl.load(retrive_index_ptr + base + nodes, mask=in_tree, other=-1)
    first_child = tl.load(next_token_ptr + base + nodes, mask=in_tree, other=-1)
    next_sibling = tl.load(next_sibling_ptr + base + nodes, mask=in_tree, other=-1)
    return candidates, rows, first_child, next_sibling


@triton.jit
def write_accept_slot(accept_index_ptr, b, max_accepts, slot, row):
    tl.store(accept_index_ptr + b.to(tl.int64) * (max_accepts + 1) + slot, row.to(tl.int32))
