"""What the verify kernels' entry points are given: the check of the logits the fused entry points
take, and the register width of a request's tree."""

import torch
import triton


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
