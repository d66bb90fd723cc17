"""The SGLang code the compat layer relies on, checked against the real source of supported lines.

Every :class:`~sglang_eagle_ext.sglang.compat.patch.Target` the compat modules declare (their
patches', the fused-verify seams', the tree-kernel binding points', the accessors') is looked up in
the wheel of each release in :data:`RELEASES`, parsed with ``ast`` and never imported: the module,
the class, the function or method, the parameters the code passes or reads, what its body reads;
and, where the code takes another path elsewhere, that other releases lack it.

The wheels (7 - 39 MB) are downloaded once per cache (``SGLANG_EAGLE_EXT_WHEEL_CACHE``, default
``~/.cache/sglang-eagle-ext/sglang-wheels``). A wheel that cannot be downloaded skips its release
locally and fails the test under CI (``CI`` set).
"""

import ast
import dataclasses
import importlib
import os
import pkgutil
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from sglang_eagle_ext.sglang import compat
from sglang_eagle_ext.sglang.compat import cpu, fused_verify, launcher, releases
from sglang_eagle_ext.sglang.compat.patch import Patch, Target
from tests.kit import release_source
from tests.kit.release_source import ReleaseSource, WheelUnavailable
from tests.sglang.conftest import RELEASE_FACTS

# A release of each stretch of SGLang's code the compat layer tells apart: 0.5.11 (v1/v2 verify
# seams, the 3 * H patches), 0.5.14 (eagle_sample, hidden_size_for, the runtime context), 0.5.17
# (capture ids in spec_aux_config, _verify_coins, get_spec), 0.5.21 (JIT tree ops, UNO), 0.5.23
# (the spec_tree dispatchers, the draft's parallel spec, watermarking).
RELEASES = ("0.5.11", "0.5.14", "0.5.17", "0.5.21", "0.5.23")


def _declared() -> list[tuple[str, Target]]:
    """Every Target the compat modules declare, alone, in a tuple or list, or in a Patch; each
    named by where it is first found."""
    found: dict[Target, str] = {}
    for info in pkgutil.iter_modules(compat.__path__):
        module = importlib.import_module(f"{compat.__name__}.{info.name}")
        for name, value in vars(module).items():
            items = value if isinstance(value, (tuple, list)) else (value,)
            for index, item in enumerate(items):
                label = f"{info.name}.{name}" + (f"[{index}]" if items is value else "")
                if isinstance(item, Target):
                    found.setdefault(item, label)
                elif isinstance(item, Patch):
                    for i, target in enumerate(item.targets):
                        found.setdefault(target, f"{label} ({item.name}).targets[{i}]")
    return [(label, target) for target, label in found.items()]


DECLARED = _declared()


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def sources(request):
    """``source(release)``: the release's :class:`ReleaseSource`, its wheel fetched once per cache."""
    opened: dict[str, ReleaseSource | WheelUnavailable] = {}

    def source(release: str) -> ReleaseSource:
        if release not in opened:
            try:
                opened[release] = ReleaseSource.of(release)
            except WheelUnavailable as error:  # remembered: one attempt per release and session
                opened[release] = error
        found = opened[release]
        if isinstance(found, WheelUnavailable):
            if _in_ci():
                pytest.fail(f"SGLang {release}'s wheel is needed to check the release facts: {found}")
            pytest.skip(f"SGLang {release}'s wheel is not available (no network?): {found}")
        return found

    yield source
    checked = [release for release in RELEASES if isinstance(opened.get(release), ReleaseSource)]
    missing = [release for release in RELEASES if isinstance(opened.get(release), WheelUnavailable)]
    request.config.stash[RELEASE_FACTS] = (
        f"{len(DECLARED)} declared targets checked against the wheels of SGLang {', '.join(checked) or '(none)'}"
        + (f"; not checked (no wheel): {', '.join(missing)}" if missing else ""))


def _problems(source: ReleaseSource, declared) -> str:
    return "\n".join(f"{label}: {problem}" for label, target in declared for problem in source.check(target))


def test_the_compat_modules_declare_targets():
    labels = [label for label, _ in DECLARED]
    assert len(labels) == len(set(labels))
    for needed in ("fused_verify.SEAMS[0]", "tree_kernels.SAMPLING_POINTS[0]", "runtime.GET_PARALLEL",
                   "config_loading.CAPTURE_IDS_PATCHES[0] (target-capture-ids).targets[0]"):
        assert needed in labels


@pytest.mark.parametrize("release", RELEASES)
def test_each_target_is_there_in_its_releases(sources, release):
    source = sources(release)
    problems = _problems(source, [(label, t) for label, t in DECLARED if t.covers(Version(release))])
    assert not problems, f"the compat code's declarations do not match SGLang {release}:\n{problems}"


@pytest.mark.parametrize("release", RELEASES)
def test_targets_absent_elsewhere_are_absent(sources, release):
    source = sources(release)
    present = [f"{label}: SGLang {release} has {target.path} as declared, outside its releases ({target.releases})"
               for label, target in DECLARED
               if target.absent_elsewhere and not target.covers(Version(release)) and not source.check(target)]
    assert not present, "\n".join(present)


@pytest.mark.parametrize("release", RELEASES)
def test_each_seams_greedy_arm_and_settings(sources, release):
    """The seam's module holds the greedy op the dispatcher replaces, taking the arguments it reads
    by name, and the seam reads the speculative settings where :data:`fused_verify.SETTINGS` does."""
    source = sources(release)
    (getter,) = [target for target in fused_verify.SETTINGS if target.covers(Version(release))]
    checks = []
    for seam in (target for target in fused_verify.SEAMS if target.covers(Version(release))):
        greedy = Target(seam.releases, seam.module, fused_verify.GREEDY_FUNC, params=fused_verify.GREEDY_FUNC_PARAMS)
        reads_settings = dataclasses.replace(seam, params=(), reads=(getter.name,))
        checks += [(f"greedy op of seam {seam.qualname}", greedy),
                   (f"settings read by seam {seam.qualname}", reads_settings)]
    problems = _problems(source, checks)
    assert checks and not problems, problems


@pytest.mark.parametrize("release", RELEASES)
def test_every_module_importing_eagle_sample_is_known(sources, release):
    (eagle_sample,) = [seam for seam in fused_verify.SEAMS if seam.member is None]
    source = sources(release)
    importers = set(source.importers(eagle_sample.module, eagle_sample.name))
    unknown = importers - set(fused_verify.CALLERS) - set(fused_verify.STOCK_CALLERS)
    assert not unknown, (f"SGLang {release}: {', '.join(sorted(unknown))} import eagle_sample by name; "
                         "fused_verify.CALLERS (rebound) or STOCK_CALLERS (left stock) must say which")
    assert bool(importers) == eagle_sample.covers(Version(release))


def test_every_declared_caller_imports_eagle_sample_in_some_release(sources):
    (eagle_sample,) = [seam for seam in fused_verify.SEAMS if seam.member is None]
    importers = set()
    for release in RELEASES:
        importers |= set(sources(release).importers(eagle_sample.module, eagle_sample.name))
    stale = set(fused_verify.CALLERS + fused_verify.STOCK_CALLERS) - importers
    assert not stale, f"{', '.join(sorted(stale))} import eagle_sample in none of SGLang {', '.join(RELEASES)}"


def test_each_patch_relies_only_on_targets_of_its_releases():
    for patch in compat.PATCHES:
        for release in RELEASES:
            if patch.needed(Version(release)):
                assert all(target.covers(Version(release)) for target in patch.targets), (patch.name, release)


# How `sglang-eagle serve` starts the server (compat/launcher.py, cpu.server_flags): checked on both
# sides of the CUDA graph flags' boundary (0.5.13 | 0.5.14) as well.
LAUNCH_RELEASES = tuple(sorted({*RELEASES, "0.5.13"}, key=Version))


def _calls(tree: ast.AST, name: str):
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == name]


def _text(node) -> str:
    """A string argument as written (an implicitly concatenated literal is one Constant)."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


@pytest.mark.parametrize("release", LAUNCH_RELEASES)
def test_sglang_serve_is_the_recommended_entry_point(sources, release):
    """``sglang`` is the console script ``sglang.cli.main:main`` and ``python -m
    sglang.launch_server`` warns that ``sglang serve`` is recommended: every supported release
    (launcher.SERVE, an EVERY_RELEASE target, says ``serve`` runs the same server)."""
    source = sources(release)
    entry_points = source.text(f"sglang-{release}.dist-info/entry_points.txt") or ""
    assert "sglang = sglang.cli.main:main" in [line.strip() for line in entry_points.splitlines()]
    warnings = [_text(call.args[0]) for call in _calls(source.module("sglang.launch_server"), "warn") if call.args]
    assert any("'sglang serve' is the recommended entrypoint" in text for text in warnings), warnings
    assert all(target.releases is releases.EVERY_RELEASE.releases for target in launcher.SERVE)


@pytest.mark.parametrize("release", LAUNCH_RELEASES)
def test_disable_cuda_graph_is_deprecated_where_the_per_phase_flags_are(sources, release):
    """``--disable-cuda-graph`` is a ``DeprecatedStoreTrueAction`` naming
    ``--cuda-graph-backend-{decode,prefill}=disabled`` exactly where ``CUDA_GRAPH_BACKEND_FLAGS``
    holds, and the fields behind those flags (ServerArgs' own up to 0.5.19, its exec namespace's
    after) are there too; elsewhere it is a plain flag and they are not."""
    source = sources(release)
    arguments = [call for call in _calls(source.module("sglang.srt.server_args"), "add_argument")
                 if call.args and _text(call.args[0]) == "--disable-cuda-graph"]
    assert len(arguments) == 1, f"SGLang {release}: {len(arguments)} registrations of --disable-cuda-graph"
    keywords = {keyword.arg: ast.unparse(keyword.value) for keyword in arguments[0].keywords}
    deprecated = keywords.get("action") == "DeprecatedStoreTrueAction"
    fields = set()
    # ServerArgs' own fields up to 0.5.19; after, its groups' (the CPU options live in three of them)
    for module in ("sglang.srt.server_args", *(f"sglang.srt.arg_groups.fields.{group}"
                                                for group in ("exec_", "device", "model"))):
        tree = source.module(module)
        fields |= {node.target.id for node in ast.walk(tree or ast.Module(body=[], type_ignores=[]))
                   if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}
    assert set(cpu.CPU_OPTIONS) <= fields, (release, set(cpu.CPU_OPTIONS) - fields)  # every CPU option is a field
    per_phase = {"cuda_graph_backend_decode", "cuda_graph_backend_prefill"} <= fields
    holds = releases.CUDA_GRAPH_BACKEND_FLAGS.holds(Version(release))
    assert (deprecated, per_phase) == (holds, holds), (release, keywords, per_phase)
    if holds:
        assert keywords.get("new_flag") == repr("--cuda-graph-backend-{decode,prefill}=disabled")
        assert set(cpu.NO_CUDA_GRAPHS) <= fields and "disable_cuda_graph" in fields  # the legacy field stays
    else:
        assert set(cpu.LEGACY_NO_CUDA_GRAPHS) <= fields


# The checker and the download, on a wheel made here (no network).

_MODULE = '''
from typing import TYPE_CHECKING
from .helpers import helper
if TYPE_CHECKING:
    from elsewhere import only_for_types

class Base:
    def inherited(self, batch):
        return batch.sampling_info.is_all_greedy

class Runner(Base):
    def run(self, batch, logits_output, *, mask=None):
        return dispatch(self.config.width)

def dispatch(width):
    from sgl_kernel import op
    return op(width)
'''


@pytest.fixture
def made_source(tmp_path):
    path = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("sglang/srt/runner.py", "\ufeff" + _MODULE)  # a BOM, as some SGLang files have
        wheel.writestr("sglang/srt/helpers.py", "def helper(model, override=None):\n    pass\n")
    return ReleaseSource("9.9.9", path)


def test_the_checker_says_what_differs(made_source):
    every = SpecifierSet(">=0")
    holds = [Target(every, "sglang.srt.runner", "Runner", "run", params=("self", "batch", "logits_output"),
                    keywords=("mask",), reads=("self.config.width",)),
             Target(every, "sglang.srt.runner", "Runner", "inherited", reads=("is_all_greedy",)),
             Target(every, "sglang.srt.runner", "helper", params=("model",), keywords=("override",)),
             Target(every, "sgl_kernel", "op", imported_in=("sglang.srt.runner.helper", "sglang.srt.runner.dispatch"))]
    assert [made_source.check(target) for target in holds] == [[], [], [], []]
    differs = {
        Target(every, "sglang.srt.gone", "Runner"): "SGLang 9.9.9 has no module sglang.srt.gone",
        Target(every, "sglang.srt.runner", "Walker"): "sglang.srt.runner has no Walker",
        Target(every, "sglang.srt.runner", "only_for_types"): "sglang.srt.runner has no only_for_types",
        Target(every, "sglang.srt.runner", "Runner", "walk"): "class sglang.srt.runner.Runner has no walk",
        Target(every, "sglang.srt.runner", "Runner", "run", params=("self", "logits_output")):
            "takes (self, batch, logits_output) first, not (self, logits_output)",
        Target(every, "sglang.srt.runner", "Runner", "run", keywords=("grammar",)): "has no parameter grammar",
        Target(every, "sglang.srt.runner", "Runner", "run", reads=("self.width",)): "never reads self.width",
        Target(every, "sgl_kernel", "other_op", imported_in=("sglang.srt.runner.dispatch",)):
            "none of sglang.srt.runner.dispatch imports other_op from sgl_kernel",
    }
    for target, message in differs.items():
        problems = made_source.check(target)
        assert len(problems) == 1 and message in problems[0], (target, problems)


def test_importers(made_source):
    assert made_source.importers("sglang.srt.helpers", "helper") == ["sglang.srt.runner"]
    assert made_source.importers("sglang.srt.helpers", "other") == []


def test_the_wheel_is_downloaded_once_and_moved_in_whole(tmp_path, monkeypatch):
    calls = []

    def pip(command, **kwargs):
        calls.append(command)
        destination = command[command.index("--dest") + 1]
        assert os.path.dirname(destination) == str(tmp_path)  # same file system: os.replace is atomic
        (Path(destination) / "sglang-9.9.9-cp311-cp311-manylinux_2_34_x86_64.whl").write_bytes(b"wheel")
        return release_source.subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(release_source.subprocess, "run", pip)
    monkeypatch.setenv(release_source.CACHE_ENV, str(tmp_path))
    first = release_source.wheel("9.9.9")
    assert first == tmp_path / "sglang-9.9.9-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert release_source.wheel("9.9.9") == first and len(calls) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]  # no scratch folder left
    assert "sglang==9.9.9" in calls[0] and "--no-deps" in calls[0]


def test_a_failed_download_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(release_source.subprocess, "run", lambda command, **kwargs: release_source.subprocess.
                        CompletedProcess(command, 1, "", "ERROR: No matching distribution found for sglang==9.9.9"))
    with pytest.raises(WheelUnavailable, match="No matching distribution found"):
        release_source.wheel("9.9.9", tmp_path)
    assert list(tmp_path.iterdir()) == []
