"""Where the drafter a user names lives: a model directory, a trainer's checkpoint folder, a legacy
``draft_model.pt`` folder, or a Hugging Face hub id (fetched through ``huggingface_hub``, which
honours ``HF_HUB_OFFLINE`` and its local cache)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from sglang_eagle_ext.errors import DrafterError, Problem

LEGACY_WEIGHTS = "draft_model.pt"
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
# What a drafter's repository holds beyond its config: weights, shard indices, vocabulary side files.
_HUB_FILES = ("config.json", "*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json",
              "*.pt", "consolidated/*")


@dataclass(frozen=True)
class Located:
    """The model directory to read for what the user gave, and how it was found."""

    given: str
    directory: str  # a local directory (for a hub id: its snapshot in the local cache)
    how: str
    legacy: bool = False  # draft_model.pt + config.json: exported to a model directory before serving
    hub_id: str | None = None


def is_hub_id(value: str) -> bool:
    return not os.path.exists(value) and _HUB_ID.fullmatch(value) is not None


def is_legacy_checkpoint(directory: str) -> bool:
    return (os.path.isfile(os.path.join(directory, LEGACY_WEIGHTS))
            and os.path.isfile(os.path.join(directory, "config.json")))


def locate_drafter(given: str) -> Located:
    """Resolve ``given`` (see the module docstring); raises :class:`DrafterError` naming the path
    and what to pass instead."""
    if is_hub_id(given):
        return _from_hub(given)
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


def _from_hub(repo_id: str) -> Located:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    offline = os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on")
    try:
        directory = snapshot_download(repo_id, allow_patterns=list(_HUB_FILES))
    except LocalEntryNotFoundError:
        raise DrafterError([Problem(repo_id, "<hub>", "not in the local Hugging Face cache" + (
            " and HF_HUB_OFFLINE is set" if offline else " and the hub cannot be reached"),
            "download it once with network access (huggingface-cli download " + repo_id + "), or unset "
            "HF_HUB_OFFLINE")]) from None
    except RepositoryNotFoundError:
        raise DrafterError([Problem(repo_id, "<hub>", "no such repository on the Hugging Face hub (or it is "
                                    "private)", "check the id, or log in with huggingface-cli login")]) from None
    except (HfHubHTTPError, OSError) as exc:
        raise DrafterError([Problem(repo_id, "<hub>", f"cannot be fetched ({exc})",
                                    "retry, or download it into a local directory and pass that")]) from None
    return Located(repo_id, directory, f"hub id {repo_id} (local snapshot {directory})", hub_id=repo_id)
