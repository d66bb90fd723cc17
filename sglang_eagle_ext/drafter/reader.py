"""Read a drafter checkpoint directory into a validated :class:`DrafterCheckpoint`, once per process.

:func:`load_drafter` is the one entry point: it looks only at the config and the tensor headers
(names, shapes, dtypes) plus the small vocabulary map, so every problem is reported before any
weight is loaded or any GPU memory is taken, and it keeps the result for the process (SGLang asks
for the same drafter in several places). A changed file is read again. ``DrafterCheckpoint``
then streams canonical tensors.

One read flows one way: the config's values (:mod:`.dialects`, with NeMo's run config), then
the tensor index (:mod:`.tensors`), then what the tensors decide (each look returned as its own
:class:`Facts`), then the spec made of those values, then the checks of the tensors against it; a
``DrafterCheckpoint`` exists only once every check passed. Each ``read_*`` function looks at the
tensors once and returns what it decided; each ``check_*`` function returns the problems of the
tensors against a description; none writes into its caller's state.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import torch

from sglang_eagle_ext.drafter.dialects import PEAGLE_FIX, ConfigValues, read_config_values, with_run_config
from sglang_eagle_ext.drafter.spec import (GATED_ACTIVATIONS, IGNORED_TENSORS, PARALLEL_DRAFTING_TENSORS, Dialect,
                                           DrafterSpec, LaterLayerNorm, aux_ids_fix, declarations, default_of,
                                           expected_shapes, fused_parts, layer_index)
from sglang_eagle_ext.drafter.target import TargetInfo, check_against_target, read_target
from sglang_eagle_ext.drafter.tensors import JSON_FILE_LIMIT, FileBytes, TensorIndex, load_pickle, split_fused
from sglang_eagle_ext.errors import DrafterError, Problem, counted

# Weight files in the order they are looked for, relative to the checkpoint directory.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json", "consolidated/model.safetensors", "draft_model.pt")
# NeMo Automodel training state that carries the draft vocabulary, and the token map its SGLang
# helper writes next to the weights (the selected target ids, SGLang's --speculative-token-map).
META_FILES = ("eagle_meta.pt", "eagle3_meta.pt")
TOKEN_MAP_FILE = "speculative_token_map.pt"


@dataclass(frozen=True)
class DrafterCheckpoint:
    """A validated drafter: its canonical description and where its tensors are."""

    spec: DrafterSpec
    index: TensorIndex
    meta_d2t: torch.Tensor | None = None  # d2t from a NeMo meta file, when the weights have none

    def tensors(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """Every canonical tensor of :func:`~.spec.expected_shapes`, one at a time (fused
        ``qkv_proj`` / ``gate_up_proj`` split; ignored tensors such as ``t2d`` left out; ``d2t``
        int64, everything else cast to ``dtype`` when given)."""
        expected = expected_shapes(self.spec)
        for name in self.index.entries:
            fused = fused_parts(name)
            if fused is not None:
                sizes = [expected[p][0] for p in fused]
                for part, tensor in zip(fused, torch.split(self.index.read(name), sizes, dim=0)):
                    yield part, _cast(part, tensor, dtype)
            elif name in expected:
                yield name, _cast(name, self.index.read(name), dtype)
        if self.meta_d2t is not None and "d2t" not in self.index.entries:
            yield "d2t", self.meta_d2t

    def load_tensors(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """:meth:`tensors` as a dict."""
        return dict(self.tensors(dtype))


def _cast(name: str, tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    if name == "d2t":
        return tensor.long()
    return tensor if dtype is None else tensor.to(dtype)


# ---------------------------------------------------------------------------------------------
# One read per drafter per process
# ---------------------------------------------------------------------------------------------

_loaded: dict[str, tuple[tuple, DrafterCheckpoint]] = {}
_lock = threading.Lock()


def _fingerprint(directory: str, files: tuple[str, ...]) -> tuple:
    """What must be unchanged for a read to stand: the directory's entries and every file read."""
    try:
        return tuple((path, stat.st_ino, stat.st_size, stat.st_mtime_ns)
                     for path in (directory, *files) for stat in [os.stat(path)])
    except OSError:
        return ()


def load_drafter(path: str | os.PathLike) -> DrafterCheckpoint:
    """The validated checkpoint at ``path``: read and checked on first use, then kept for the
    process and read again only when one of its files (or the directory's entries) changed.
    Raises :class:`DrafterError` naming every problem."""
    directory = os.path.abspath(os.fspath(path))
    with _lock:
        cached = _loaded.get(directory)
        if cached is not None and cached[0] == _fingerprint(directory, cached[1].spec.files):
            return cached[1]
        checkpoint = _read(directory)
        _loaded[directory] = (_fingerprint(directory, checkpoint.spec.files), checkpoint)
        return checkpoint


def read_drafter(path: str | os.PathLike, target: str | os.PathLike | TargetInfo | None = None,
                 remote: Mapping[str, FileBytes] | None = None) -> DrafterCheckpoint:
    """:func:`load_drafter`, plus the checks that need the target (a model directory, config
    file or :class:`TargetInfo`): aux indices in range, hidden width, vocabulary size.
    ``remote``: weight files of ``path`` that are not on disk (a hub drafter's, path -> bytes read
    by range); such a read is checked the same way and not kept."""
    checkpoint = _read(os.path.abspath(os.fspath(path)), remote) if remote else load_drafter(path)
    if target is not None:
        problems = check_against_target(checkpoint.spec, target if isinstance(target, TargetInfo)
                                        else read_target(target))
        if problems:
            raise DrafterError(problems)
    return checkpoint


# ---------------------------------------------------------------------------------------------
# Reading and validation
# ---------------------------------------------------------------------------------------------

def _read_config(directory: str) -> Any:
    config_file = os.path.join(directory, "config.json")
    if not os.path.isdir(directory):
        what = "does not exist" if not os.path.lexists(directory) else "is not a directory"
        raise DrafterError([Problem(directory, "<path>", f"the drafter path {what}",
                                    "point at the drafter's model directory (it holds config.json "
                                    "and the weights)")])
    try:
        with open(config_file, "rb") as handle:
            data = handle.read(JSON_FILE_LIMIT + 1)
        if len(data) > JSON_FILE_LIMIT:
            raise DrafterError([Problem(config_file, "config.json", "far larger than any model config, "
                                        "so it is not parsed", "restore the config.json written with "
                                        "the checkpoint", expected=f"at most {JSON_FILE_LIMIT} bytes",
                                        found=f"{os.path.getsize(config_file)} bytes")])
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise DrafterError([Problem(config_file, "config.json", "missing", "point at the drafter "
                                    "directory that holds config.json (a trainer's epoch_*/step_* "
                                    "folder keeps it in model/)")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DrafterError([Problem(config_file, "config.json", f"cannot be read ({exc})",
                                    "re-download or re-export the checkpoint")]) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DrafterError([Problem(config_file, f"line {exc.lineno} column {exc.colno}",
                                    f"not valid JSON ({exc.msg})", "repair the file, or re-download "
                                    "or re-export the checkpoint")]) from None


def shard_names(index_path: str) -> list[str]:
    """The shard files a ``*.index.json`` names; ValueError saying why for an unreadable index."""
    try:
        size = os.path.getsize(index_path)
        if size > JSON_FILE_LIMIT:
            raise ValueError(f"{size} bytes, far larger than a shard index (at most {JSON_FILE_LIMIT} are parsed)")
        with open(index_path, encoding="utf-8") as handle:
            shards = sorted(set(json.load(handle)["weight_map"].values()))
    except (OSError, KeyError, TypeError, AttributeError) as exc:  # unreadable, or not {"weight_map": {...}}
        raise ValueError(f"{type(exc).__name__}: {exc}") from None
    if not all(isinstance(s, str) and s for s in shards):
        raise ValueError("shard names must be file names")
    return shards


def _weight_files(directory: str, problems: list[Problem], remote: Mapping[str, FileBytes]) -> list[str]:
    for candidate in WEIGHT_FILES:
        path = os.path.join(directory, candidate)
        if not (os.path.isfile(path) or path in remote):
            continue
        if not candidate.endswith(".index.json"):
            return [path]
        try:
            shards = shard_names(path)
        except ValueError as exc:
            problems.append(Problem(path, "weight_map", f"unreadable shard index ({exc})",
                                    "re-download the checkpoint"))
            return []
        paths = [os.path.join(directory, shard) for shard in shards]
        absent = [p for p in paths if not (os.path.isfile(p) or p in remote)]
        if absent:
            problems.append(Problem(path, "weight_map", "shards listed but missing (or unreadable links)",
                                    "download every shard", found=", ".join(absent)))
            return []
        return paths
    problems.append(Problem(directory, "<weights>", "no weight file found",
                            "the directory must hold one of: " + ", ".join(WEIGHT_FILES)))
    return []


def _read(directory: str, remote: Mapping[str, FileBytes] | None = None) -> DrafterCheckpoint:
    """Read and validate ``directory`` (config + weight headers + vocab map); files in ``remote``
    are read through it instead of from disk."""
    remote = remote or {}
    config_file = os.path.join(directory, "config.json")
    problems: list[Problem] = []
    config = read_config_values(_read_config(directory), config_file, problems)
    if config is None:
        raise DrafterError(problems)
    config, run_config, run_config_problems = with_run_config(directory, config)
    problems += run_config_problems
    files = _weight_files(directory, problems, remote)
    index = TensorIndex()
    for file in files:
        index.index_file(file, problems, remote.get(file))
    if not files or problems:
        raise DrafterError(problems)
    weights_file = files[0] if len(files) == 1 else directory
    for name in PARALLEL_DRAFTING_TENSORS:
        if name in index.entries:
            raise DrafterError([Problem(weights_file, name, "this is a P-EAGLE / parallel-drafting "
                                        "head (it has a mask_hidden tensor)", PEAGLE_FIX)])

    shapes = split_fused(index)
    if config.values["hidden_act"] not in GATED_ACTIVATIONS:
        problems.append(Problem(config_file, config.stated.get("hidden_act", "hidden_act"), "an MLP activation "
                                "no engine serves in an EAGLE-3 drafter", "use a drafter trained with one of "
                                + ", ".join(GATED_ACTIVATIONS), found=repr(config.values["hidden_act"])))
    layers = read_tensor_facts(config, shapes, weights_file)
    vocabulary, side_map = read_vocabulary(directory, config, shapes, weights_file)
    head = read_head_facts(config, shapes)
    looks = (layers, vocabulary, head)
    problems += [problem for facts in looks for problem in facts.problems]
    if problems:
        raise DrafterError(problems)
    read = (config_file, *files, *(path for path in (side_map and side_map.file, run_config) if path))
    notes = (*config.notes, *(note for facts in looks for note in facts.notes))
    spec = DrafterSpec.from_values(**{**config.values, **layers.values, **vocabulary.values, **head.values,
                                      "path": directory, "dialect": config.dialect, "files": read, "notes": notes})
    problems = check_aux_layers_named(spec) + check_shapes(spec, shapes, index, weights_file)
    if spec.has_vocab_map and not problems:
        problems = check_vocab_map(spec, index, shapes, side_map, weights_file)
    if problems:
        raise DrafterError(problems)
    return DrafterCheckpoint(spec, index, None if side_map is None else side_map.d2t)


# ---------------------------------------------------------------------------------------------
# What the tensors state
# ---------------------------------------------------------------------------------------------

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
