"""Imports between the package's layers go one way: ``demo`` may import ``cli`` (its option
parsers, the serve command's cache directory and install hint), ``cli`` never imports ``demo``.

Read from the source with ``ast`` (every ``import`` statement, function-level ones included), so
the check needs nothing installed and sees imports that only run on some paths. The one link the
other way is by name, not by import statement: the dispatcher's ``COMMANDS`` table lists
``sglang_eagle_ext.demo.run`` as the ``demo`` subcommand, loaded when the parser is built.
"""

import ast
from pathlib import Path

import sglang_eagle_ext

PACKAGE_DIR = Path(sglang_eagle_ext.__file__).parent


def imported_modules(source: str, package: str) -> set[str]:
    """Absolute names of the modules a module of ``package`` imports (``from x import y`` counts
    as ``x`` and ``x.y``: ``y`` may be a submodule); relative imports resolved against ``package``."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0]
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_relative_and_nested_imports_are_seen():
    source = "from . import options\nfrom ..demo.run import cache_dir\n\ndef f():\n    import json\n"
    assert imported_modules(source, "sglang_eagle_ext.cli") >= {
        "sglang_eagle_ext.cli.options", "sglang_eagle_ext.demo.run", "json"}


def test_cli_imports_nothing_from_demo():
    imports = {path.name: imported_modules(path.read_text(encoding="utf-8"), "sglang_eagle_ext.cli")
               for path in sorted((PACKAGE_DIR / "cli").glob("*.py"))}
    # the walk sees the cli's own imports, so an empty result cannot pass for a clean one
    assert "sglang_eagle_ext.cli.options" in imports["serve_cmd.py"]
    upward = {name: sorted(m for m in modules if m.split(".")[:2] == ["sglang_eagle_ext", "demo"])
              for name, modules in imports.items()}
    assert not any(upward.values()), {name: found for name, found in upward.items() if found}
