"""Writing a GPU run's results file: atomically, and again after each section or cell, so a run
cut short by a device time limit keeps what it measured."""

from __future__ import annotations

import json
import os


def save_json(path: str, data) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
    os.replace(path + ".tmp", path)
