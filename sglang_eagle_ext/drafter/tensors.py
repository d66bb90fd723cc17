"""Where a checkpoint's tensors are: names, shapes and dtypes from file headers, data on demand.

Safetensors headers are parsed here (the 8-byte length, then the JSON table), and every byte range
is checked against the file's size before anything else happens, so indexing costs the header
whatever sizes the file claims (no memory map, no tensor data). The bytes come from a
:class:`FileBytes`: a local file, or a file on the Hugging Face hub read by range requests
(:mod:`sglang_eagle_ext.drafter.hub`), checked the same way. Torch pickles in the zip format
are opened memory-mapped (``weights_only=True``, never arbitrary code); the legacy format, which
can only be read whole, is refused above :data:`LEGACY_PICKLE_LIMIT`. :meth:`TensorIndex.read`
then reads one tensor.

Tensors are indexed under the canonical names a description asks for
(:func:`~.spec.expected_shapes`), whatever the dialect's spelling (:func:`canonical_name`): a
leading ``model.`` (NeMo Automodel), ``midlayer.`` for ``layers.0.`` (SafeAILab, SpecForge,
AngelSlim, TorchSpec, ModelOpt before 2026-03), ``midlayer.{i}.`` for ``layers.{i}.`` (ModelOpt's
Megatron export of multi-layer heads), ``aux_norm_{low,mid,high}`` for ``fc_norm.{0,1,2}`` (legacy
SGLang); fused ``qkv_proj`` / ``gate_up_proj`` stay fused in the index and are split on load.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import struct
import zipfile
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import torch
from safetensors import safe_open

from sglang_eagle_ext.drafter.spec import fused_parts
from sglang_eagle_ext.errors import DrafterError, Problem

# safetensors dtype names -> torch dtypes (those a drafter can hold)
_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
# Bits per element of every dtype the safetensors format names (those no drafter holds too, so
# that their byte ranges are still checked).
_SAFETENSORS_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
    "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
}
# A drafter's safetensors header is a few kilobytes, a whole target shard's a few megabytes.
SAFETENSORS_HEADER_LIMIT = 16 << 20
# Legacy (non-zip) torch pickles are read whole by torch.load; larger ones are refused unread.
LEGACY_PICKLE_LIMIT = 64 << 20
# config.json files and shard indexes are kilobytes; a larger one is refused without parsing it.
JSON_FILE_LIMIT = 16 << 20

_LEGACY_AUX_NORMS = {"aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1",
                     "aux_norm_high": "fc_norm.2"}
_MIDLAYER_RE = re.compile(r"^midlayer\.(\d+)\.")


def canonical_name(raw: str) -> str:
    """Map a tensor name of any dialect to its canonical spelling (fused names stay fused)."""
    name = raw[len("model."):] if raw.startswith("model.") else raw
    numbered = _MIDLAYER_RE.match(name)  # ModelOpt's Megatron export of multi-layer heads
    if numbered:
        name = f"layers.{numbered.group(1)}." + name[numbered.end():]
    elif name.startswith("midlayer."):
        name = "layers.0." + name[len("midlayer."):]
    for legacy, canonical in _LEGACY_AUX_NORMS.items():
        if name.startswith(legacy + "."):
            name = canonical + name[len(legacy):]
    return name


def split_fused(index: TensorIndex) -> dict[str, tuple[int, ...]]:
    """Canonical name -> shape, with fused projections replaced by their parts' names.

    The parts' first dimensions are unknown until the spec exists, so they carry the fused
    shape with a leading ``-1``; :func:`~.reader.check_shapes` checks the sum instead.
    """
    shapes = {}
    for name, entry in index.entries.items():
        fused = fused_parts(name)
        for part in fused or ():
            shapes[part] = (-1,) + entry.shape[1:]
        if fused is None:
            shapes[name] = entry.shape
    return shapes


class FileBytes(Protocol):
    """Random access to one file's bytes. ``read`` raises :class:`OSError` when they cannot be had."""

    def size(self) -> int: ...

    def read(self, offset: int, length: int) -> bytes: ...


@dataclass(frozen=True)
class LocalFile:
    path: str

    def size(self) -> int:
        return os.path.getsize(self.path)

    def read(self, offset: int, length: int) -> bytes:
        with open(self.path, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)


class HeaderEntry(NamedTuple):
    dtype: str  # the safetensors dtype name
    shape: tuple[int, ...]
    span: tuple[int, int]  # the tensor's bytes in the file: [begin, end)


@dataclass(frozen=True)
class TensorEntry:
    file: str
    raw_name: str
    shape: tuple[int, ...]
    dtype: torch.dtype | None  # None: a dtype no drafter holds (reported by the reader)
    span: tuple[int, int] | None = None  # byte range in a safetensors file

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
    remote: dict[str, FileBytes] = field(default_factory=dict)  # file -> its bytes, read by range

    def read(self, name: str) -> torch.Tensor:
        """One tensor's data (a copy in memory)."""
        entry = self.entries[name]
        if entry.file in self.pickled:
            return self.pickled[entry.file][entry.raw_name].clone()
        if entry.file in self.remote:
            return self._read_range(entry)
        with safe_open(entry.file, framework="pt") as handle:
            return handle.get_tensor(entry.raw_name)

    def _read_range(self, entry: TensorEntry) -> torch.Tensor:
        begin, end = entry.span
        try:
            data = self.remote[entry.file].read(begin, end - begin) if end > begin else b""
        except OSError as exc:
            raise DrafterError([Problem(entry.file, entry.raw_name, f"cannot be fetched ({exc})",
                                        "retry, or download the drafter and pass its directory")]) from None
        if not data:
            return torch.empty(entry.shape, dtype=entry.dtype)
        # safetensors data is little-endian, as is every platform torch runs on
        return torch.frombuffer(bytearray(data), dtype=entry.dtype).reshape(entry.shape)

    def add(self, file: str, raw: str, shape, dtype: torch.dtype | None, problems: list[Problem],
            span: tuple[int, int] | None = None) -> None:
        name = canonical_name(raw)
        if name in self.entries:
            first = self.entries[name]
            where = "in the same file" if first.file == file else f"(also in {first.file})"
            problems.append(Problem(file, raw, f"the tensor {name!r} is stored twice {where}",
                                    f"keep one of {first.raw_name!r} and {raw!r}: remove the duplicate "
                                    "(a shard index must map each tensor to one shard)"))
            return
        self.entries[name] = TensorEntry(file, raw, tuple(int(s) for s in shape), dtype, span)

    def index_file(self, path: str, problems: list[Problem], remote: FileBytes | None = None) -> None:
        """Index ``path``; a safetensors file may come as ``remote`` bytes (its header is read by
        range, and tensors later read the same way)."""
        if path.endswith((".bin", ".pt")):
            self._index_pickle(path, problems)
        else:
            self._index_safetensors(path, problems, remote)

    def _index_safetensors(self, path: str, problems: list[Problem], remote: FileBytes | None) -> None:
        try:
            tensors = read_safetensors_header(path, remote)
        except HeaderError as exc:
            problems.append(Problem(path, "<safetensors header>", f"corrupt or truncated file ({exc})",
                                    "re-download or re-export the checkpoint"))
            return
        if remote is not None:
            self.remote[path] = remote
        for raw, entry in tensors.items():
            self.add(path, raw, entry.shape, _SAFETENSORS_DTYPES.get(entry.dtype), problems, entry.span)

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


class HeaderError(ValueError):
    """A safetensors file whose header cannot be trusted; the message says why."""


def read_safetensors_header(path: str, source: FileBytes | None = None) -> dict[str, HeaderEntry]:
    """Tensor name -> (safetensors dtype name, shape, byte span), from the header alone. The
    bytes are read from ``source`` (default: the local file ``path``).

    The format: an 8-byte little-endian header length, that many bytes of a JSON object (name
    -> ``{"dtype", "shape", "data_offsets": [begin, end]}``, plus an optional ``__metadata__``
    object), then the data, which the byte ranges must cover exactly, back to back. Every claim
    is checked against the file's size here, so a header that claims more than the file holds
    is refused before any tensor is read. Raises :class:`HeaderError`.
    """
    source = LocalFile(path) if source is None else source
    try:
        size = source.size()
        prefix = source.read(0, 8) if size >= 8 else b""
        if len(prefix) < 8:
            raise HeaderError(f"{size} bytes: shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", prefix)
        if length > SAFETENSORS_HEADER_LIMIT:
            raise HeaderError(f"the header claims {length} bytes; a drafter's header is a few "
                              f"kilobytes (at most {SAFETENSORS_HEADER_LIMIT} are read)")
        if 8 + length > size:
            raise HeaderError(f"the header claims {length} bytes but the file holds {size - 8} after "
                              "its length")
        text = source.read(8, length)
    except OSError as exc:
        raise HeaderError(f"cannot be read: {exc}") from None
    try:
        table = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HeaderError(f"the header is not a JSON object ({exc})") from None
    if not isinstance(table, dict):
        raise HeaderError(f"the header is a JSON {type(table).__name__}, not an object")
    data_size = size - 8 - length
    tensors, ranges = {}, []
    for name, info in table.items():
        if name == "__metadata__":
            if not (isinstance(info, dict) and all(isinstance(v, str) for v in info.values())):
                raise HeaderError(f"__metadata__ must map names to strings: {json.dumps(info)[:120]}")
            continue
        dtype, shape, offsets = (info.get(k) if isinstance(info, dict) else None
                                 for k in ("dtype", "shape", "data_offsets"))
        if not (isinstance(dtype, str) and _int_list(shape) and _int_list(offsets) and len(offsets) == 2
                and 0 <= offsets[0] <= offsets[1]):
            raise HeaderError(f"the entry of {name!r} is not {{dtype, shape, data_offsets}}: "
                              f"{json.dumps(info)[:120]}")
        count = 1
        for dim in shape:
            count *= dim
        bits = _SAFETENSORS_BITS.get(dtype)
        if bits is None:
            raise HeaderError(f"{name!r} has the dtype {dtype!r}, which the safetensors format does not know")
        if offsets[1] - offsets[0] != (count * bits + 7) // 8:
            raise HeaderError(f"{name!r} ({dtype} {shape}) needs {(count * bits + 7) // 8} bytes but its "
                              f"data_offsets span {offsets[1] - offsets[0]}")
        tensors[name] = HeaderEntry(dtype, tuple(shape), (8 + length + offsets[0], 8 + length + offsets[1]))
        ranges.append((offsets[0], offsets[1], name))
    end = 0
    for begin, stop, name in sorted(ranges):
        if begin != end:
            raise HeaderError(f"the data of {name!r} starts at byte {begin} of the data, not at {end} "
                              "(gaps and overlaps are not allowed)")
        end = stop
    if end != data_size:
        raise HeaderError(f"the header claims {end} bytes of tensor data but the file holds {data_size}"
                          + (" (truncated)" if end > data_size else ""))
    return tensors


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                           for v in value)


def load_pickle(path: str, problems: list[Problem], limit: int = LEGACY_PICKLE_LIMIT) -> Any:
    """A torch pickle as plain data (``weights_only=True``), memory-mapped when the file is in
    torch's zip format so that no tensor is read until used. A legacy-format pickle is read whole
    by torch, so one larger than ``limit`` bytes is refused unread."""
    try:
        zipped = zipfile.is_zipfile(path)
        size = os.path.getsize(path)
        if zipped:  # the pickled structure itself (data.pkl) is read whole; the tensors are mapped
            with zipfile.ZipFile(path) as archive:
                size = max((i.file_size for i in archive.infolist() if i.filename.endswith("data.pkl")),
                           default=0)
    except (OSError, zipfile.BadZipFile) as exc:
        problems.append(Problem(path, "<pickle>", f"cannot be read ({exc})", "re-download the checkpoint"))
        return None
    if size > limit:
        what = (f"its pickled structure (data.pkl) claims {size} bytes" if zipped
                else f"a legacy-format torch pickle of {size} bytes")
        problems.append(Problem(
            path, "<pickle>", f"{what}, which torch would read whole: not opened", "re-save it with a "
            "current torch.save (zip format, read memory-mapped) or as safetensors",
            expected=f"at most {limit} bytes of pickled structure", found=f"{size} bytes"))
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipped)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError, MemoryError) as exc:
        problems.append(Problem(
            path, "<pickle>", f"cannot be read as plain tensors ({(str(exc) or type(exc).__name__).splitlines()[0]})",
            "re-export the checkpoint as safetensors; pickles are only loaded with "
            "weights_only=True, never with arbitrary code"))
        return None
    return state
