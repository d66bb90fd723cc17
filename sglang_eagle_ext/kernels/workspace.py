"""Per-device scratch that kernels reset themselves, so that a call allocates and fills nothing.

The cross-program reductions (argmax keys, arrival tickets) need buffers in a known state at
launch. Each kernel that uses them puts them back in that state before it exits, so the buffers
are filled once, when first made (or grown), never per call. That keeps a call free of fill
launches and safe to capture in a CUDA graph, provided the workspace was made before capture
(call the op once eagerly with the largest batch first, as warm-up does).

Launches that share a device must not run concurrently on different streams.
"""

from __future__ import annotations

import torch

EMPTY_KEY = -(2**63)  # below every argmax key: an empty slot

_buffers: dict = {}


def _persistent(name: str, device: torch.device, size: int, dtype: torch.dtype, fill: int) -> torch.Tensor:
    key = (name, device)
    buf = _buffers.get(key)
    if buf is None or buf.numel() < size:
        buf = torch.full((max(size, 4096),), fill, dtype=dtype, device=device)
        _buffers[key] = buf
    return buf


def argmax_keys(device: torch.device, rows: int) -> torch.Tensor:
    """int64 ``[>= rows]`` of :data:`EMPTY_KEY`; kernels leave them empty again."""
    return _persistent("argmax_keys", device, rows, torch.int64, EMPTY_KEY)


def tickets(device: torch.device, requests: int) -> torch.Tensor:
    """int32 ``[>= requests]`` of zeros; kernels leave them zero again."""
    return _persistent("tickets", device, requests, torch.int32, 0)
