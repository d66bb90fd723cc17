"""A drafter that predicts ``zipf_target``'s next-token distributions (benchmarks only).

Against ``zipf_target`` a random drafter is almost never accepted: every verify walk stops at the root and the
server never takes a tree past it. This drafter is an ordinary SpecForge-layout EAGLE-3 drafter (one
Llama layer, ``fc`` over three aux states, a draft vocabulary with ``d2t``) whose weights are set so
that its logits are the target's profile over the draft vocabulary, so its drafts are accepted as a
well-trained drafter's are. How the weights do it (``H`` the hidden size, ``u_c`` the target's class
directions, ``s`` their sum; after token x the target's logits are ``profiles[class(x)]``):

* the drafter's input at a position is the embedding of the token it must continue (the target's
  embedding, shared by SGLang: ``sqrt(H) u_c``), and the residual entering its layer holds ``K u_p``,
  p the class of the token one position back: ``fc`` projects the target's first aux state (the
  residual stream of the target's input token there, the previous one) onto the class directions,
  and a draft step's carried state is the previous step's output;
* attention swaps ``u_p`` for ``u_c``: q and k are the same constant for every token (``s`` reads 1
  off any class direction), so with RoPE the scores depend on distance only; one query head peaks at
  distance 0 (itself) and reads the class one-hot (``+K u_c`` out), a second peaks at distance 1 (the
  previous token, or the tree parent in a draft step) and subtracts that token's class (``-K u_p``);
  the peaks beat every other visible key by ``SCORE_MARGIN``;
* the MLP is zero, so the layer's output is ``K u_c``; the final norm makes it ``sqrt(H) u_c`` and
  ``lm_head`` (the target's rows for the draft vocabulary) gives ``profiles[c]`` there;
* the draft vocabulary is the tokens with the most probability summed over the classes, as a
  frequency-built draft vocabulary is;
* a deeper drafter (the step-time profile's 3 layers) keeps random weights in its later layers, which
  cost what a trained drafter's do, but their outputs are scaled by ``NEAR_IDENTITY``, so they leave
  the residual ``K u_c`` as it is.

Only the first position of a sequence has no previous token; its output is drafted from only when
the prompt is one token long (the benchmarks' prompts are longer).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from zipf_target import CLASSES, profiles_and_basis

from sglang_eagle_ext.drafter.model_dir import membership_mask

ROPE_THETA = 10000.0  # written into the drafter's config: the frequencies below assume it
NEAR_IDENTITY = 1e-5
ROPE_PAIRS = 16  # the highest-frequency RoPE pairs that carry q and k; the rest stay zero
SCORE_MARGIN = 30.0  # attention logit of the intended key over any other (weights below e^-30)
MAX_DISTANCE = 4096  # the margin holds for keys up to this many positions back


def carrier_frequencies(head_dim: int) -> torch.Tensor:
    """RoPE frequencies (float64) of the pairs that carry q and k: the highest ``ROPE_PAIRS``."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64)[:min(ROPE_PAIRS, head_dim // 2)] / head_dim
    return ROPE_THETA ** -exponents


def key_amplitude(head_dim: int) -> float:
    """Per-pair amplitude of q and k so that the score at the intended distance beats every other
    distance up to ``MAX_DISTANCE`` by ``SCORE_MARGIN`` (score = a^2 sum_f cos(theta_f d) / sqrt(d_h))."""
    distances = torch.arange(1, MAX_DISTANCE + 1, dtype=torch.float64)
    gap = float((1 - torch.cos(distances[:, None] * carrier_frequencies(head_dim)[None, :])).sum(-1).min())
    return math.sqrt(SCORE_MARGIN * math.sqrt(head_dim) / gap)


def query_key_vectors(head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q_self, q_previous, k)``, each ``[head_dim]`` in RoPE's half-split (neox) layout: k and
    q_self put ``a`` on the carrier pairs' first halves; q_previous is k rotated back by one
    position, so its score peaks at the key one position before the query."""
    theta, half = carrier_frequencies(head_dim), head_dim // 2
    amplitude, pairs = key_amplitude(head_dim), len(theta)
    key = torch.zeros(head_dim, dtype=torch.float64)
    key[:pairs] = amplitude
    previous = torch.zeros(head_dim, dtype=torch.float64)
    previous[:pairs] = amplitude * torch.cos(theta)
    previous[half:half + pairs] = -amplitude * torch.sin(theta)
    return key, previous, key


def draft_vocabulary(profiles: torch.Tensor, size: int) -> torch.Tensor:
    """The ``size`` target ids with the most probability summed over the classes, ascending."""
    mass = torch.softmax(profiles.double(), dim=-1).sum(0)
    return mass.topk(size).indices.sort().values


def shaper(seed: int, device) -> Callable[[dict[str, torch.Tensor], dict], None]:
    """The ``shape`` hook of ``build_matched_drafter`` for a 1-layer drafter of a ``zipf_target``
    with ``seed``; ``device`` must be the one the target's engine draws its profiles on."""

    @torch.no_grad()
    def shape(tensors: dict[str, torch.Tensor], layer_config: dict) -> None:
        hidden = tensors["norm.weight"].shape[0]
        vocab = int(layer_config["vocab_size"])
        heads, kv_heads = layer_config["num_attention_heads"], layer_config["num_key_value_heads"]
        head_dim = layer_config.get("head_dim") or hidden // heads
        group, kv_used = heads // kv_heads, -(-CLASSES // head_dim)
        if "layers.0.self_attn.q_norm.weight" in tensors or group < 2 or kv_used > kv_heads:
            raise ValueError(f"zipf_drafter: needs Llama layers, >= 2 query heads per KV head and "
                             f"{CLASSES} classes within {kv_heads} KV heads of {head_dim}")
        profiles, basis = (t.double().cpu() for t in profiles_and_basis(hidden, vocab, seed, device))
        scale = math.sqrt(hidden)  # K: the class vector as large as an embedding
        reads_one = basis.sum(1) / scale  # s / sqrt(H): 1 on every class embedding sqrt(H) u_c
        q_self, q_previous, key = query_key_vectors(head_dim)
        layer, width = "layers.0.", 2 * hidden  # attention reads cat[norm(embeds), norm(hidden)]
        q = torch.zeros(heads * head_dim, width, dtype=torch.float64)
        k = torch.zeros(kv_heads * head_dim, width, dtype=torch.float64)
        v = torch.zeros(kv_heads * head_dim, width, dtype=torch.float64)
        o = torch.zeros(hidden, heads * head_dim, dtype=torch.float64)
        for g in range(kv_used):
            own, previous = g * group, g * group + 1  # query heads of KV head g (GQA groups)
            q[own * head_dim:(own + 1) * head_dim, :hidden] = torch.outer(q_self, reads_one)
            q[previous * head_dim:(previous + 1) * head_dim, :hidden] = torch.outer(q_previous, reads_one)
            k[g * head_dim:(g + 1) * head_dim, :hidden] = torch.outer(key, reads_one)
            classes = range(g * head_dim, min(CLASSES, (g + 1) * head_dim))
            for j, c in enumerate(classes):
                v[g * head_dim + j, :hidden] = basis[:, c] / scale  # one-hot of the class
                o[:, own * head_dim + j] = scale * basis[:, c]
                o[:, previous * head_dim + j] = -scale * basis[:, c]
        fc = torch.zeros_like(tensors["fc.weight"], dtype=torch.float64)
        fc[:, :hidden] = basis @ basis.T  # the first aux state sqrt(H) u_p (+ the layers' tiny noise) -> K u_p
        ids = draft_vocabulary(profiles, tensors["lm_head.weight"].shape[0])
        values = {layer + "self_attn.q_proj.weight": q, layer + "self_attn.k_proj.weight": k,
                  layer + "self_attn.v_proj.weight": v, layer + "self_attn.o_proj.weight": o,
                  "fc.weight": fc, "lm_head.weight": profiles[:, ids].T @ basis.T / scale}
        for name, value in values.items():
            tensors[name] = value.to(tensors[name].dtype)
        for name in ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            tensors[f"{layer}{name}.weight"].zero_()
        # layers after the first keep their random weights (a deeper drafter's cost) but write back
        # ~1e-5 of them, so layer 0's class vector reaches the head unchanged at bf16's resolution
        for name, tensor in tensors.items():
            if name.startswith("layers.") and not name.startswith(layer) and name.endswith(
                    ("self_attn.o_proj.weight", "mlp.down_proj.weight")):
                tensor.mul_(NEAR_IDENTITY)
        for name, tensor in tensors.items():  # every norm (fc_norm / input_norm too, if the layout has them)
            if "norm" in name:
                tensor.fill_(1.0)
        tensors["d2t"] = ids - torch.arange(ids.numel())
        tensors["t2d"] = membership_mask(tensors["d2t"], vocab)
        layer_config.update(rope_theta=ROPE_THETA, rope_scaling=None)

    return shape
