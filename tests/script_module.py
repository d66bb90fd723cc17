"""Import a repository script (not a package module) by its path, for tests of its functions."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load(relative_path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / relative_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
