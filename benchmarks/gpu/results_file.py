"""Writing a GPU run's results file (and any file a GPU script writes): atomically, and again after each
section or cell, so a run cut short by a device time limit keeps what it measured."""

from __future__ import annotations

import json
import os


def save_bytes(path: str, data: bytes) -> None:
    with open(path + ".tmp", "wb") as handle:
        handle.write(data)
    os.replace(path + ".tmp", path)


def save_json(path: str, data) -> None:
    save_bytes(path, json.dumps(data, indent=1).encode())
