"""A drafter's vocabulary: the draft vocabulary's size, the draft-to-target map (``d2t`` in the
weights, or the draft vocabulary NeMo Automodel keeps beside them) and its checks."""

from __future__ import annotations

import os
from typing import Any

import torch

from sglang_eagle_ext.drafter.spec import DrafterSpec
from sglang_eagle_ext.drafter.tensors import TensorIndex, load_pickle
from sglang_eagle_ext.errors import Problem

# NeMo Automodel training state that carries the draft vocabulary, and the token map its SGLang
# helper writes next to the weights (the selected target ids, SGLang's --speculative-token-map).
META_FILES = ("eagle_meta.pt", "eagle3_meta.pt")
TOKEN_MAP_FILE = "speculative_token_map.pt"


def read_vocabulary_facts(directory: str, spec_values: dict[str, Any], shapes: dict[str, tuple[int, ...]],
                          weights_file: str, config_file: str, problems: list[Problem],
                          notes: list[str]) -> tuple[str, torch.Tensor] | None:
    """Set the draft vocabulary's size and whether it has a map in ``spec_values``; return the map
    from a file beside the weights (its path and ``d2t``) when the weights hold none."""
    names = set(shapes)
    lm_head = shapes.get("lm_head.weight")
    draft_vocab = spec_values["draft_vocab_size"]
    if draft_vocab is None:
        draft_vocab = lm_head[0] if lm_head else spec_values["vocab_size"]
        notes.append(f"draft_vocab_size not set: {draft_vocab} (from "
                     f"{'lm_head.weight' if lm_head else 'the target vocabulary'})")
    spec_values["draft_vocab_size"] = draft_vocab
    meta = (_meta_vocab_map(directory, draft_vocab, problems)
            if "d2t" not in names and draft_vocab < spec_values["vocab_size"] else None)
    has_map = spec_values["has_vocab_map"] = "d2t" in names or meta is not None
    if draft_vocab > spec_values["vocab_size"]:
        problems.append(Problem(config_file, "draft_vocab_size", "larger than the vocabulary",
                                "set draft_vocab_size to the drafter's lm_head rows",
                                expected=f"<= {spec_values['vocab_size']}", found=str(draft_vocab)))
    elif draft_vocab < spec_values["vocab_size"] and not has_map:
        problems.append(Problem(
            weights_file, "d2t", f"reduced draft vocabulary ({draft_vocab} of {spec_values['vocab_size']}) "
            "without a draft-to-target map", "add the d2t tensor from training (or eagle_meta.pt "
            "next to the weights); without it every drafted token id is wrong"))
    return meta


def _meta_vocab_map(directory: str, draft_vocab: int, problems: list[Problem]) -> tuple[str, torch.Tensor] | None:
    """d2t from the draft vocabulary NeMo Automodel keeps beside the weights: ``eagle_meta.pt`` /
    legacy ``eagle3_meta.pt`` (``selected_token_ids``) in a training step's folder, which holds
    the weights in ``model/`` or ``model/consolidated/``, or the ``speculative_token_map.pt`` its
    SGLang helper writes next to them."""
    folders = [directory]
    for _ in range(2):
        folders.append(os.path.dirname(folders[-1]))
    candidates = [os.path.join(directory, TOKEN_MAP_FILE)] + [os.path.join(f, name) for f in folders
                                                               for name in META_FILES]
    for path in candidates:
        if not os.path.isfile(path):
            continue
        meta = load_pickle(path, problems)
        ids = meta.get("selected_token_ids") if isinstance(meta, dict) else meta
        if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.dtype.is_floating_point:
            if meta is not None:
                problems.append(Problem(path, "selected_token_ids", "missing or not a 1-D integer tensor",
                                        "use the vocabulary file written with this checkpoint"))
            return None
        if ids.numel() != draft_vocab:
            problems.append(Problem(path, "selected_token_ids", "vocab map length differs from the "
                                    "draft vocabulary", "use the vocabulary file written with this checkpoint",
                                    expected=str(draft_vocab), found=str(ids.numel())))
            return None
        return path, ids.long() - torch.arange(ids.numel())
    return None


def check_vocab_map(spec: DrafterSpec, index: TensorIndex, shapes: dict[str, tuple[int, ...]],
                    meta: tuple[str, torch.Tensor] | None, weights_file: str, problems: list[Problem]) -> None:
    """The map of ``spec`` (from the weights, else ``meta``) against its vocabulary."""
    if "d2t" in shapes:
        d2t, d2t_file = index.read("d2t"), weights_file
    else:
        d2t_file, d2t = meta
    t2d = (index.read("t2d") if "t2d" in shapes and shapes["t2d"] == (spec.vocab_size,)
           and index.entries["t2d"].dtype is not None else None)
    _check_vocab_map(d2t, t2d, spec, d2t_file, problems)


def _check_vocab_map(d2t: torch.Tensor, t2d: torch.Tensor | None, spec: DrafterSpec, file: str,
                     problems: list[Problem]) -> None:
    if d2t.dtype.is_floating_point or d2t.dim() != 1:
        problems.append(Problem(file, "d2t", "must be a 1-D integer offset table",
                                "re-export the vocab map", found=f"{d2t.dtype} {list(d2t.shape)}"))
        return
    target_ids = d2t.long() + torch.arange(d2t.numel())
    outside = ((target_ids < 0) | (target_ids >= spec.vocab_size)).nonzero().flatten()
    if outside.numel():
        problems.append(Problem(
            file, "d2t", f"{outside.numel()} draft tokens map outside the target vocabulary "
            f"(first: draft {outside[0].item()} -> target {target_ids[outside[0]].item()})",
            "d2t holds offsets: target_id = draft_id + d2t[draft_id]; re-export the map",
            expected=f"target ids in [0, {spec.vocab_size})"))
        return
    if torch.unique(target_ids).numel() != target_ids.numel():
        problems.append(Problem(file, "d2t", "several draft tokens map to the same target token",
                                "re-export the vocab map"))
    if t2d is not None and (t2d.numel() != spec.vocab_size or not bool(t2d.bool()[target_ids].all())
                            or int(t2d.bool().sum()) != target_ids.numel()):
        problems.append(Problem(file, "t2d", "disagrees with d2t",
                                "re-export both maps from the same token selection"))
