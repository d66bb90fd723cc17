"""Read a drafter checkpoint directory into a validated :class:`DrafterCheckpoint`, once per process.

:func:`load_drafter` is the one entry point: it looks only at the config and the tensor headers
(names, shapes, dtypes) plus the small vocabulary map, so every problem is reported before any
weight is loaded or any GPU memory is taken, and it keeps the result for the process (SGLang asks
for the same drafter in several places). A changed file is read again. ``DrafterCheckpoint``
then streams canonical tensors.

One read flows one way: the config's values (:mod:`.dialects`, with NeMo's run config), then
what the tensors decide (:mod:`.tensor_facts`, each look returned as its own :class:`Facts`), then
the spec made of those values, then the checks of the tensors against it; a
``DrafterCheckpoint`` exists only once every check passed.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping

import torch

from sglang_eagle_ext.drafter import tensor_facts
from sglang_eagle_ext.drafter.dialects import PEAGLE_FIX, ConfigValues, check_concatenation_order, read_config_values
from sglang_eagle_ext.drafter.run_config import nemo_aux_layers
from sglang_eagle_ext.drafter.spec import GATED_ACTIVATIONS, Dialect, DrafterSpec, aux_ids_fix
from sglang_eagle_ext.drafter.target import TargetInfo, check_against_target, read_target
from sglang_eagle_ext.drafter.tensors import JSON_FILE_LIMIT, FileBytes, TensorIndex
from sglang_eagle_ext.errors import DrafterError, Problem

# Weight files in the order they are looked for, relative to the checkpoint directory.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json", "consolidated/model.safetensors", "draft_model.pt")


@dataclass(frozen=True)
class DrafterCheckpoint:
    """A validated drafter: its canonical description and where its tensors are."""

    spec: DrafterSpec
    index: TensorIndex
    meta_d2t: torch.Tensor | None = None  # d2t from a NeMo meta file, when the weights have none

    def tensors(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """Every canonical tensor of :func:`tensor_facts.expected_shapes`, one at a time (fused
        ``qkv_proj`` / ``gate_up_proj`` split; ignored tensors such as ``t2d`` left out; ``d2t``
        int64, everything else cast to ``dtype`` when given)."""
        expected = tensor_facts.expected_shapes(self.spec)
        for name in self.index.entries:
            fused = tensor_facts.fused_parts(name)
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


def _with_run_config(directory: str, config: ConfigValues) -> tuple[ConfigValues, str | None, list[Problem]]:
    """``config`` with NeMo's trained aux ids from the run config beside its weights (config.json,
    the target's, names none); the run config's path where one was read, and its problems."""
    if config.dialect is not Dialect.NEMO:
        return config, None, []
    problems: list[Problem] = []
    stated = "aux_layers" in config.stated
    layers, path = nemo_aux_layers(directory, config.file, stated, problems)
    if layers is None:
        if path is not None and not stated:
            note = f"{path} names no aux_layer_ids: NeMo's default taps (the run set none)"
            return replace(config, notes=[*config.notes, note]), path, problems
        return config, path, problems
    if stated and config.values["aux_layers"].hidden_state_indices() != layers.hidden_state_indices():
        problems.append(Problem(config.file, config.stated["aux_layers"], "names other aux layers than the run "
                                f"config NeMo trained with ({path}: {layers.source})", aux_ids_fix(layers.declared)
                                + "; NeMo's run config holds the ids it trained with (layer outputs)",
                                expected=f"hidden states {list(layers.hidden_state_indices())}",
                                found=f"hidden states {list(config.values['aux_layers'].hidden_state_indices())}"))
        return config, path, problems
    check_concatenation_order(config.dialect, layers, path, problems)
    return replace(config, values={**config.values, "aux_layers": layers},
                   stated={**config.stated, "aux_layers": layers.source}), path, problems


def _read(directory: str, remote: Mapping[str, FileBytes] | None = None) -> DrafterCheckpoint:
    """Read and validate ``directory`` (config + weight headers + vocab map); files in ``remote``
    are read through it instead of from disk."""
    remote = remote or {}
    config_file = os.path.join(directory, "config.json")
    problems: list[Problem] = []
    config = read_config_values(_read_config(directory), config_file, problems)
    if config is None:
        raise DrafterError(problems)
    config, run_config, run_config_problems = _with_run_config(directory, config)
    problems += run_config_problems
    files = _weight_files(directory, problems, remote)
    index = TensorIndex()
    for file in files:
        index.index_file(file, problems, remote.get(file))
    if not files or problems:
        raise DrafterError(problems)
    weights_file = files[0] if len(files) == 1 else directory
    for name in tensor_facts.PARALLEL_DRAFTING_TENSORS:
        if name in index.entries:
            raise DrafterError([Problem(weights_file, name, "this is a P-EAGLE / parallel-drafting "
                                        "head (it has a mask_hidden tensor)", PEAGLE_FIX)])

    shapes = tensor_facts.split_fused(index)
    if config.values["hidden_act"] not in GATED_ACTIVATIONS:
        problems.append(Problem(config_file, config.stated.get("hidden_act", "hidden_act"), "an MLP activation "
                                "no engine serves in an EAGLE-3 drafter", "use a drafter trained with one of "
                                + ", ".join(GATED_ACTIVATIONS), found=repr(config.values["hidden_act"])))
    layers = tensor_facts.read_tensor_facts(config, shapes, weights_file)
    vocabulary, side_map = tensor_facts.read_vocabulary(directory, config, shapes, weights_file)
    head = tensor_facts.read_head_facts(config, shapes)
    looks = (layers, vocabulary, head)
    problems += [problem for facts in looks for problem in facts.problems]
    if problems:
        raise DrafterError(problems)
    read = (config_file, *files, *(path for path in (side_map and side_map.file, run_config) if path))
    notes = (*config.notes, *(note for facts in looks for note in facts.notes))
    spec = DrafterSpec.from_values(**{**config.values, **layers.values, **vocabulary.values, **head.values,
                                      "path": directory, "dialect": config.dialect, "files": read, "notes": notes})
    problems = tensor_facts.check_aux_layers_named(spec) + tensor_facts.check_shapes(spec, shapes, index, weights_file)
    if spec.has_vocab_map and not problems:
        problems = tensor_facts.check_vocab_map(spec, index, shapes, side_map, weights_file)
    if problems:
        raise DrafterError(problems)
    return DrafterCheckpoint(spec, index, None if side_map is None else side_map.d2t)
