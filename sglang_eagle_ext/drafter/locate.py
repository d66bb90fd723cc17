"""Where the drafter a user names lives: a model directory, a trainer's checkpoint folder, a legacy
``draft_model.pt`` folder, or a Hugging Face hub id (fetched by :mod:`sglang_eagle_ext.drafter.hub`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sglang_eagle_ext.drafter.target import TargetInfo, read_target
from sglang_eagle_ext.errors import DrafterError, Problem, counted

if TYPE_CHECKING:
    from sglang_eagle_ext.drafter.hub import HubFile

LEGACY_WEIGHTS = "draft_model.pt"
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


@dataclass(frozen=True)
class Located:
    """The model directory to read for what the user gave, and how it was found."""

    given: str
    directory: str  # a local directory (for a hub id: its snapshot in the local cache)
    how: str
    legacy: bool = False  # draft_model.pt + config.json: exported to a model directory before serving
    hub_id: str | None = None
    remote: dict[str, HubFile] = field(default_factory=dict)  # files of a hub drafter read by range


def is_hub_id(value: str) -> bool:
    return not os.path.exists(value) and _HUB_ID.fullmatch(value) is not None


def is_legacy_checkpoint(directory: str) -> bool:
    return (os.path.isfile(os.path.join(directory, LEGACY_WEIGHTS))
            and os.path.isfile(os.path.join(directory, "config.json")))


def locate_drafter(given: str, weights: bool = True) -> Located:
    """Resolve ``given`` (see the module docstring); raises :class:`DrafterError` naming the path
    and what to pass instead. ``weights=False``: the caller only checks the drafter, so a hub
    drafter's weights are not downloaded (its safetensors headers are read remotely)."""
    if is_hub_id(given):
        from sglang_eagle_ext.drafter import hub

        fetched = hub.fetch(given, weights)
        how = f"hub id {given}, its snapshot in the local cache" + (
            f"; {counted(len(fetched.remote), 'weight file')} read on the hub by range" if fetched.remote else "")
        return Located(given, fetched.directory, how, hub_id=given, remote=fetched.remote)
    path = os.path.abspath(given)
    if not os.path.isdir(path):
        what = "does not exist" if not os.path.lexists(path) else "is not a directory"
        raise DrafterError([Problem(path, "<path>", f"the drafter {what}", "pass a drafter model directory, a "
                                    "trainer's checkpoint folder, or a hub id such as org/name")])
    if os.path.isfile(os.path.join(path, "config.json")):
        if is_legacy_checkpoint(path):
            return Located(given, path, "legacy draft_model.pt checkpoint", legacy=True)
        return Located(given, path, "model directory")
    model = os.path.join(path, "model")
    for inner, how in ((os.path.join(model, "consolidated"), "training checkpoint: its model/consolidated/"),
                       (model, "training checkpoint: its model/")):
        if os.path.isfile(os.path.join(inner, "config.json")):
            return Located(given, inner, how)
    if os.path.isfile(os.path.join(model, ".hf_metadata", "config.json")):
        raise DrafterError([Problem(model, "<weights>", "an intermediate NeMo Automodel checkpoint: its weights "
                                    "are sharded training files, not a model directory",
                                    "use the final step's model/consolidated/ (NeMo consolidates the last "
                                    "checkpoint), or consolidate this step with NeMo's tools")])
    raise DrafterError([Problem(os.path.join(path, "config.json"), "config.json", "missing",
                                "point at the drafter's model directory (a trainer's epoch_*_step_*/ folder "
                                "keeps it in model/ or model/consolidated/)")])


def read_named_target(target: str) -> TargetInfo | None:
    """The facts of the target a user names (``serve``, ``inspect``): a local directory or
    config file must exist; a hub id's config comes through
    ``huggingface_hub`` (None when it cannot be fetched: the checks that need it are skipped)."""
    if is_hub_id(target):
        from huggingface_hub import hf_hub_download

        try:
            return read_target(hf_hub_download(target, "config.json"))
        except Exception:  # offline, gated, or not there: SGLang will say so itself
            return None
    if not os.path.exists(target):
        raise DrafterError([Problem(os.path.abspath(target), "--target", "does not exist",
                                    "pass the target model's directory or its hub id (org/name)")])
    return read_target(target)
