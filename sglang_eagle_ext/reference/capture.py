"""Aux hidden-state capture from a Hugging Face transformers target (Llama, Qwen2/3, Mistral...).

Index ``k`` is the residual stream entering decoder layer ``k`` and index ``N`` the last layer's
output *before* the final norm (see :mod:`sglang_eagle_ext.drafter.spec`). HF's ``output_hidden_states``
ends with the *normed* state, so capture uses hooks on the decoder layers instead: a pre-hook on
layer ``k`` for ``k < N`` and a hook on the output of layer ``N - 1`` for ``N``. Hooks also avoid
materialising every hidden state of a deep target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layer stack of an HF causal LM (text models and multimodal wrappers)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    for candidate in (decoder, getattr(decoder, "language_model", None)):
        layers = getattr(candidate, "layers", None)
        if isinstance(layers, nn.ModuleList):
            return layers
    raise TypeError(f"{type(model).__name__}: cannot find the decoder layers (expected a "
                    "Llama/Qwen-style `model.layers` stack)")


@dataclass
class TargetStep:
    logits: torch.Tensor  # [B, T, V]
    aux: torch.Tensor  # [B, T, len(indices) * H], chunks in the order of the indices
    past_key_values: Any  # the HF cache after this step (None when use_cache is False)


class CapturingTarget:
    """Runs an HF causal LM and returns its logits plus the concatenated aux hidden states."""

    def __init__(self, model: nn.Module, indices: Sequence[int]):
        self.model = model
        self.layers = decoder_layers(model)
        depth = len(self.layers)
        bad = [i for i in indices if not 0 <= i <= depth]
        if bad:
            raise ValueError(f"aux hidden-state indices {bad} do not exist in a {depth}-layer "
                             f"target (valid: 0..{depth})")
        self.indices = tuple(indices)

    def __call__(self, input_ids: torch.Tensor, past_key_values=None, use_cache: bool = False,
                 attention_mask: torch.Tensor | None = None) -> TargetStep:
        captured: dict[int, torch.Tensor] = {}
        handles = []
        depth = len(self.layers)

        def grab_input(index):
            def hook(_module, args, kwargs):
                captured[index] = args[0] if args else kwargs["hidden_states"]
            return hook

        def grab_output(_module, _args, output):
            captured[depth] = output[0] if isinstance(output, tuple) else output

        try:
            for index in set(self.indices):
                if index < depth:
                    handles.append(self.layers[index].register_forward_pre_hook(
                        grab_input(index), with_kwargs=True))
                else:
                    handles.append(self.layers[depth - 1].register_forward_hook(grab_output))
            out = self.model(input_ids=input_ids, past_key_values=past_key_values,
                             use_cache=use_cache, attention_mask=attention_mask)
        finally:
            for handle in handles:
                handle.remove()
        aux = torch.cat([captured[i] for i in self.indices], dim=-1)
        return TargetStep(logits=out.logits, aux=aux,
                          past_key_values=out.past_key_values if use_cache else None)
