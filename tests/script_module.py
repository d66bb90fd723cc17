"""Import a repository script (not a package module) by its path, for tests of its functions."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load(relative_path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / relative_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_siblings(relative_dir: str, *names: str) -> list:
    """The scripts ``<relative_dir>/<name>.py``, loaded in the order given, each registered in
    ``sys.modules`` under its bare name.

    Scripts of one directory import one another by bare name (``from zipf_target import ...``),
    which works when one of them is run, since Python puts the script's directory on ``sys.path``.
    Here each bare import resolves to a script loaded before it, so list a script after the ones it
    imports; no directory joins ``sys.path``, so nothing else there becomes importable. A name
    already registered from the same file is reused, one from another file is refused."""
    modules = []
    for name in names:
        path = ROOT / relative_dir / f"{name}.py"
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception:
                del sys.modules[name]  # as a failed import does: no half-run module to reuse
                raise
        elif Path(module.__file__).resolve() != path:
            raise ValueError(f"{name!r} is already imported from {module.__file__}, not {path}")
        modules.append(module)
    return modules
