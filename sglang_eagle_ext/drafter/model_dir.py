"""Writing model directories atomically: a sibling staging directory renamed into place.

A reader (SGLang, a second CLI run, a crashed earlier run) never sees a half-written checkpoint:
everything is written and checked inside the staging directory, which then replaces the target
directory with ``os.replace``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from typing import Any, Iterator

import torch


@contextlib.contextmanager
def staged_directory(directory: str) -> Iterator[str]:
    """Yield an empty staging directory next to ``directory``; on success it becomes ``directory``
    (an existing one is replaced), on any error it is removed and ``directory`` is untouched."""
    directory = os.path.abspath(directory)
    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(directory)}.staging-", dir=parent)
    os.chmod(staging, 0o755)  # mkdtemp makes it private; a model directory is not
    try:
        yield staging
        if os.path.isdir(directory):
            shutil.rmtree(directory)
        os.replace(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_json(path: str, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")


def membership_mask(d2t: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``t2d``: the ``[vocab_size]`` bool mask of target tokens in the draft vocabulary."""
    mask = torch.zeros(vocab_size, dtype=torch.bool)
    mask[torch.arange(d2t.numel()) + d2t] = True
    return mask
