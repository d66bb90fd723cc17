"""An SGLang plugin for the benchmarks only (never installed with the package): gives a target that
SGLang's ``dummy`` loader drew next-token distributions with a realistic entropy.

The dummy loader's uniform +-1e-3 weights make every next-token distribution nearly flat, which no
sampler meets in practice. With ``ZIPF_TARGET_SEED`` set, this plugin wraps the dummy loader and,
after it has drawn the weights, rewrites three tensors of a Llama target so that its logits are
``verify_workload.realistic_logits`` profiles (to within bf16 rounding, a few hundredths of a unit):

* ``CLASSES`` orthonormal directions ``u_c`` (columns of ``basis``, ``[H, CLASSES]``); token t's
  embedding is ``sqrt(H) * u_(t mod CLASSES)``, far above the RMS-norm epsilon;
* the final norm's weight is 1, so the last hidden state is ``sqrt(H) * u_c`` (the dummy layers
  add ~1e-6 each to a residual of unit scale, below bf16's resolution there);
* ``lm_head = profiles^T basis^T / sqrt(H)``, so the logits after token t are ``profiles[c]``: a
  Zipf-like distribution over its own random order of the vocabulary.

Every other weight stays the dummy loader's, so the forward costs what Llama-3.1-8B's costs.
``profile_stats`` computes the same profiles (same seed, same device) to report their entropy.

Registered by ``fused_verify_e2e.py`` as a ``sglang.srt.plugins`` entry point of its own.
"""

from __future__ import annotations

import math
import os
import sys

import torch

from verify_workload import entropy_nats, realistic_logits

SEED_ENV = "ZIPF_TARGET_SEED"
CLASSES = 64


def profiles_and_basis(hidden: int, vocab: int, seed: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``[CLASSES, vocab]`` logit profiles and an ``[hidden, CLASSES]`` orthonormal basis."""
    gen = torch.Generator(device=device).manual_seed(seed)
    profiles = realistic_logits(CLASSES, gen, vocab)
    basis, _ = torch.linalg.qr(torch.randn(hidden, CLASSES, generator=gen, device=device))
    return profiles, basis


def _rows(layer: torch.nn.Module, vocab: int) -> tuple[int, int]:
    """The vocabulary rows ``[start, end)`` this rank's shard of ``layer`` holds (its first
    ``end - start`` rows; rows past them are the shard's padding): the whole vocabulary without tensor
    parallelism, else SGLang's ``VocabParallelEmbedding.shard_indices``."""
    indices = getattr(layer, "shard_indices", None)
    if layer.weight.shape[0] == vocab or indices is None:
        return 0, vocab
    return indices.org_vocab_start_index, indices.org_vocab_end_index


@torch.no_grad()
def shape_target(model: torch.nn.Module, seed: int) -> None:
    embed, norm, head = model.model.embed_tokens.weight, model.model.norm.weight, model.lm_head.weight
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None) or head.shape[0]
    embed_rows, head_rows = _rows(model.model.embed_tokens, vocab), _rows(model.lm_head, vocab)
    rewrite(embed, norm, head, seed, vocab, embed_rows, head_rows)
    if head.is_cuda:
        torch.cuda.empty_cache()  # the ~4 GB of fp32 temporaries go back before SGLang sizes its KV cache
    # printed, not logged: the engines log at level error
    print(f"zipf_target: lm_head, embeddings and final norm rewritten (seed {seed}, {CLASSES} classes, "
          f"vocab {vocab}, hidden {head.shape[1]}, rows {head_rows[0]}-{head_rows[1]})", file=sys.stderr, flush=True)


@torch.no_grad()
def rewrite(embed: torch.Tensor, norm: torch.Tensor, head: torch.Tensor, seed: int, vocab: int,
            embed_rows: tuple[int, int] | None = None, head_rows: tuple[int, int] | None = None) -> None:
    """Set in place the embeddings ``[rows, H]``, final norm ``[H]`` and lm_head ``[rows, H]`` of a target
    whose logits after token t are ``profiles[t mod CLASSES]``; ``*_rows``: the vocabulary rows
    ``[start, end)`` a tensor-parallel shard holds in its first rows (default: the whole vocabulary)."""
    hidden = head.shape[1]
    (e_start, e_end), (h_start, h_end) = embed_rows or (0, vocab), head_rows or (0, vocab)
    if (embed.shape[1] != hidden or norm.shape != (hidden,) or embed.shape[0] < e_end - e_start
            or head.shape[0] < h_end - h_start):
        raise ValueError(f"zipf_target: unexpected shapes embed {tuple(embed.shape)}, norm {tuple(norm.shape)}, "
                         f"lm_head {tuple(head.shape)} for vocabulary {vocab}")
    # every rank draws the whole vocabulary's profiles (same seed, same numbers) and keeps its rows
    profiles, basis = profiles_and_basis(hidden, vocab, seed, head.device)
    token_class = torch.arange(e_start, e_end, device=head.device) % CLASSES
    embed[:e_end - e_start].copy_(basis.T[token_class] * math.sqrt(hidden))
    norm.fill_(1.0)
    head[:h_end - h_start].copy_(profiles.T[h_start:h_end] @ basis.T / math.sqrt(hidden))


def profile_stats(hidden: int, vocab: int, seed: int, temperature: float, device) -> dict:
    """Entropy and head size of the target's next-token distributions at ``temperature``."""
    profiles, _ = profiles_and_basis(hidden, vocab, seed, device)
    probs = torch.softmax(profiles / temperature, dim=-1).sort(dim=-1, descending=True).values
    nucleus = (probs.cumsum(-1) < 0.9).sum(-1) + 1
    entropy = entropy_nats(profiles, temperature)
    return {"classes": CLASSES, "temperature": temperature,
            "entropy_nats": {"mean": round(float(entropy.mean()), 3), "min": round(float(entropy.min()), 3),
                             "max": round(float(entropy.max()), 3)},
            "top1_prob_mean": round(float(probs[:, 0].mean()), 3),
            "top50_mass_mean": round(float(probs[:, :50].sum(-1).mean()), 3),
            "top_p0.9_nucleus_median": int(nucleus.median())}


def load() -> None:
    """The plugin's entry point: wrap the dummy loader when ``ZIPF_TARGET_SEED`` is set."""
    if SEED_ENV not in os.environ:
        return
    from sglang.srt.model_loader import loader

    dummy_load = loader.DummyModelLoader.load_model
    if getattr(dummy_load, "zipf_target", False):
        return
    seed = int(os.environ[SEED_ENV])

    def load_model(self, *args, **kwargs):
        model = dummy_load(self, *args, **kwargs)
        shape_target(model, seed)
        return model

    load_model.zipf_target = True
    loader.DummyModelLoader.load_model = load_model
