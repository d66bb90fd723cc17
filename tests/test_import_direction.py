"""Imports between the package's layers go one way: ``demo`` may import ``cli`` (its option
parsers, the serve command's cache directory and install hint), ``cli`` never imports ``demo``;
``kernels`` imports nothing else of the package (the CPU path binds the sampling references that
live beside the kernels, never the other way); and the installed package imports no test code (the
tests' kit is ``tests/kit``, which is not installed, nor a test framework).

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


def package_imports(subpackage: str = "") -> dict[str, set[str]]:
    """For every module of the package (or of ``subpackage``, a folder of it), keyed by its path
    under the package: the modules it imports."""
    imports = {}
    for path in sorted((PACKAGE_DIR / subpackage).rglob("*.py")):
        relative = path.relative_to(PACKAGE_DIR)
        package = ".".join(("sglang_eagle_ext", *relative.parent.parts))
        imports[relative.as_posix()] = imported_modules(path.read_text(encoding="utf-8"), package)
    return imports


def test_relative_and_nested_imports_are_seen():
    source = "from . import options\nfrom ..demo.run import cache_dir\n\ndef f():\n    import json\n"
    assert imported_modules(source, "sglang_eagle_ext.cli") >= {
        "sglang_eagle_ext.cli.options", "sglang_eagle_ext.demo.run", "json"}


def test_cli_imports_nothing_from_demo():
    imports = package_imports("cli")
    # the walk sees the cli's own imports, so an empty result cannot pass for a clean one
    assert "sglang_eagle_ext.cli.options" in imports["cli/serve_cmd.py"]
    upward = {name: sorted(m for m in modules if m.split(".")[:2] == ["sglang_eagle_ext", "demo"])
              for name, modules in imports.items()}
    assert not any(upward.values()), {name: found for name, found in upward.items() if found}


def test_kernels_import_nothing_else_of_the_package():
    imports = package_imports("kernels")
    # the walk sees the kernels' own imports (relative ones resolved), so an empty result cannot pass
    assert "sglang_eagle_ext.kernels.launch" in imports["kernels/sampling/drop_in.py"]
    outward = {name: sorted(m for m in modules if m.split(".")[0] == "sglang_eagle_ext"
                            and m.split(".")[:2] != ["sglang_eagle_ext", "kernels"])
               for name, modules in imports.items()}
    assert not any(outward.values()), {name: found for name, found in outward.items() if found}


def test_the_package_imports_no_test_code():
    imports = package_imports()
    assert "sglang_eagle_ext.sglang.draft_forward" in imports["sglang/stock_check.py"]
    test_code = {name: sorted(m for m in modules if m.split(".")[0] in ("tests", "unittest", "pytest", "hypothesis"))
                 for name, modules in imports.items()}
    assert not any(test_code.values()), {name: found for name, found in test_code.items() if found}
