"""SGLang's own source, release by release, read from its wheels without importing them.

:func:`wheel` downloads ``sglang==<release>`` once per cache (``pip download --no-deps``);
:class:`ReleaseSource` reads modules from the wheel's zip and parses them with :mod:`ast` only, so
any release's code can be read on any host, whichever SGLang is installed (if one is). Its
:meth:`~ReleaseSource.check` says where a release differs from a
:class:`~sglang_eagle_ext.sglang.compat.patch.Target` that the compat code declares.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from sglang_eagle_ext.sglang.compat.patch import Target

CACHE_ENV = "SGLANG_EAGLE_EXT_WHEEL_CACHE"
# Every wheel of a release holds the same Python sources (only the compiled extensions differ by
# interpreter); one fixed tag downloads the same file on any host.
_WHEEL_TAG = ("--python-version", "3.11", "--platform", "manylinux_2_34_x86_64")
_DOWNLOAD_SECONDS = 900  # the largest wheel (39 MB) over a slow link; past this a download has failed

Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Assign | ast.AnnAssign


class WheelUnavailable(RuntimeError):
    """A release's wheel is not in the cache and could not be downloaded."""


def cache_dir() -> Path:
    """``$SGLANG_EAGLE_EXT_WHEEL_CACHE``, else ``~/.cache/sglang-eagle-ext/sglang-wheels``."""
    given = os.environ.get(CACHE_ENV)
    return Path(given) if given else Path.home() / ".cache" / "sglang-eagle-ext" / "sglang-wheels"


def wheel(release: str, cache: Path | None = None) -> Path:
    """The wheel of ``sglang==release`` in ``cache`` (default :func:`cache_dir`), downloaded the first
    time into a scratch folder and moved in whole, so that a reader never sees part of one."""
    cache = cache or cache_dir()
    cached = sorted(cache.glob(f"sglang-{release}-*.whl"))
    if cached:
        return cached[0]
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=cache) as scratch:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *_WHEEL_TAG,
                   "--quiet", "--dest", scratch, f"sglang=={release}"]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=_DOWNLOAD_SECONDS)
        except subprocess.TimeoutExpired:
            raise WheelUnavailable(f"downloading sglang=={release} took over {_DOWNLOAD_SECONDS} s") from None
        downloaded = sorted(Path(scratch).glob("sglang-*.whl"))
        if result.returncode != 0 or len(downloaded) != 1:
            raise WheelUnavailable(f"pip could not download the wheel of sglang=={release} into {cache} "
                                   f"(exit {result.returncode}): {result.stderr.strip()[-1500:]}")
        target = cache / downloaded[0].name
        os.replace(downloaded[0], target)
    return target


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[str], set[str]]:
    """A function's positional parameters in order, and every name a caller can pass by keyword."""
    arguments = function.args
    positional = [a.arg for a in arguments.posonlyargs + arguments.args]
    named = {a.arg for a in arguments.args + arguments.kwonlyargs}
    return positional, named


def _is_type_checking(test: ast.expr) -> bool:
    return ast.unparse(test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _module_level(statements: list[ast.stmt]):
    """The module's statements run at import, through its ``if``/``try`` blocks (not the
    ``if TYPE_CHECKING:`` ones, which bind nothing at run time)."""
    for statement in statements:
        if isinstance(statement, ast.If):
            if not _is_type_checking(statement.test):
                yield from _module_level(statement.body)
            yield from _module_level(statement.orelse)
        elif isinstance(statement, ast.Try):
            for block in (statement.body, *(handler.body for handler in statement.handlers),
                          statement.orelse, statement.finalbody):
                yield from _module_level(block)
        else:
            yield statement


def _binds(statement: ast.stmt, name: str) -> bool:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return statement.name == name
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return any((alias.asname or alias.name.split(".")[0]) == name for alias in statement.names)
    if isinstance(statement, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in statement.targets)
    if isinstance(statement, ast.AnnAssign):
        return isinstance(statement.target, ast.Name) and statement.target.id == name
    return False


def _matches(text: str, wanted: str) -> bool:
    """``wanted`` read as ``text``: the same expression, or its last parts (``b`` of ``a.b``)."""
    return text == wanted or text.endswith("." + wanted)


class ReleaseSource:
    """The Python modules of one SGLang wheel, parsed on demand."""

    def __init__(self, release: str, wheel_path: Path):
        self.release = release
        self._zip = zipfile.ZipFile(wheel_path)
        self._files = set(self._zip.namelist())
        self._trees: dict[str, tuple[ast.Module, bool] | None] = {}

    @classmethod
    def of(cls, release: str, cache: Path | None = None) -> ReleaseSource:
        return cls(release, wheel(release, cache))

    def _parsed(self, module: str) -> tuple[ast.Module, bool] | None:
        """``module``'s syntax tree and whether it is a package; None when the wheel lacks it."""
        if module not in self._trees:
            stem = module.replace(".", "/")
            self._trees[module] = None
            for path, is_package in ((stem + ".py", False), (stem + "/__init__.py", True)):
                if path in self._files:
                    text = self._zip.read(path).decode("utf-8-sig")  # some files start with a BOM
                    self._trees[module] = (ast.parse(text, filename=path), is_package)
                    break
        return self._trees[module]

    def text(self, path: str) -> str | None:
        """The text of the wheel's file ``path`` (e.g. ``sglang-<release>.dist-info/entry_points.txt``);
        None when the wheel lacks it."""
        return self._zip.read(path).decode("utf-8-sig") if path in self._files else None

    def module(self, module: str) -> ast.Module | None:
        parsed = self._parsed(module)
        return parsed[0] if parsed else None

    def _absolute(self, module: str, statement: ast.ImportFrom) -> str:
        """The module a ``from ... import`` in ``module`` names, relative imports resolved."""
        if not statement.level:
            return statement.module or ""
        parsed = self._parsed(module)
        package = module if parsed and parsed[1] else module.rpartition(".")[0]
        for _ in range(statement.level - 1):
            package = package.rpartition(".")[0]
        return ".".join(filter(None, (package, statement.module)))

    def bindings(self, module: str, name: str) -> list[ast.stmt]:
        """The statements that bind ``name`` when ``module`` is imported."""
        tree = self.module(module)
        if tree is None:
            return []
        return [statement for statement in _module_level(tree.body) if _binds(statement, name)]

    def definition(self, module: str, name: str, seen: frozenset = frozenset()) -> tuple[str, Definition] | None:
        """Where ``module.name`` is defined (its module and statement), following the imports that
        bind it into the wheel's other modules, star imports included; None when no binding of it
        leads to a definition inside the wheel."""
        if (module, name) in seen or self.module(module) is None:
            return None
        seen = seen | {(module, name)}
        for statement in self.bindings(module, name):
            if isinstance(statement, ast.ImportFrom):
                alias = next(a for a in statement.names if (a.asname or a.name) == name)
                found = self.definition(self._absolute(module, statement), alias.name, seen)
            elif isinstance(statement, ast.Import):
                found = None
            else:
                found = (module, statement)
            if found is not None:
                return found
        for statement in _module_level(self.module(module).body):
            if isinstance(statement, ast.ImportFrom) and any(alias.name == "*" for alias in statement.names):
                found = self.definition(self._absolute(module, statement), name, seen)
                if found is not None:
                    return found
        return None

    def member(self, module: str, class_name: str, member: str) -> Definition | None:
        """``member`` of class ``module.class_name`` (a method or a class-level value), looked up
        through its bases as ``hasattr`` does, as far as they are in the wheel."""
        found = self.definition(module, class_name)
        if found is None or not isinstance(found[1], ast.ClassDef):
            return None
        defining, cls = found
        for statement in cls.body:
            if _binds(statement, member):
                return statement
        for base in cls.bases:
            if isinstance(base, ast.Name):
                inherited = self.member(defining, base.id, member)
                if inherited is not None:
                    return inherited
        return None

    def imports_in(self, function_path: str, module: str, name: str) -> bool:
        """Whether the body of the function ``package.module.function`` (defined in that module or
        imported into it) imports ``name`` from ``module``."""
        found = self.definition(*function_path.rsplit(".", 1))
        if found is None or not isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        home, function = found
        return any(isinstance(node, ast.ImportFrom) and self._absolute(home, node) == module
                   and any(alias.name == name for alias in node.names) for node in ast.walk(function))

    def importers(self, module: str, name: str, under: str = "sglang") -> list[str]:
        """The wheel's modules (under package ``under``) that bind ``name`` at import by
        ``from <module> import name``."""
        found = []
        prefix = under.replace(".", "/") + "/"
        for path in sorted(self._files):
            if not (path.startswith(prefix) and path.endswith(".py")):
                continue
            if name.encode() not in self._zip.read(path):  # most modules never mention it: skip parsing them
                continue
            importer = path[:-3].removesuffix("/__init__").replace("/", ".")
            for statement in self.bindings(importer, name):
                if isinstance(statement, ast.ImportFrom) and self._absolute(importer, statement) == module:
                    found.append(importer)
                    break
        return found

    def check(self, target: Target) -> list[str]:
        """How this release differs from ``target`` as declared; empty when it has it so."""
        where = f"SGLang {self.release}"
        if target.imported_in:
            if any(self.imports_in(path, target.module, target.name) for path in target.imported_in):
                return []
            return [f"{where}: none of {', '.join(target.imported_in)} imports {target.name} from {target.module}"]
        if self.module(target.module) is None:
            return [f"{where} has no module {target.module}"]
        found = self.definition(target.module, target.name)
        if found is None and not self.bindings(target.module, target.name):
            return [f"{where}: {target.module} has no {target.name}"]
        if target.member is None and not (target.params or target.keywords or target.reads):
            return []
        if found is None:
            return [f"{where}: {target.module}.{target.name} is imported from outside the wheel"]
        definition = found[1]
        if target.member is not None:
            definition = self.member(target.module, target.name, target.member)
            if definition is None:
                return [f"{where}: class {target.module}.{target.name} has no {target.member}"]
        if not (target.params or target.keywords or target.reads):
            return []
        if not isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return [f"{where}: {target.path} is not a function"]
        return self._signature_and_body(target, definition, where)

    def _signature_and_body(self, target: Target, function: ast.FunctionDef | ast.AsyncFunctionDef,
                            where: str) -> list[str]:
        problems = []
        positional, named = _parameters(function)
        head = tuple(positional[:len(target.params)])
        if head != target.params:
            problems.append(f"{where}: {target.path} takes ({', '.join(positional)}) first, "
                            f"not ({', '.join(target.params)})")
        missing = [keyword for keyword in target.keywords if keyword not in named]
        if missing:
            problems.append(f"{where}: {target.path} has no parameter {', '.join(missing)} "
                            f"(it takes {', '.join(sorted(named)) or 'none'})")
        read = {ast.unparse(node) for node in ast.walk(function) if isinstance(node, (ast.Name, ast.Attribute))}
        unread = [wanted for wanted in target.reads if not any(_matches(text, wanted) for text in read)]
        if unread:
            problems.append(f"{where}: {target.path} never reads {', '.join(unread)}")
        return problems
