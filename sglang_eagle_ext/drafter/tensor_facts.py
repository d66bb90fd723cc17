"""A drafter's canonical tensors: the names and shapes a description asks for, what the tensors
state about the drafter, and the checks of the tensors against its description.

Canonical names (``i`` = draft layer, ``j`` = aux chunk; :mod:`.tensors` maps every dialect's
spelling onto them)::

    embed_tokens.weight                   [V, H]        only when the checkpoint has one
    fc.weight / fc.bias                   [H, A*T] / [H] absent when use_aux_hidden_state is False
    input_norm.weight                     [A*T]         norm_before_fc
    fc_norm.{j}.weight                    [T]           fc_norm
    layers.0.input_layernorm.weight       [H]           normalises the token embedding
    layers.0.hidden_norm.weight           [H]           normalises fc(aux) / the carried hidden
    layers.{i}.input_layernorm.weight     [H]           i >= 1, LaterLayerNorm.INPUT_LAYERNORM
    layers.{i}.hidden_norm.weight         [H]           i >= 1, LaterLayerNorm.HIDDEN_NORM
    layers.{i}.self_attn.{q,k,v}_proj.weight  [nh*d | nkv*d, 2H for i == 0 else H]
    layers.{i}.self_attn.{q,k,v}_proj.bias    [nh*d | nkv*d]  attention_bias
    layers.{i}.self_attn.o_proj.weight    [H, nh*d]
    layers.{i}.self_attn.o_proj.bias      [H]           o_proj_bias
    layers.{i}.self_attn.{q,k}_norm.weight [d]          layer_kind == "qwen3"
    layers.{i}.post_attention_layernorm.weight [H]
    layers.{i}.mlp.{gate,up}_proj.weight  [I, H]
    layers.{i}.mlp.down_proj.weight       [H, I]
    layers.{i}.mlp.{gate,up,down}_proj.bias [I | H]     mlp_bias
    norm.weight                           [H]
    lm_head.weight                        [Vd, H]       only when the checkpoint has one
    d2t                                   [Vd] int64    offsets, only when Vd < V

Fused ``qkv_proj`` / ``gate_up_proj`` are split on load. Each ``read_*`` function looks at the
tensors once and returns what it decided (:class:`Facts`); each ``check_*`` function returns the
problems of the tensors against a description. Nothing here writes into the caller's state.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from sglang_eagle_ext.drafter.dialects import ConfigValues
from sglang_eagle_ext.drafter.spec import (Dialect, DrafterSpec, LaterLayerNorm, aux_ids_fix, declarations,
                                           default_of)
from sglang_eagle_ext.drafter.tensors import TensorIndex, load_pickle
from sglang_eagle_ext.errors import DrafterError, Problem, counted

# Tensors that some producers save but no engine uses at inference. Reading them is noted,
# never an error: `t2d` is the inverse of `d2t`, the `verifier_*` pair is speculators'
# training-only copy of the target head.
IGNORED_TENSORS = {
    "t2d": "target-to-draft membership mask; inference uses d2t only (it is checked against d2t)",
    "verifier_norm.weight": "speculators training-only copy of the target's final norm",
    "verifier_lm_head.weight": "speculators training-only copy of the target's lm_head",
}

# Tensors that only a parallel-drafting (P-EAGLE) head has.
PARALLEL_DRAFTING_TENSORS = ("mask_hidden",)

# fused name -> (canonical parts in concatenation order)
FUSED_PROJECTIONS = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}
_LAYER_RE = re.compile(r"^layers\.(\d+)\.")

# NeMo Automodel training state that carries the draft vocabulary, and the token map its SGLang
# helper writes next to the weights (the selected target ids, SGLang's --speculative-token-map).
META_FILES = ("eagle_meta.pt", "eagle3_meta.pt")
TOKEN_MAP_FILE = "speculative_token_map.pt"


@dataclass(frozen=True)
class Facts:
    """What one look at the tensors decided: :class:`DrafterSpec` field values, the notes worth
    logging and the problems found."""

    values: Mapping[str, Any]
    notes: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()


@dataclass(frozen=True)
class SideVocabularyMap:
    """``d2t`` from a file beside the weights (NeMo Automodel's draft vocabulary), when the
    weights hold none."""

    file: str
    d2t: torch.Tensor


# ---------------------------------------------------------------------------------------------
# Names and shapes
# ---------------------------------------------------------------------------------------------

def fused_parts(name: str) -> tuple[str, ...] | None:
    """The canonical parts of a fused projection name, in concatenation order (None otherwise)."""
    for fused, parts in FUSED_PROJECTIONS.items():
        if name.endswith(f".{fused}.weight") and layer_index(name) is not None:
            prefix = name[: -len(f"{fused}.weight")]
            return tuple(f"{prefix}{part}.weight" for part in parts)
    return None


def layer_index(name: str) -> int | None:
    """The draft layer a canonical name belongs to, or None for model-level tensors."""
    match = _LAYER_RE.match(name)
    return int(match.group(1)) if match else None


def expected_shapes(spec: DrafterSpec) -> dict[str, tuple[int, ...]]:
    """Every canonical tensor the checkpoint must contain for ``spec``, with its shape."""
    h, t, a = spec.hidden_size, spec.target_hidden_size, spec.num_aux_hidden_states
    q_out = spec.num_attention_heads * spec.head_dim
    kv_out = spec.num_key_value_heads * spec.head_dim
    inter = spec.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"norm.weight": (h,)}
    if not spec.embed_tokens_from_target:
        shapes["embed_tokens.weight"] = (spec.vocab_size, h)
    if not spec.lm_head_from_target and not spec.tie_word_embeddings:
        shapes["lm_head.weight"] = (spec.draft_vocab_size, h)
    if spec.has_vocab_map:
        shapes["d2t"] = (spec.draft_vocab_size,)
    if spec.use_aux_hidden_state:
        shapes["fc.weight"] = (h, a * t)
        if spec.fc_bias:
            shapes["fc.bias"] = (h,)
        if spec.norm_before_fc:
            shapes["input_norm.weight"] = (a * t,)
        if spec.fc_norm:
            shapes.update({f"fc_norm.{j}.weight": (t,) for j in range(a)})
    for i in range(spec.num_layers):
        p = f"layers.{i}."
        in_features = 2 * h if i == 0 else h
        if i == 0 or spec.later_layer_norm is LaterLayerNorm.INPUT_LAYERNORM:
            shapes[p + "input_layernorm.weight"] = (h,)
        if i == 0 or spec.later_layer_norm is LaterLayerNorm.HIDDEN_NORM:
            shapes[p + "hidden_norm.weight"] = (h,)
        for proj, out in (("q_proj", q_out), ("k_proj", kv_out), ("v_proj", kv_out)):
            shapes[f"{p}self_attn.{proj}.weight"] = (out, in_features)
            if spec.attention_bias:
                shapes[f"{p}self_attn.{proj}.bias"] = (out,)
        shapes[p + "self_attn.o_proj.weight"] = (h, q_out)
        if spec.o_proj_bias:
            shapes[p + "self_attn.o_proj.bias"] = (h,)
        if spec.layer_kind == "qwen3":
            shapes[p + "self_attn.q_norm.weight"] = (spec.head_dim,)
            shapes[p + "self_attn.k_norm.weight"] = (spec.head_dim,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes[p + "mlp.gate_proj.weight"] = (inter, h)
        shapes[p + "mlp.up_proj.weight"] = (inter, h)
        shapes[p + "mlp.down_proj.weight"] = (h, inter)
        if spec.mlp_bias:
            shapes.update({p + "mlp.gate_proj.bias": (inter,), p + "mlp.up_proj.bias": (inter,),
                           p + "mlp.down_proj.bias": (h,)})
    return shapes


def split_fused(index: TensorIndex) -> dict[str, tuple[int, ...]]:
    """Canonical name -> shape, with fused projections replaced by their parts' names.

    The parts' first dimensions are unknown until the spec exists, so they carry the fused
    shape with a leading ``-1``; :func:`check_shapes` checks the sum instead.
    """
    shapes = {}
    for name, entry in index.entries.items():
        fused = fused_parts(name)
        for part in fused or ():
            shapes[part] = (-1,) + entry.shape[1:]
        if fused is None:
            shapes[name] = entry.shape
    return shapes


# ---------------------------------------------------------------------------------------------
# What the tensors state
# ---------------------------------------------------------------------------------------------

def read_tensor_facts(config: ConfigValues, shapes: dict[str, tuple[int, ...]], weights_file: str) -> Facts:
    """The layer count, the layer kind, biases, how later layers normalise their input, the
    per-layer attention types and the aux count fc takes (names and shapes from
    :func:`split_fused`)."""
    stated, names = config.values, set(shapes)
    values: dict[str, Any] = {}
    notes: list[str] = []
    problems: list[Problem] = []
    values["num_layers"] = num_layers = _count_layers(names, weights_file, config, problems)
    if "layers.0.self_attn.q_norm.weight" in names and stated["layer_kind"] != "qwen3":
        values["layer_kind"] = "qwen3"
        notes.append("q_norm/k_norm tensors present: Qwen3-style draft layers")
    values["o_proj_bias"] = "layers.0.self_attn.o_proj.bias" in names
    for flag, tensor in (("attention_bias", "layers.0.self_attn.q_proj.bias"),
                         ("mlp_bias", "layers.0.mlp.gate_proj.bias")):
        if flag not in config.stated and tensor in names:
            # a config serialised as a diff against its class's defaults (gpt-oss: attention_bias
            # true) leaves the flag out; the biases in the weights state it
            values[flag] = True
            notes.append(f"{flag} not in the config: true, as the weights hold {tensor}")
    values["later_layer_norm"] = _later_layer_norm(names, num_layers, weights_file, problems)
    layer_types = stated["layer_types"]
    if layer_types is not None and len(layer_types) == num_layers:
        values["layer_types"] = layer_types
    else:
        values["layer_types"] = default_of(declarations()["layer_types"], {**stated, "num_layers": num_layers})
        if layer_types is not None:  # a wrong length is the layer count's problem, reported there
            notes.append(f"layer_types lists {counted(len(layer_types), 'layer')}; the tensors hold {num_layers}")
    use_aux = stated["use_aux_hidden_state"]
    first_q = shapes.get("layers.0.self_attn.q_proj.weight")
    if (not use_aux and "layers.0.hidden_norm.weight" not in names and first_q
            and first_q[-1] == stated["hidden_size"]):
        raise DrafterError([Problem(
            config.file, config.stated.get("use_aux_hidden_state", "eagle_config.use_aux_hidden_state"),
            "an EAGLE head without aux hidden states whose first layer reads only the target's last hidden "
            "state (q/k/v of width H, no fc, no hidden_norm) and never the token embedding, which SGLang's "
            "EAGLE3 worker always feeds it (layer 0 of an EAGLE-3 drafter is 2H wide)",
            "serve it with the runtime it was exported for (ModelOpt / TensorRT-LLM), or re-train it as an "
            "EAGLE-3 drafter (use_aux_hidden_state: true)", expected=f"layers.0 q_proj input width "
            f"{2 * stated['hidden_size']}", found=f"{first_q[-1]} ({weights_file})")])
    if not use_aux and "fc.weight" in names:
        problems.append(Problem(config.file, "eagle_config.use_aux_hidden_state",
                                "false, but the weights contain fc.weight",
                                "set use_aux_hidden_state to true"))
    values["num_aux_hidden_states"] = _num_aux(config, shapes, weights_file, problems) if use_aux else 1
    return Facts(values, tuple(notes), tuple(problems))


def _count_layers(names, weights_file: str, config: ConfigValues, problems: list[Problem]) -> int:
    layer_ids = sorted({i for i in map(layer_index, names) if i is not None})
    if not layer_ids:
        problems.append(Problem(weights_file, "layers.*", "no decoder layer tensors",
                                "check that the file is an EAGLE-3 drafter"))
        return 0
    if layer_ids != list(range(len(layer_ids))):
        problems.append(Problem(weights_file, "layers.*", "draft layers are not numbered 0..L-1",
                                "re-export the drafter", found=str(layer_ids)))
    count = len(layer_ids)
    claimed = config.values["num_layers"]
    if claimed is not None and claimed != count:
        problems.append(Problem(
            config.file, config.stated["num_layers"], f"the config says {counted(claimed, 'draft layer')}, the "
            f"weights hold {count} ({weights_file})", "use the config written with these weights, or "
            f"set {config.stated['num_layers']} to {count} if the weights are the ones you trained",
            expected=f"{count} (layers in the weights)", found=str(claimed)))
    return count


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


def _num_aux(config: ConfigValues, shapes: dict, weights_file: str, problems: list[Problem]) -> int:
    """The aux count: every place that states it must agree with fc's width."""
    fc = shapes.get("fc.weight")
    t = config.values["target_hidden_size"]
    declared, aux = config.values["num_aux_hidden_states"], config.values["aux_layers"]
    claims: dict[str, int] = {}
    if declared is not None:
        claims[f"{config.file}: num_aux_hidden_states"] = declared
    if aux.declared is not None:
        claims[f"{config.file}: {aux.source}"] = len(aux.declared)
    if fc is not None and len(fc) == 2 and t:
        if fc[1] % t:
            problems.append(Problem(
                weights_file, "fc.weight", "fc input width is not a multiple of the target hidden "
                "size", "set target_hidden_size to the width of one target hidden state",
                expected=f"A * {t} columns", found=f"shape {list(fc)}"))
            return declared or 3
        claims[f"{weights_file}: fc.weight (width {fc[1]} / target_hidden_size {t})"] = fc[1] // t
    counts = set(claims.values())
    if len(counts) > 1:
        problems.append(Problem(config.file, "num_aux_hidden_states / aux layer ids / fc.weight",
                                "the number of aux hidden states is inconsistent",
                                "make the ids, num_aux_hidden_states and fc agree (fc is what "
                                "the drafter was trained with)",
                                found="; ".join(f"{k} -> {v}" for k, v in claims.items())))
    return counts.pop() if len(counts) == 1 else 3


def read_vocabulary(directory: str, config: ConfigValues, shapes: dict[str, tuple[int, ...]],
                    weights_file: str) -> tuple[Facts, SideVocabularyMap | None]:
    """The draft vocabulary's size and whether it has a map; the map from a file beside the
    weights when the weights hold none."""
    names, vocab = set(shapes), config.values["vocab_size"]
    lm_head = shapes.get("lm_head.weight")
    draft_vocab = config.values["draft_vocab_size"]
    notes: list[str] = []
    problems: list[Problem] = []
    if draft_vocab is None:
        draft_vocab = lm_head[0] if lm_head else vocab
        notes.append(f"draft_vocab_size not set: {draft_vocab} (from "
                     f"{'lm_head.weight' if lm_head else 'the target vocabulary'})")
    side_map = (_side_vocabulary_map(directory, draft_vocab, problems)
                if "d2t" not in names and draft_vocab < vocab else None)
    has_map = "d2t" in names or side_map is not None
    if draft_vocab > vocab:
        problems.append(Problem(config.file, "draft_vocab_size", "larger than the vocabulary",
                                "set draft_vocab_size to the drafter's lm_head rows",
                                expected=f"<= {vocab}", found=str(draft_vocab)))
    elif draft_vocab < vocab and not has_map:
        problems.append(Problem(
            weights_file, "d2t", f"reduced draft vocabulary ({draft_vocab} of {vocab}) "
            "without a draft-to-target map", "add the d2t tensor from training (or eagle_meta.pt "
            "next to the weights); without it every drafted token id is wrong"))
    facts = Facts({"draft_vocab_size": draft_vocab, "has_vocab_map": has_map}, tuple(notes), tuple(problems))
    return facts, side_map


def _side_vocabulary_map(directory: str, draft_vocab: int, problems: list[Problem]) -> SideVocabularyMap | None:
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
        return SideVocabularyMap(path, ids.long() - torch.arange(ids.numel()))
    return None


def read_head_facts(config: ConfigValues, shapes: dict[str, tuple[int, ...]]) -> Facts:
    """Whether the embedding and lm_head come from the target, and what a producer's config
    states wrongly about them, as its weights show; notes for the tensors no engine uses."""
    names = set(shapes)
    tie = config.values["tie_word_embeddings"]
    notes = []
    if config.dialect is Dialect.ANGELSLIM and tie and "lm_head.weight" in names:
        # AngelSlim's draft model always builds its own lm_head; its configs copy the target's flag.
        notes.append("tie_word_embeddings = true ignored: AngelSlim drafters keep their own lm_head "
                     "(which this checkpoint has)")
        tie = False
    notes += [f"{name} ignored: {IGNORED_TENSORS[name]}" for name in shapes if name in IGNORED_TENSORS]
    return Facts({"tie_word_embeddings": tie, "embed_tokens_from_target": "embed_tokens.weight" not in names,
                  "lm_head_from_target": "lm_head.weight" not in names and not tie}, tuple(notes))


# ---------------------------------------------------------------------------------------------
# The tensors against a description
# ---------------------------------------------------------------------------------------------

def check_aux_layers_named(spec: DrafterSpec) -> list[Problem]:
    """fc taking other than the default three aux states needs the trained layer ids."""
    if spec.num_aux_hidden_states != 3 and spec.aux_layers.declared is None and spec.use_aux_hidden_state:
        return [Problem(spec.files[0], "eagle_aux_hidden_state_layer_ids",
                        f"fc takes {spec.num_aux_hidden_states} aux hidden states but the config names no "
                        "layers, and the default taps are three", aux_ids_fix())]
    return []


def _shape_differs(found: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """Shapes differ; a leading -1 (a part of a fused projection) matches any height."""
    if len(found) != len(expected):
        return True
    return found[1:] != expected[1:] or found[0] not in (-1, expected[0])


def check_shapes(spec: DrafterSpec, shapes: dict[str, tuple[int, ...]], index: TensorIndex,
                 weights_file: str) -> list[Problem]:
    """Every expected tensor present with its shape and a usable dtype, and no tensor that
    neither the description asks for nor :data:`IGNORED_TENSORS` names."""
    expected = expected_shapes(spec)
    problems = []
    for name, entry in index.entries.items():
        fused = fused_parts(name)
        if fused is not None:
            total = sum(expected.get(p, (0,))[0] for p in fused)
            if entry.shape[0] != total:
                problems.append(Problem(entry.file, entry.raw_name, "fused projection has the "
                                        "wrong height", "re-export the drafter",
                                        expected=str(total), found=str(entry.shape[0])))
        integral = name in ("d2t", "t2d")
        if (name in expected or fused) and (entry.dtype is None or entry.dtype.is_floating_point == integral):
            problems.append(Problem(entry.file, entry.raw_name, "unusable dtype",
                                    "re-export the drafter in its training dtype",
                                    expected="an integer table" if integral else "a floating-point weight",
                                    found=str(entry.dtype).replace("torch.", "")))
    for name, shape in expected.items():
        if name not in shapes:
            if name == "d2t":
                continue  # reported by the vocab-map check, which knows about meta files
            problems.append(Problem(weights_file, name, "tensor missing",
                                    "use the complete checkpoint, or fix the config flag that "
                                    "asks for this tensor", expected=str(list(shape))))
        elif _shape_differs(shapes[name], shape):
            entry = index.entries.get(name) or next(e for n, e in index.entries.items()
                                                     if name in (fused_parts(n) or ()))
            problems.append(Problem(entry.file, entry.raw_name, "wrong shape",
                                    "the config does not describe these weights; fix the config "
                                    "or use the matching checkpoint",
                                    expected=str(list(shape)), found=str(list(entry.shape))))
    for name in shapes:
        if name in expected or name in IGNORED_TENSORS:
            continue
        entry = index.entries[name]
        problems.append(Problem(entry.file, entry.raw_name, "unexpected tensor: no config flag "
                                "asks for it, and dropping it silently would change the model",
                                "set the config flag this tensor belongs to (bias, "
                                "attention_bias, fc_norm, norm_before_fc...) or remove it",
                                found=str(list(entry.shape))))
    return problems


def check_vocab_map(spec: DrafterSpec, index: TensorIndex, shapes: dict[str, tuple[int, ...]],
                    side_map: SideVocabularyMap | None, weights_file: str) -> list[Problem]:
    """The map of ``spec`` (from the weights, else ``side_map``) against its vocabulary."""
    if "d2t" in shapes:
        d2t, d2t_file = index.read("d2t"), weights_file
    else:
        d2t, d2t_file = side_map.d2t, side_map.file
    t2d = (index.read("t2d") if "t2d" in shapes and shapes["t2d"] == (spec.vocab_size,)
           and index.entries["t2d"].dtype is not None else None)
    return _check_vocab_map(d2t, t2d, spec.vocab_size, d2t_file)


def _check_vocab_map(d2t: torch.Tensor, t2d: torch.Tensor | None, vocab_size: int, file: str) -> list[Problem]:
    if d2t.dtype.is_floating_point or d2t.dim() != 1:
        return [Problem(file, "d2t", "must be a 1-D integer offset table", "re-export the vocab map",
                        found=f"{d2t.dtype} {list(d2t.shape)}")]
    target_ids = d2t.long() + torch.arange(d2t.numel())
    outside = ((target_ids < 0) | (target_ids >= vocab_size)).nonzero().flatten()
    if outside.numel():
        return [Problem(
            file, "d2t", f"{outside.numel()} draft tokens map outside the target vocabulary "
            f"(first: draft {outside[0].item()} -> target {target_ids[outside[0]].item()})",
            "d2t holds offsets: target_id = draft_id + d2t[draft_id]; re-export the map",
            expected=f"target ids in [0, {vocab_size})")]
    problems = []
    if torch.unique(target_ids).numel() != target_ids.numel():
        problems.append(Problem(file, "d2t", "several draft tokens map to the same target token",
                                "re-export the vocab map"))
    if t2d is not None and (t2d.numel() != vocab_size or not bool(t2d.bool()[target_ids].all())
                            or int(t2d.bool().sum()) != target_ids.numel()):
        problems.append(Problem(file, "t2d", "disagrees with d2t",
                                "re-export both maps from the same token selection"))
    return problems
