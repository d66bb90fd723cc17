"""Drafters on the Hugging Face hub, fetched through ``huggingface_hub`` (which honours
``HF_HUB_OFFLINE``, the local cache and the user's token).

A command that loads the weights (``serve``, ``eval``) takes a snapshot of the repository. One that
only checks them (``inspect``) fetches the config, the shard index and the small vocabulary files,
and reads each safetensors file it does not have by HTTP range requests: the header, then only the
vocabulary map's bytes. Files already in the local cache are read from it; offline, only the cache
is used.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Iterator

from sglang_eagle_ext.drafter.reader import META_FILES, TOKEN_MAP_FILE, WEIGHT_FILES, shard_names
from sglang_eagle_ext.errors import DrafterError, Problem

# What a drafter's repository holds beyond its config: weights, shard indices, vocabulary side files.
_SNAPSHOT_FILES = ("config.json", "*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json",
                   "*.pt", "consolidated/*")
_RANGE_TIMEOUT_S = 30.0


def transport_error() -> type[Exception]:
    """The base HTTP error of the client huggingface_hub's session is built on: httpx up to
    huggingface_hub 1.x, httpx2 from 2.0 (which does not install httpx). Asked of the session
    itself, so that neither client is imported by name."""
    import importlib

    from huggingface_hub import get_session

    return importlib.import_module(type(get_session()).__module__.split(".")[0]).HTTPError


@dataclass(frozen=True)
class HubFile:
    """One file of a hub repository at a fixed commit, read by HTTP range requests."""

    url: str
    length: int

    def size(self) -> int:
        return self.length

    def read(self, offset: int, length: int) -> bytes:
        from huggingface_hub import get_session
        from huggingface_hub.errors import HfHubHTTPError
        from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

        headers = {**build_hf_headers(), "range": f"bytes={offset}-{offset + length - 1}"}
        try:
            with get_session().stream("GET", self.url, headers=headers, follow_redirects=True,
                                      timeout=_RANGE_TIMEOUT_S) as response:
                hf_raise_for_status(response)
                if response.status_code != 206:  # a server that ignores ranges would send the whole file
                    raise OSError(f"{self.url} answered a range request with status {response.status_code}")
                data = response.read()
        except (transport_error(), HfHubHTTPError) as exc:
            raise OSError(f"{self.url}: {exc}") from None
        if len(data) != length:
            raise OSError(f"{self.url} sent {len(data)} bytes for a range of {length}")
        return data


@dataclass(frozen=True)
class HubDrafter:
    """A hub drafter's local directory (its snapshot in the cache) and the files of it that are
    read remotely (local path in that directory -> :class:`HubFile`)."""

    directory: str
    remote: dict[str, HubFile]


def is_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def fetch(repo_id: str, weights: bool) -> HubDrafter:
    """Fetch ``repo_id``: everything when ``weights``, else what its checks read (see the module
    docstring). Raises :class:`DrafterError` saying why it cannot be had and what to do."""
    with _hub_errors(repo_id):
        if weights or is_offline():
            directory = _snapshot(repo_id, _SNAPSHOT_FILES)
            # offline, a cache holding the config alone is the hub's doing (the reader would say "no weights")
            if is_offline() and not any(os.path.isfile(os.path.join(directory, name)) for name in WEIGHT_FILES):
                raise DrafterError([Problem(
                    repo_id, "<hub>", "its config is in the local Hugging Face cache but its weights are not "
                    "and HF_HUB_OFFLINE is set",
                    f"download it once with network access (huggingface-cli download {repo_id})")])
            return HubDrafter(directory, {})
        from huggingface_hub import HfApi, hf_hub_download, hf_hub_url
        from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

        try:  # the branch's head: records it in the cache, so that offline use finds this snapshot
            config = hf_hub_download(repo_id, "config.json")
        except EntryNotFoundError as exc:
            if isinstance(exc, LocalEntryNotFoundError):
                raise
            raise DrafterError([Problem(repo_id, "config.json", "the repository has no config.json at its top "
                                        "level", "pass the repository of a drafter model directory")]) from None
        directory = os.path.dirname(config)
        commit = os.path.basename(directory)
        listing = HfApi().model_info(repo_id, revision=commit, files_metadata=True).siblings or ()
        siblings = {sibling.rfilename: sibling for sibling in listing}
        # the files the reader will read: the first weight file it looks for, an index's shards, the
        # vocabulary side files (never a repository's other pickles: training state, optimizer)
        chosen = next((name for name in WEIGHT_FILES if name in siblings), None)
        weight_files = [chosen] if chosen else []
        if chosen and chosen.endswith(".index.json"):
            index = hf_hub_download(repo_id, chosen, revision=commit)
            try:
                weight_files = [os.path.join(os.path.dirname(chosen), shard) for shard in shard_names(index)]
            except ValueError:
                weight_files = []  # the reader reports the index
        remote = {}
        for name in (*META_FILES, TOKEN_MAP_FILE, *weight_files):
            sibling = siblings.get(name)
            if sibling is None:
                continue  # the reader reports what it misses
            local = os.path.join(directory, *name.split("/"))
            if not name.endswith(".safetensors"):  # a pickle has no header apart from its data: read whole
                hf_hub_download(repo_id, name, revision=commit)
            elif not os.path.isfile(local):  # not cached: read by range
                if sibling.size is None:
                    raise DrafterError([Problem(repo_id, name, "the hub did not report the file's size",
                                                "retry, or download the repository and pass its directory")])
                remote[local] = HubFile(hf_hub_url(repo_id, name, revision=commit), sibling.size)
        return HubDrafter(directory, remote)


def _snapshot(repo_id: str, patterns: tuple[str, ...]) -> str:
    from huggingface_hub import snapshot_download

    directory = snapshot_download(repo_id, allow_patterns=list(patterns))
    os.makedirs(directory, exist_ok=True)  # a repository holding none of the patterns has no snapshot folder
    return directory


@contextlib.contextmanager
def _hub_errors(repo_id: str) -> Iterator[None]:
    """huggingface_hub's failures as the package's errors, each with what to do."""
    from huggingface_hub.errors import (EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError,
                                        OfflineModeIsEnabled, RepositoryNotFoundError, RevisionNotFoundError)

    try:
        yield
    except (LocalEntryNotFoundError, OfflineModeIsEnabled):
        raise DrafterError([Problem(repo_id, "<hub>", "not in the local Hugging Face cache" + (
            " and HF_HUB_OFFLINE is set" if is_offline() else " and the hub cannot be reached"),
            f"download it once with network access (huggingface-cli download {repo_id}), or unset "
            "HF_HUB_OFFLINE")]) from None
    except EntryNotFoundError as exc:  # listed by the hub, then missing: the repository changed meanwhile
        raise DrafterError([Problem(repo_id, "<hub>", f"a file went missing while it was fetched ({exc})",
                                    "retry")]) from None
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise DrafterError([Problem(repo_id, "<hub>", "no such repository on the Hugging Face hub (or it is "
                                    "private)", "check the id, or log in with huggingface-cli login")]) from None
    except (HfHubHTTPError, transport_error(), OSError) as exc:
        raise DrafterError([Problem(repo_id, "<hub>", f"cannot be fetched ({exc})",
                                    "retry, or download it into a local directory and pass that")]) from None
