"""Bounded work before validation: files that claim huge tensors are refused from their headers
and sizes, without reading the claim. Each case runs ``python -m sglang_eagle_ext inspect`` in a
fresh process and measures its peak resident memory (ru_maxrss of the only child of a small
wrapper process); Python with torch imported takes about 227 MB, the limit is 300 MB."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from tests.kit import fixtures

RSS_LIMIT_MB = 300
FIVE_GB = 5 << 30
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_WRAPPER = ("import json, resource, subprocess, sys\n"
            "run = subprocess.run([sys.executable, '-m', 'sglang_eagle_ext', 'inspect', *sys.argv[1:]],"
            " capture_output=True, text=True)\n"
            "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
            "print(json.dumps({'rc': run.returncode, 'out': run.stdout, 'err': run.stderr, 'peak_mb': peak}))\n")


def inspect_in_child(*args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", _WRAPPER, *args], capture_output=True, text=True,
                          env=env, timeout=600, check=True)
    return json.loads(done.stdout)


def _dtype_name(tensor: torch.Tensor) -> str:
    return {torch.float32: "F32", torch.int64: "I64", torch.bool: "BOOL"}[tensor.dtype]


def write_claiming_safetensors(path: str, tensors: dict[str, torch.Tensor], claims: dict[str, list[int]],
                               sparse: bool) -> None:
    """A safetensors file whose header gives ``claims`` (name -> shape) instead of the real shapes;
    its data is a sparse file of the full claimed length, or the real bytes only (truncated)."""
    header, offset = {}, 0
    for name, tensor in tensors.items():
        shape = claims.get(name, list(tensor.shape))
        count = 1
        for size in shape:
            count *= size
        nbytes = count * tensor.element_size()
        header[name] = {"dtype": _dtype_name(tensor), "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text)
        if sparse:
            handle.truncate(8 + len(text) + offset)
        else:
            for tensor in tensors.values():
                handle.write(tensor.contiguous().numpy().tobytes())


def _drafter(tmp_path, name="F1-specforge"):
    directory = fixtures.build(name, str(tmp_path / "drafter"), seed=11)
    return directory, os.path.join(directory, "model.safetensors")


def _tensors(path: str) -> dict[str, torch.Tensor]:
    """The file's tensors, copied out of its memory map (the file is rewritten next)."""
    return {k: v.clone() for k, v in load_file(path).items()}


def _assert_refused_cheaply(report: dict, *fragments: str) -> None:
    assert report["rc"] == 1, report
    assert "Traceback" not in report["err"] and "Traceback" not in report["out"], report["err"]
    assert "status: REJECTED" in report["out"] and "fix:" in report["out"]
    for fragment in fragments:
        assert fragment in report["out"], report["out"]
    assert report["peak_mb"] < RSS_LIMIT_MB, f"peak RSS {report['peak_mb']:.0f} MB"


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse-5GB-file", "truncated-file"])
def test_safetensors_header_claiming_a_5gb_tensor(tmp_path, sparse):
    directory, weights = _drafter(tmp_path)
    tensors = _tensors(weights)
    rows = FIVE_GB // (4 * 64)  # lm_head [rows, 64] fp32 = 5 GB
    write_claiming_safetensors(weights, tensors, {"lm_head.weight": [rows, 64]}, sparse)
    if sparse:
        assert os.path.getsize(weights) > FIVE_GB
    report = inspect_in_child(directory)
    if sparse:  # the file holds what the header says: the shape is checked against the config
        _assert_refused_cheaply(report, f"{weights}: lm_head.weight: wrong shape", f"[{rows}, 64]")
    else:
        _assert_refused_cheaply(report, f"{weights}: <safetensors header>", "truncated")


def test_vocabulary_map_claiming_5gb_with_a_config_that_agrees(tmp_path):
    """The one tensor read while checking is the vocabulary map; a config that claims a vocabulary
    big enough to make it 5 GB is refused before it is read."""
    directory, weights = _drafter(tmp_path)
    config_file = os.path.join(directory, "config.json")
    with open(config_file) as handle:
        config = json.load(handle)
    vocab = FIVE_GB  # t2d is one byte per target token
    config["vocab_size"] = vocab
    with open(config_file, "w") as handle:
        json.dump(config, handle)
    write_claiming_safetensors(weights, _tensors(weights), {"t2d": [vocab]}, sparse=True)
    _assert_refused_cheaply(inspect_in_child(directory), f"{config_file}: vocab_size: larger than any "
                            "tokenizer's vocabulary")


def test_safetensors_header_length_claiming_5gb(tmp_path):
    directory, weights = _drafter(tmp_path)
    with open(weights, "wb") as handle:
        handle.write(struct.pack("<Q", FIVE_GB) + b"{")
    _assert_refused_cheaply(inspect_in_child(directory), "<safetensors header>", f"claims {FIVE_GB} bytes")


def test_legacy_pickle_weights_of_5gb_are_not_loaded(tmp_path):
    directory, weights = _drafter(tmp_path)
    tensors = _tensors(weights)
    os.remove(weights)
    path = os.path.join(directory, "pytorch_model.bin")
    torch.save(tensors, path, _use_new_zipfile_serialization=False)
    with open(path, "r+b") as handle:
        handle.truncate(FIVE_GB)
    _assert_refused_cheaply(inspect_in_child(directory), f"{path}: <pickle>: a legacy-format torch pickle")


def test_vocabulary_map_file_of_5gb_is_not_loaded(tmp_path):
    """NeMo's eagle_meta.pt beside a checkpoint without d2t, grown to 5 GB."""
    directory, weights = _drafter(tmp_path, "F12-nemo")
    tensors = _tensors(weights)
    selected = tensors.pop("d2t") + torch.arange(128)
    tensors.pop("t2d")
    from safetensors.torch import save_file
    save_file(tensors, weights)
    meta = os.path.join(directory, "eagle_meta.pt")
    torch.save({"selected_token_ids": selected}, meta, _use_new_zipfile_serialization=False)
    with open(meta, "r+b") as handle:
        handle.truncate(FIVE_GB)
    _assert_refused_cheaply(inspect_in_child(directory), f"{meta}: <pickle>: a legacy-format torch pickle")


def test_zip_pickle_whose_structure_claims_100mb_is_not_unpickled(tmp_path):
    """A zip-format torch file is memory-mapped, but its pickled structure (data.pkl) is read
    whole: its size in the archive's directory is checked first."""
    directory, weights = _drafter(tmp_path)
    tensors = _tensors(weights)
    os.remove(weights)
    path = os.path.join(directory, "pytorch_model.bin")
    torch.save(tensors, path)
    data = bytearray(open(path, "rb").read())
    entry = 0
    while True:  # the central-directory entry of data.pkl: its uncompressed size sits at +24
        entry = data.index(b"PK\x01\x02", entry + 1)
        name_length = struct.unpack_from("<H", data, entry + 28)[0]
        if data[entry + 46: entry + 46 + name_length].endswith(b"data.pkl"):
            struct.pack_into("<I", data, entry + 24, 100 << 20)
            break
    with open(path, "wb") as handle:
        handle.write(data)
    _assert_refused_cheaply(inspect_in_child(directory), f"{path}: <pickle>: its pickled structure (data.pkl) "
                            f"claims {100 << 20} bytes")


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json"])
def test_json_files_of_5gb_are_not_parsed(tmp_path, name):
    directory, weights = _drafter(tmp_path)
    if name != "config.json":
        os.remove(weights)
    path = os.path.join(directory, name)
    with open(path, "wb") as handle:
        handle.write(b"{")
        handle.truncate(FIVE_GB)
    _assert_refused_cheaply(inspect_in_child(directory), path)
