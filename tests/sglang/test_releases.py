"""The release table is the one place that tells releases apart.

A source scan of the package: no version is parsed or compared, and no SGLang getter is probed
for, outside ``compat/releases.py``; presence checks of SGLang code happen only where a patch
checks the code it changes (and stops the server) or where tree-kernel binding points are bound
wherever present. And every row of the table is used and detected: its specifier is the releases
of SGLang code declared in the compat modules (which ``test_release_source`` checks against the
wheels), and it holds on one side of its boundary and not on the other.
"""

import ast
from pathlib import Path

import pytest
from packaging.version import Version

import sglang_eagle_ext
from sglang_eagle_ext.sglang import compat, plugin
from sglang_eagle_ext.sglang.compat import releases
from tests.sglang.test_release_source import DECLARED

PACKAGE = Path(sglang_eagle_ext.__file__).parent
TABLE = PACKAGE / "sglang" / "compat" / "releases.py"
# Functions that look SGLang's code up by a declared target's name and act on its absence, and why
PRESENCE_CHECKS = {
    ("sglang/compat/fused_verify.py", "apply"): "the seam's check of the code it wraps: stops the server",
    ("sglang/compat/tree_kernels.py", "_bind"): "binding points are bound wherever present",
    ("sglang/compat/stop_strings.py", "_apply"): "the patch's check of the code it changes: stops the server",
    ("sglang/compat/adaptive_shape.py", "_bind_once_scheduler_loads"): "the binding's check of the name it rebinds: "
                                                                       "stops the server",
    ("sglang/compat/plain_off.py", "bind"): "the plain off's check of the verify it wraps: stops the server",
    ("sglang/compat/off_graphs.py", "bind"): "the off graphs' check of the state build they wrap: stops the server",
    ("sglang/compat/adaptive_trees.py", "bind"): "the tree set's check of the seams it wraps: stops the server",
    ("sglang/compat/deferred_extend.py", "bind"): "the deferred extend's check of the drafter seams it wraps: stops "
                                                  "the server",
}
# The supported releases, each line's first
LINES = [Version(f"0.5.{minor}") for minor in range(11, 24)]
# Facts with no Python code of SGLang to declare: the acceptance test is in the op's CUDA source
WITHOUT_TARGET = {releases.STRICT_ACCEPTANCE.name}


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), str(path))


def _called(node: ast.Call) -> str:
    return getattr(node.func, "id", None) or getattr(node.func, "attr", "")


def _is_declared_name(node: ast.AST) -> bool:
    """``x.name`` / ``x.member`` / ``x.attribute``: a declared target's attribute."""
    return isinstance(node, ast.Attribute) and node.attr in ("name", "member", "attribute")


def _probes(tree: ast.AST):
    """``(function, line)`` of each ``hasattr(o, t.name)`` / ``getattr(o, t.name, default)``."""
    for function in [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.Lambda))]:
        for node in ast.walk(function):
            if (isinstance(node, ast.Call) and _called(node) in ("hasattr", "getattr") and len(node.args) >= 2
                    and _is_declared_name(node.args[1]) and (_called(node) == "hasattr" or len(node.args) == 3)):
                yield getattr(function, "name", "<lambda>"), node.lineno


def test_no_version_is_parsed_or_compared_outside_the_table():
    found = []
    for name, tree in _sources():
        if PACKAGE / name == TABLE:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called(node) in ("Version", "SpecifierSet", "parse_version"):
                found.append(f"{name}:{node.lineno}: {_called(node)}(...)")
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE))
                                                     for op in node.ops):
                operands = [node.left, *node.comparators]
                if any("release" in ast.unparse(operand) or "version" in ast.unparse(operand).lower()
                       for operand in operands) and name.startswith("sglang/"):
                    found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "release boundaries belong in compat/releases.py:\n" + "\n".join(found)


def test_sglang_code_is_probed_only_where_a_patch_checks_it():
    found = {}
    for name, tree in _sources():
        for function, line in _probes(tree):
            found.setdefault((name, function), []).append(line)
    unexpected = {key: lines for key, lines in found.items() if key not in PRESENCE_CHECKS}
    assert not unexpected, f"presence probes of SGLang code outside a patch's checks: {unexpected}"
    assert set(PRESENCE_CHECKS) <= set(found), f"stale entries: {set(PRESENCE_CHECKS) - set(found)}"


def test_the_scans_find_what_they_look_for():
    probe = ast.parse("def accessor():\n    return getattr(module, GET_SPEC.name, None) or hasattr(m, T.member)\n")
    assert [line for _, line in _probes(probe)] == [2, 2]
    assert not list(_probes(ast.parse("def f():\n    return getattr(module, 'name', None)\n")))


def test_every_fact_is_a_row():
    assert len({fact.name for fact in releases.FACTS}) == len(releases.FACTS)
    assert releases.EVERY_RELEASE in releases.FACTS and releases.STRICT_ACCEPTANCE in releases.FACTS


@pytest.mark.parametrize("fact", releases.FACTS, ids=lambda fact: fact.name)
def test_each_row_is_declared_used_and_detected(fact):
    declared = [label for label, target in DECLARED if target.releases is fact.releases]
    patches = [patch.name for patch in compat.PATCHES if patch.releases is fact.releases]
    if fact.name not in WITHOUT_TARGET:
        assert declared or patches, f"{fact.name}: no declared SGLang code takes its releases"
    used = [name for name, tree in _sources() if PACKAGE / name != TABLE
            and any(isinstance(node, ast.Attribute) and node.attr == _constant_name(fact)
                    for node in ast.walk(tree))]
    assert used, f"{fact.name}: no module uses it"
    holds = [release for release in LINES if fact.holds(release)]
    if fact is releases.EVERY_RELEASE:
        assert holds == LINES
    else:
        assert holds and holds != LINES, f"{fact.name} ({fact.releases}) draws no boundary inside {compat.SUPPORTED}"
        assert fact.holds(Version(f"{holds[0]}.post1"))  # post releases belong to their line


def _constant_name(fact) -> str:
    (name,) = [name for name, value in vars(releases).items() if value is fact]
    return name


def test_the_activation_line_is_made_from_the_table(monkeypatch):
    armed = []
    monkeypatch.setattr("sglang_eagle_ext.sglang.compat.patch.after_import",
                        lambda module, hook: armed.append((module, hook)))
    names = plugin.arm(Version("0.5.11"), [])
    needed = [patch for patch in compat.PATCHES if patch.needed(Version("0.5.11"))]
    assert len(armed) == len(needed)
    assert names == list(dict.fromkeys(patch.name for patch in needed if patch.switch is None))
    assert [patch.name for patch in compat.BINDINGS] == ["tree-kernels", "fused-verify", "adaptive-shape"]
