"""Where a checkpoint's tensors are: names, shapes and dtypes from file headers, data on demand.

Safetensors headers are read without touching tensor data; torch pickles are opened
memory-mapped (``weights_only=True``, never arbitrary code), so indexing a checkpoint costs its
headers whatever sizes the files claim. :meth:`TensorIndex.read` then reads one tensor.
"""

from __future__ import annotations

import pickle
import zipfile
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from sglang_eagle_ext.drafter import weight_names
from sglang_eagle_ext.errors import Problem

# safetensors dtype names -> torch dtypes (those a drafter can hold)
_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}


@dataclass(frozen=True)
class TensorEntry:
    file: str
    raw_name: str
    shape: tuple[int, ...]
    dtype: torch.dtype | None  # None: a dtype no drafter holds (reported by the reader)

    @property
    def nbytes(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count * (self.dtype.itemsize if self.dtype is not None else 1)


@dataclass
class TensorIndex:
    """Canonical name -> where the tensor lives."""

    entries: dict[str, TensorEntry] = field(default_factory=dict)
    pickled: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)  # file -> mmapped tensors

    def read(self, name: str) -> torch.Tensor:
        """One tensor's data (a copy in memory)."""
        entry = self.entries[name]
        if entry.file in self.pickled:
            return self.pickled[entry.file][entry.raw_name].clone()
        with safe_open(entry.file, framework="pt") as handle:
            return handle.get_tensor(entry.raw_name)

    def add(self, file: str, raw: str, shape, dtype: torch.dtype, problems: list[Problem]) -> None:
        name = weight_names.canonical_name(raw)
        if name in self.entries:
            first = self.entries[name]
            where = "in the same file" if first.file == file else f"(also in {first.file})"
            problems.append(Problem(file, raw, f"the tensor {name!r} is stored twice {where}",
                                    f"keep one of {first.raw_name!r} and {raw!r}: remove the duplicate "
                                    "(a shard index must map each tensor to one shard)"))
            return
        self.entries[name] = TensorEntry(file, raw, tuple(int(s) for s in shape), dtype)

    def index_file(self, path: str, problems: list[Problem]) -> None:
        if path.endswith((".bin", ".pt")):
            self._index_pickle(path, problems)
        else:
            self._index_safetensors(path, problems)

    def _index_safetensors(self, path: str, problems: list[Problem]) -> None:
        try:
            with safe_open(path, framework="pt") as handle:  # checks every byte range against the file
                for raw in handle.keys():
                    tensor = handle.get_slice(raw)
                    self.add(path, raw, tensor.get_shape(), _SAFETENSORS_DTYPES.get(tensor.get_dtype()), problems)
        except (SafetensorError, OSError, ValueError) as exc:
            problems.append(Problem(path, "<safetensors header>", f"corrupt or truncated file ({exc})",
                                    "re-download or re-export the checkpoint"))

    def _index_pickle(self, path: str, problems: list[Problem]) -> None:
        state = load_pickle(path, problems)
        if state is None:
            return
        if not isinstance(state, dict):
            problems.append(Problem(path, "<pickle>", "holds no state dict", "save a plain state dict "
                                    "(tensor name -> tensor)", found=type(state).__name__))
            return
        if isinstance(state.get("state_dict"), dict):
            state = state["state_dict"]  # training wrappers
        tensors = {k: v for k, v in state.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}
        if len(tensors) != len(state):
            problems.append(Problem(path, ", ".join(sorted(map(str, set(state) - set(tensors))))[:200],
                                    "entries that are not tensors", "save a plain state dict"))
        self.pickled[path] = tensors
        for raw, tensor in tensors.items():
            self.add(path, raw, tensor.shape, tensor.dtype, problems)


def load_pickle(path: str, problems: list[Problem]) -> Any:
    """A torch pickle as plain data (``weights_only=True``), memory-mapped when the file is in
    torch's zip format so that no tensor is read until used."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
        problems.append(Problem(
            path, "<pickle>", f"cannot be read as plain tensors ({(str(exc) or type(exc).__name__).splitlines()[0]})",
            "re-export the checkpoint as safetensors; pickles are only loaded with "
            "weights_only=True, never with arbitrary code"))
        return None
    return state
