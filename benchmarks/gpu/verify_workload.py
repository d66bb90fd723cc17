"""The verify workload the fused-verify benchmarks share: Llama-3.1-8B's vocabulary, the trees, the
batches, the sampling filters, and next-token logits with a realistic entropy.

Realistic logits: each distribution ranks the vocabulary in a random order and gives rank r the
logit ``-ZIPF * ln(r) + N(0, 0.3)``, a heavy head and a long tail, as language models' next-token
distributions have (at T 0.7 about 2 nats; each run records what it measured).
"""

from __future__ import annotations

import os

import torch

VOCAB = 128256
ZIPF = 1.25
TREES = [(1, 3, 4), (4, 3, 8), (8, 5, 32)]  # (topk, steps, draft tokens)
BATCHES = [1, 16, 64]
FILTERS = {"T0.7 top-p0.9": (0.7, 1 << 30, 0.9), "T0.7 top-k50": (0.7, 50, 1.0)}  # (temperature, top-k, top-p)


def realistic_logits(rows: int, gen: torch.Generator, vocab: int = VOCAB) -> torch.Tensor:
    """``[rows, vocab]`` float32 logits on ``gen``'s device, one realistic distribution per row."""
    ranks = torch.argsort(torch.rand(rows, vocab, generator=gen, device=gen.device), dim=-1).float() + 1
    noise = 0.3 * torch.randn(rows, vocab, generator=gen, device=gen.device)
    return -ZIPF * torch.log(ranks) + noise


def entropy_nats(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy (nats) of ``softmax(logits / temperature)`` per row."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def flashinfer_renorm_requested() -> bool:
    """Whether this run asked the gpu-sglang kit's shim to keep sgl_kernel's renorm on flashinfer, as
    a normal install has it (0.5.23 renamed the switch; the kit reads either)."""
    return "1" in (os.environ.get("SGL_KERNEL_USE_FLASHINFER"), os.environ.get("SGLANG_KERNEL_USE_FLASHINFER"))
