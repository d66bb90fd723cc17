"""The safetensors header is parsed and checked against the file's size before any tensor is read:
every header a file can carry is either accepted (and then safetensors itself opens the file) or
one problem naming the file and the header."""

from __future__ import annotations

import json
import os
import struct

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from sglang_eagle_ext.drafter.reader import load_drafter
from sglang_eagle_ext.drafter.tensors import HeaderError, read_safetensors_header
from sglang_eagle_ext.errors import DrafterError
from tests.kit import fixtures


def _write(path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text + data)


def _entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


GOOD = {"a": _entry("F32", [2, 3], 0, 24), "b": _entry("I64", [2], 24, 40)}


def test_a_file_written_by_safetensors_reads_back(tmp_path):
    gen = torch.Generator().manual_seed(0)
    path = str(tmp_path / "x.safetensors")
    tensors = {"w": torch.randn(3, 5, generator=gen), "i": torch.arange(4), "m": torch.ones(7, dtype=torch.bool)}
    save_file(tensors, path, metadata={"format": "pt"})
    header = read_safetensors_header(path)
    assert {k: v[:2] for k, v in header.items()} == {"w": ("F32", (3, 5)), "i": ("I64", (4,)), "m": ("BOOL", (7,))}
    data = open(path, "rb").read()
    for name, tensor in tensors.items():  # each span holds exactly that tensor's bytes
        begin, end = header[name].span
        assert data[begin:end] == tensor.numpy().tobytes()


@pytest.mark.parametrize("header, size, reason", [
    ({**GOOD, "__metadata__": {"format": "pt"}}, 40, None),
    ({"a": _entry("F8_E8M0", [4], 0, 4)}, 4, None),  # a dtype no drafter holds: the reader reports it
    ({"a": _entry("F32", [2, 3], 0, 24)}, 40, "holds 40"),  # data after the last tensor
    (GOOD, 30, "truncated"),
    ({"a": _entry("F32", [2, 3], 0, 20), "b": _entry("I64", [2], 20, 36)}, 36, "needs 24 bytes"),
    ({"a": _entry("F32", [2, 3], 8, 32), "b": _entry("I64", [2], 32, 48)}, 48, "not at 0"),
    ({"a": _entry("F32", [2, 3], 0, 24), "b": _entry("I64", [2], 16, 32)}, 32, "not at 24"),
    ({"a": _entry("F32", [-2, 3], 0, 24)}, 24, "is not {dtype, shape, data_offsets}"),
    ({"a": _entry("F32", [2, 3], 24, 0)}, 24, "is not {dtype, shape, data_offsets}"),
    ({"a": {"dtype": "F32", "shape": [6]}}, 24, "is not {dtype, shape, data_offsets}"),
    ({"a": _entry(7, [6], 0, 24)}, 24, "is not {dtype, shape, data_offsets}"),
    ({"a": "tensor"}, 24, "is not {dtype, shape, data_offsets}"),
    ({"a": _entry("Q4", [6], 0, 24)}, 24, "the safetensors format does not know"),
    ({**GOOD, "__metadata__": ["format"]}, 40, "__metadata__ must map names to strings"),
    ([1, 2], 0, "not an object"),
])
def test_headers_are_accepted_only_when_the_file_holds_them(tmp_path, header, size, reason):
    path = str(tmp_path / "x.safetensors")
    _write(path, header, bytes(size))
    if reason is None:
        read_safetensors_header(path)
        with safe_open(path, framework="pt") as handle:  # what is accepted, safetensors opens
            assert set(handle.keys()) == set(header) - {"__metadata__"}
        return
    with pytest.raises(HeaderError, match=reason.replace("{", r"\{").replace("}", r"\}")):
        read_safetensors_header(path)


@pytest.mark.parametrize("prefix", [b"", b"\x01\x02", struct.pack("<Q", 1 << 40), struct.pack("<Q", 100) + b"{}",
                                    struct.pack("<Q", 2) + b"\xff\xfe", struct.pack("<Q", 4) + b"nul "])
def test_broken_prefixes(tmp_path, prefix):
    path = str(tmp_path / "x.safetensors")
    with open(path, "wb") as handle:
        handle.write(prefix)
    with pytest.raises(HeaderError):
        read_safetensors_header(path)


def test_a_broken_header_is_one_problem_of_the_drafter(tmp_path):
    directory = fixtures.build("F1-specforge", str(tmp_path / "d"), seed=1)
    weights = os.path.join(directory, "model.safetensors")
    with open(weights, "r+b") as handle:
        handle.truncate(os.path.getsize(weights) - 4)
    with pytest.raises(DrafterError) as error:
        load_drafter(directory)
    (problem,) = error.value.problems
    assert (problem.file, problem.field) == (weights, "<safetensors header>")
    assert "truncated" in problem.message and problem.fix
