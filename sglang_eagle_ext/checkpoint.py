"""Read a drafter checkpoint directory into a validated :class:`DrafterSpec` plus its tensors.

``read_drafter`` looks only at the config and the tensor headers (names, shapes, dtypes) plus the
small vocabulary map, so every problem is reported before any weight is loaded or any GPU memory
is taken. ``DrafterCheckpoint.load_tensors`` then yields canonical tensors.
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from . import weight_names
from .config_dialects import PEAGLE_FIX, ConfigFacts, detect_dialect, read_config_facts
from .errors import DrafterError, Problem
from .spec import Dialect, DrafterSpec, LaterLayerNorm
from .target import TargetInfo, check_against_target, read_target

# Weight files in the order they are looked for, relative to the checkpoint directory.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json", "consolidated/model.safetensors", "draft_model.pt")
# NeMo Automodel training state that carries the draft vocabulary.
META_FILES = ("eagle_meta.pt", "eagle3_meta.pt")


@dataclass(frozen=True)
class _TensorEntry:
    file: str
    raw_name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass
class _TensorIndex:
    """Canonical name -> where the tensor lives; read from headers only for safetensors."""

    entries: dict[str, _TensorEntry] = field(default_factory=dict)
    pickled: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)  # file -> tensors

    def read(self, name: str) -> torch.Tensor:
        entry = self.entries[name]
        if entry.file in self.pickled:
            return self.pickled[entry.file][entry.raw_name]
        with safe_open(entry.file, framework="pt") as handle:
            return handle.get_tensor(entry.raw_name)


def _load_pickle(path: str, problems: list[Problem]) -> dict[str, Any] | None:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
        problems.append(Problem(
            path, "<pickle>", f"cannot be read as plain tensors ({str(exc).splitlines()[0]})",
            "re-export the checkpoint as safetensors; pickles are only loaded with "
            "weights_only=True, never with arbitrary code"))
        return None


def _add_entry(index: _TensorIndex, file: str, raw: str, shape, dtype, problems) -> None:
    name = weight_names.canonical_name(raw)
    if name in index.entries:
        problems.append(Problem(file, raw, f"two tensors map to the canonical name {name!r}",
                                f"remove one of {index.entries[name].raw_name!r} and {raw!r}"))
        return
    index.entries[name] = _TensorEntry(file, raw, tuple(shape), str(dtype).replace("torch.", ""))


def _index_safetensors(path: str, index: _TensorIndex, problems: list[Problem]) -> None:
    try:
        with safe_open(path, framework="pt") as handle:
            for raw in handle.keys():
                tensor_slice = handle.get_slice(raw)
                _add_entry(index, path, raw, tensor_slice.get_shape(), tensor_slice.get_dtype(), problems)
    except (SafetensorError, OSError, ValueError) as exc:
        problems.append(Problem(path, "<safetensors header>", f"corrupt or truncated file ({exc})",
                                "re-download or re-export the checkpoint"))


def _index_pickle(path: str, index: _TensorIndex, problems: list[Problem]) -> None:
    state = _load_pickle(path, problems)
    if state is None:
        return
    if "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]  # training wrappers
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    if len(tensors) != len(state):
        problems.append(Problem(path, ", ".join(sorted(set(state) - set(tensors)))[:200],
                                "entries that are not tensors", "save a plain state dict"))
    index.pickled[path] = tensors
    for raw, tensor in tensors.items():
        _add_entry(index, path, raw, tensor.shape, tensor.dtype, problems)


def _weight_files(directory: str, problems: list[Problem]) -> list[str]:
    for candidate in WEIGHT_FILES:
        path = os.path.join(directory, candidate)
        if not os.path.isfile(path):
            continue
        if not candidate.endswith(".index.json"):
            return [path]
        try:
            with open(path, encoding="utf-8") as handle:
                shards = sorted(set(json.load(handle)["weight_map"].values()))
        except (OSError, json.JSONDecodeError, KeyError, AttributeError) as exc:
            problems.append(Problem(path, "weight_map", f"unreadable shard index ({exc})",
                                    "re-download the checkpoint"))
            return []
        paths = [os.path.join(directory, shard) for shard in shards]
        absent = [p for p in paths if not os.path.isfile(p)]
        if absent:
            problems.append(Problem(path, "weight_map", "shards listed but missing",
                                    "download every shard", found=", ".join(absent)))
            return []
        return paths
    problems.append(Problem(directory, "<weights>", "no weight file found",
                            "the directory must hold one of: " + ", ".join(WEIGHT_FILES)))
    return []


def _meta_vocab_map(directory: str, problems: list[Problem]) -> tuple[str, torch.Tensor] | None:
    """d2t from NeMo's ``eagle_meta.pt`` / legacy ``eagle3_meta.pt`` (``selected_token_ids``)."""
    for name in META_FILES:
        for folder in (directory, os.path.dirname(os.path.normpath(directory))):
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                meta = _load_pickle(path, problems)
                ids = None if meta is None else meta.get("selected_token_ids")
                if not isinstance(ids, torch.Tensor):
                    if meta is not None:
                        problems.append(Problem(path, "selected_token_ids", "missing",
                                                "use the meta file written with this checkpoint"))
                    return None
                return path, ids.long() - torch.arange(ids.numel())
    return None


@dataclass(frozen=True)
class DrafterCheckpoint:
    """A validated drafter: its canonical description and where its tensors are."""

    spec: DrafterSpec
    _index: _TensorIndex
    _meta_d2t: torch.Tensor | None = None

    def load_tensors(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """All canonical tensors of :func:`weight_names.expected_shapes` (``d2t`` stays int64).

        Fused ``qkv_proj`` / ``gate_up_proj`` are split; ignored tensors (``t2d``...) are left out.
        """
        expected = weight_names.expected_shapes(self.spec)
        tensors: dict[str, torch.Tensor] = {}
        for name in self._index.entries:
            fused = _fused_parts(name)
            if fused is not None:
                parts = fused[1]
                sizes = [expected[p][0] for p in parts]
                tensors.update(zip(parts, torch.split(self._index.read(name), sizes, dim=0)))
            elif name in expected:
                tensors[name] = self._index.read(name)
        if self._meta_d2t is not None and "d2t" not in tensors:
            tensors["d2t"] = self._meta_d2t
        for name, tensor in tensors.items():
            if name == "d2t":
                tensors[name] = tensor.long()
            elif dtype is not None:
                tensors[name] = tensor.to(dtype)
        return tensors


def _fused_parts(name: str) -> tuple[str, tuple[str, ...]] | None:
    for fused, parts in weight_names.FUSED_PROJECTIONS.items():
        if name.endswith(f".{fused}.weight") and weight_names.layer_index(name) is not None:
            prefix = name[: -len(f"{fused}.weight")]
            return fused, tuple(f"{prefix}{p}.weight" for p in parts)
    return None


def _split_fused(index: _TensorIndex) -> dict[str, tuple[int, ...]]:
    """Canonical name -> shape, with fused projections replaced by their parts' names.

    The parts' first dimensions are unknown until the spec exists, so they carry the fused
    shape with a leading ``-1``; :func:`_check_shapes` checks the sum instead.
    """
    shapes = {}
    for name, entry in index.entries.items():
        fused = _fused_parts(name)
        if fused is None:
            shapes[name] = entry.shape
        else:
            for part in fused[1]:
                shapes[part] = (-1,) + entry.shape[1:]
    return shapes


def _count_layers(names, weights_file: str, problems: list[Problem]) -> int:
    layer_ids = sorted({i for i in map(weight_names.layer_index, names) if i is not None})
    if not layer_ids:
        problems.append(Problem(weights_file, "layers.*", "no decoder layer tensors",
                                "check that the file is an EAGLE-3 drafter"))
        return 0
    if layer_ids != list(range(len(layer_ids))):
        problems.append(Problem(weights_file, "layers.*", "draft layers are not numbered 0..L-1",
                                "re-export the drafter", found=str(layer_ids)))
    return len(layer_ids)


def _later_layer_norm(names: set[str], num_layers: int, weights_file: str,
                      problems: list[Problem]) -> LaterLayerNorm | None:
    if num_layers < 2:
        return None
    styles = set()
    for i in range(1, num_layers):
        has_input = f"layers.{i}.input_layernorm.weight" in names
        has_hidden = f"layers.{i}.hidden_norm.weight" in names
        if has_input == has_hidden:
            problems.append(Problem(
                weights_file, f"layers.{i}.input_layernorm / layers.{i}.hidden_norm",
                "cannot tell how this layer normalises its input (exactly one of the two "
                "norms must exist for layers after the first)",
                "vanilla decoder layers (speculators, vLLM, ModelOpt) keep input_layernorm; "
                "SGLang-style layers keep hidden_norm; drop the unused one",
                found="both" if has_input else "neither"))
            continue
        styles.add(LaterLayerNorm.INPUT_LAYERNORM if has_input else LaterLayerNorm.HIDDEN_NORM)
    if len(styles) > 1:
        problems.append(Problem(weights_file, "layers.*", "later layers mix norm conventions",
                                "re-export the drafter"))
    return styles.pop() if len(styles) == 1 else LaterLayerNorm.INPUT_LAYERNORM


def _num_aux(facts: ConfigFacts, shapes: dict, config_file: str, weights_file: str,
             problems: list[Problem]) -> int:
    """The aux count: every place that states it must agree with fc's width."""
    fc = shapes.get("fc.weight")
    t = facts.target_hidden_size
    claims: dict[str, int] = {}
    if facts.declared_num_aux is not None:
        claims[f"{config_file}: num_aux_hidden_states"] = facts.declared_num_aux
    if facts.aux_layers.declared is not None:
        claims[f"{config_file}: {facts.aux_layers.source}"] = len(facts.aux_layers.declared)
    if fc is not None:
        if fc[1] % t:
            problems.append(Problem(
                weights_file, "fc.weight", "fc input width is not a multiple of the target hidden "
                "size", "set target_hidden_size to the width of one target hidden state",
                expected=f"A * {t} columns", found=f"shape {list(fc)}"))
            return facts.declared_num_aux or 3
        claims[f"{weights_file}: fc.weight (width {fc[1]} / target_hidden_size {t})"] = fc[1] // t
    values = set(claims.values())
    if len(values) > 1:
        problems.append(Problem(config_file, "num_aux_hidden_states / aux layer ids / fc.weight",
                                "the number of aux hidden states is inconsistent",
                                "make the ids, num_aux_hidden_states and fc agree (fc is what "
                                "the drafter was trained with)",
                                found="; ".join(f"{k} -> {v}" for k, v in claims.items())))
    return next(iter(values)) if len(values) == 1 else (fc[1] // t if fc else 3)


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


def _shape_differs(found: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """Shapes differ; a leading -1 (a part of a fused projection) matches any height."""
    if len(found) != len(expected):
        return True
    return found[1:] != expected[1:] or found[0] not in (-1, expected[0])


def _layer_types(facts: ConfigFacts, num_layers: int, config_file: str, notes: list[str],
                 problems: list[Problem]) -> tuple[str, ...]:
    default = "sliding_attention" if facts.sliding_window else "full_attention"
    if facts.layer_types is None:
        return (default,) * num_layers
    if facts.dialect is Dialect.NEMO:  # the target's config: its layer_types are the target's
        notes.append("layer_types ignored: NeMo configs describe the target's layers")
        return ("full_attention",) * num_layers
    if len(facts.layer_types) != num_layers:
        problems.append(Problem(config_file, "layer_types", "one entry per draft layer is needed",
                                "list one attention type per draft layer",
                                expected=str(num_layers), found=str(len(facts.layer_types))))
    return facts.layer_types[:num_layers]


def _check_shapes(spec: DrafterSpec, shapes: dict[str, tuple[int, ...]], index: _TensorIndex,
                  weights_file: str, problems: list[Problem]) -> list[str]:
    """Every expected tensor present with its shape; anything else is an error or a note."""
    expected = weight_names.expected_shapes(spec)
    notes = []
    fused_sums: dict[str, int] = {}
    for name, entry in index.entries.items():
        fused = _fused_parts(name)
        if fused is not None:
            fused_sums[name] = entry.shape[0]
            total = sum(expected.get(p, (0,))[0] for p in fused[1])
            if entry.shape[0] != total:
                problems.append(Problem(entry.file, entry.raw_name, "fused projection has the "
                                        "wrong height", "re-export the drafter",
                                        expected=str(total), found=str(entry.shape[0])))
    for name, shape in expected.items():
        if name not in shapes:
            if name == "d2t":
                continue  # reported by the vocab-map check, which knows about meta files
            problems.append(Problem(weights_file, name, "tensor missing",
                                    "use the complete checkpoint, or fix the config flag that "
                                    "asks for this tensor", expected=str(list(shape))))
        elif _shape_differs(shapes[name], shape):
            entry = index.entries[name]
            problems.append(Problem(entry.file, entry.raw_name, "wrong shape",
                                    "the config does not describe these weights; fix the config "
                                    "or use the matching checkpoint",
                                    expected=str(list(shape)), found=str(list(entry.shape))))
    for name in shapes:
        if name in expected:
            continue
        if name in weight_names.IGNORED_TENSORS:
            notes.append(f"{name} ignored: {weight_names.IGNORED_TENSORS[name]}")
            continue
        entry = index.entries[name]
        problems.append(Problem(entry.file, entry.raw_name, "unexpected tensor: no config flag "
                                "asks for it, and dropping it silently would change the model",
                                "set the config flag this tensor belongs to (bias, "
                                "attention_bias, fc_norm, norm_before_fc...) or remove it",
                                found=str(list(entry.shape))))
    return notes


def read_drafter(path: str | os.PathLike, target: str | os.PathLike | TargetInfo | None = None,
                 ) -> DrafterCheckpoint:
    """Read and validate a drafter directory (config + weights). Raises :class:`DrafterError`.

    ``target`` (a model directory, config file or :class:`TargetInfo`) adds the checks that
    need the target: aux indices in range, hidden width, vocabulary size.
    """
    directory = os.fspath(path)
    config_file = os.path.join(directory, "config.json")
    problems: list[Problem] = []
    try:
        with open(config_file, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        raise DrafterError([Problem(config_file, "config.json", f"cannot read ({exc})",
                                    "point at the drafter directory that holds config.json")]) from None
    dialect, dialect_problems = detect_dialect(config, config_file)
    if dialect_problems:
        raise DrafterError(dialect_problems)
    facts = read_config_facts(config, dialect, config_file, problems)
    files = _weight_files(directory, problems)
    index = _TensorIndex()
    for file in files:
        (_index_pickle if file.endswith((".bin", ".pt")) else _index_safetensors)(file, index, problems)
    if facts is None or not files or problems:
        raise DrafterError(problems)
    weights_file = files[0] if len(files) == 1 else directory
    for name in weight_names.PARALLEL_DRAFTING_TENSORS:
        if name in index.entries:
            raise DrafterError([Problem(weights_file, name, "this is a P-EAGLE / parallel-drafting "
                                        "head (it has a mask_hidden tensor)", PEAGLE_FIX)])

    shapes = _split_fused(index)
    names = set(shapes)
    num_layers = _count_layers(names, weights_file, problems)
    notes = list(facts.notes)
    if facts.declared_num_layers is not None and facts.declared_num_layers != num_layers:
        notes.append(f"num_hidden_layers says {facts.declared_num_layers}, the tensors hold "
                     f"{num_layers} layers; the tensors win")
    layer_kind = facts.layer_kind
    if "layers.0.self_attn.q_norm.weight" in names and layer_kind != "qwen3":
        layer_kind = "qwen3"
        notes.append("q_norm/k_norm tensors present: Qwen3-style draft layers")
    use_aux = facts.use_aux_hidden_state
    if not use_aux and "fc.weight" in names:
        problems.append(Problem(config_file, "eagle_config.use_aux_hidden_state",
                                "false, but the weights contain fc.weight",
                                "set use_aux_hidden_state to true"))
    meta = _meta_vocab_map(directory, problems) if "d2t" not in names else None
    draft_vocab = facts.draft_vocab_size
    if draft_vocab is None:
        lm_head = shapes.get("lm_head.weight")
        draft_vocab = lm_head[0] if lm_head else facts.vocab_size
        notes.append(f"draft_vocab_size not set: {draft_vocab} (from "
                     f"{'lm_head.weight' if lm_head else 'the target vocabulary'})")
    has_map = "d2t" in names or meta is not None
    if draft_vocab > facts.vocab_size:
        problems.append(Problem(config_file, "draft_vocab_size", "larger than the vocabulary",
                                "set draft_vocab_size to the drafter's lm_head rows",
                                expected=f"<= {facts.vocab_size}", found=str(draft_vocab)))
    elif draft_vocab < facts.vocab_size and not has_map:
        problems.append(Problem(
            weights_file, "d2t", f"reduced draft vocabulary ({draft_vocab} of {facts.vocab_size}) "
            "without a draft-to-target map", "add the d2t tensor from training (or eagle_meta.pt "
            "next to the weights); without it every drafted token id is wrong"))

    spec = DrafterSpec(
        path=directory, dialect=dialect, architecture=facts.architecture,
        files=tuple([config_file] + files + ([meta[0]] if meta else [])),
        num_layers=num_layers, hidden_size=facts.hidden_size,
        num_attention_heads=facts.num_attention_heads, num_key_value_heads=facts.num_key_value_heads,
        head_dim=facts.head_dim, intermediate_size=facts.intermediate_size,
        hidden_act=facts.hidden_act, rms_norm_eps=facts.rms_norm_eps, rope_theta=facts.rope_theta,
        rope_scaling=facts.rope_scaling, max_position_embeddings=facts.max_position_embeddings,
        layer_kind=layer_kind, attention_bias=facts.attention_bias,
        later_layer_norm=_later_layer_norm(names, num_layers, weights_file, problems),
        sliding_window=facts.sliding_window,
        layer_types=_layer_types(facts, num_layers, config_file, notes, problems),
        use_aux_hidden_state=use_aux,
        num_aux_hidden_states=_num_aux(facts, shapes, config_file, weights_file, problems) if use_aux else 1,
        aux_layers=facts.aux_layers, target_hidden_size=facts.target_hidden_size,
        fc_bias=facts.fc_bias, fc_norm=facts.fc_norm, norm_before_fc=facts.norm_before_fc,
        norm_before_residual=facts.norm_before_residual, norm_output=facts.norm_output,
        vocab_size=facts.vocab_size, draft_vocab_size=draft_vocab, has_vocab_map=has_map,
        tie_word_embeddings=facts.tie_word_embeddings,
        embed_tokens_from_target="embed_tokens.weight" not in names,
        lm_head_from_target="lm_head.weight" not in names and not facts.tie_word_embeddings,
        notes=(),
    )
    if spec.num_aux_hidden_states != 3 and spec.aux_layers.declared is None and use_aux:
        problems.append(Problem(
            config_file, "eagle_aux_hidden_state_layer_ids",
            f"fc takes {spec.num_aux_hidden_states} aux hidden states but the config names no "
            "layers, and the default taps are three", "write the trained layer ids into the config"))
    notes += _check_shapes(spec, shapes, index, weights_file, problems)
    if has_map:
        d2t, d2t_file = (index.read("d2t"), weights_file) if "d2t" in names else (meta[1], meta[0])
        if d2t.numel() == draft_vocab:
            t2d = index.read("t2d") if "t2d" in names else None
            _check_vocab_map(d2t, t2d, spec, d2t_file, problems)
        elif "d2t" not in names:  # a d2t tensor of the wrong length is caught by the shape check
            problems.append(Problem(d2t_file, "selected_token_ids",
                                    "vocab map length differs from the draft vocabulary",
                                    "use the meta file written with this checkpoint",
                                    expected=str(draft_vocab), found=str(d2t.numel())))
    if target is not None:
        problems += check_against_target(spec, target if isinstance(target, TargetInfo)
                                         else read_target(target))
    if problems:
        raise DrafterError(problems)
    return DrafterCheckpoint(replace(spec, notes=tuple(notes)), index,
                             None if meta is None else meta[1])
