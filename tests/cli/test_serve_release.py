"""`sglang-eagle serve` starts SGLang as the release it runs recommends: ``sglang serve`` (every
supported release's ``python -m sglang.launch_server`` says so) and, on a CPU host, CUDA graphs off
per phase from 0.5.14 (``--disable-cuda-graph`` deprecated there), the one switch before; the demo's
engine keywords alike."""

import importlib.metadata
import importlib.util
import json
import shlex
import sysconfig

import pytest
from packaging.version import Version

from sglang_eagle_ext.cli import main, serve_cmd
from sglang_eagle_ext.sglang.compat import cpu, installed_release, launcher, releases
from tests.kit import fixtures

DEPRECATED = ("--disable-cuda-graph", "sglang.launch_server")
PER_PHASE = ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]


@pytest.fixture
def printed(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(serve_cmd, "device_problem", lambda device: None)  # a GPU host's command, printed here
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(fixtures.target_config()))
    draft = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))

    def command(*options) -> list[str]:
        assert main(["serve", "--target", str(target), "--draft", draft, "--print-only", *options]) == 0
        line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("command:"))
        return shlex.split(line.removeprefix("command:"))

    return command


def _simulate(monkeypatch, release: str) -> None:
    monkeypatch.setattr(releases, "installed_release", lambda: Version(release))


def test_the_installed_release_gets_no_deprecated_option(printed):
    for device in ("cpu", "cuda"):
        command = printed("--device", device)
        assert not any(word in DEPRECATED for word in command), command
        start = command.index(launcher.console_script())
        assert command[start + 1] == "serve" and command[start + 2] == "--model-path"
    # on a GPU host only this package's folder may precede it (a source checkout's, not an installed copy's)
    assert all(word.startswith("PYTHONPATH=") for word in command[:command.index(launcher.console_script())])
    cpu_command = printed("--device", "cpu")
    at = cpu_command.index("--cuda-graph-backend-decode")
    assert cpu_command[at:at + 4] == PER_PHASE and installed_release() >= Version("0.5.14")


@pytest.mark.parametrize("release, graphs", [("0.5.11", ["--disable-cuda-graph"]),
                                             ("0.5.13", ["--disable-cuda-graph"]),
                                             ("0.5.14", PER_PHASE), ("0.5.23", PER_PHASE)])
def test_each_release_gets_its_own_spelling(printed, monkeypatch, release, graphs):
    _simulate(monkeypatch, release)
    command = printed("--device", "cpu")
    assert command[command.index(launcher.console_script()) + 1] == "serve"
    at = command.index(graphs[0])
    assert command[at:at + len(graphs)] == graphs
    other = "--cuda-graph-backend-decode" if graphs[0] == "--disable-cuda-graph" else "--disable-cuda-graph"
    assert other not in command and "sglang.launch_server" not in command


def test_a_users_own_graph_flags_win(printed, monkeypatch):
    command = printed("--device", "cpu", "--", "--cuda-graph-backend-decode", "full")
    assert command.count("--cuda-graph-backend-decode") == 1 and command[-2:] == ["--cuda-graph-backend-decode", "full"]
    assert command[command.index("--cuda-graph-backend-prefill") + 1] == "disabled"
    _simulate(monkeypatch, "0.5.13")
    command = printed("--device", "cpu", "--", "--disable-cuda-graph")
    assert command.count("--disable-cuda-graph") == 1 and command[-1] == "--disable-cuda-graph"


def test_without_the_console_script_the_launcher_module_runs_it(printed, monkeypatch):
    monkeypatch.setattr(launcher, "console_script", lambda: None)
    command = printed("--device", "cuda")
    start = command.index(serve_cmd.sys.executable)
    assert command[start:start + 4] == [serve_cmd.sys.executable, "-m", "sglang.launch_server", "--model-path"]


def test_without_sglang_the_newest_release_is_printed(printed, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sglang" else real(name, *a))

    def missing():
        raise importlib.metadata.PackageNotFoundError("sglang")

    monkeypatch.setattr(releases, "installed_release", missing)
    monkeypatch.setattr(launcher, "console_script", lambda: None)
    command = printed("--device", "cpu")
    script = launcher.os.path.join(sysconfig.get_path("scripts"), "sglang")  # where pip install puts it
    assert command[command.index(script) + 1] == "serve" and "--cuda-graph-backend-prefill" in command


def test_newest_is_the_last_supported_line():
    assert releases.NEWEST in releases.SUPPORTED
    assert Version(f"{releases.NEWEST.major}.{releases.NEWEST.minor}.{releases.NEWEST.micro + 1}") \
        not in releases.SUPPORTED


def test_engine_options_per_release():
    assert cpu.engine_options(Version("0.5.13"))["disable_cuda_graph"] is True
    newer = cpu.engine_options(Version("0.5.14"))
    assert "disable_cuda_graph" not in newer and newer["cuda_graph_backend_prefill"] == "disabled"
    assert cpu.engine_options(Version("0.5.11")).keys() - {"disable_cuda_graph"} == cpu.CPU_OPTIONS.keys()


def test_the_installed_release_takes_the_engine_options():
    """The demo's CPU engine keywords are ServerArgs fields of this release, and they switch every
    phase's CUDA graph off as the deprecated keyword did."""
    from sglang.srt.server_args import ServerArgs

    from sglang_eagle_ext.demo.run import engine_options
    from sglang_eagle_ext.sglang.compat.runtime import server_option_names

    options = engine_options("cpu", "triton")
    assert options == cpu.engine_options(installed_release()) and set(options) <= server_option_names()
    ServerArgs(model_path="unused", **options)


def test_the_server_imports_the_package_that_launched_it(monkeypatch):
    """The `sglang` script puts its own folder first on sys.path, not the working directory as
    `python -m` did: run from a source checkout, the checkout goes on the server's PYTHONPATH (after
    the CPU shims' folder); an installed package adds nothing."""
    import site

    env = serve_cmd.server_environment({"PYTHONPATH": "/mine"}, "cpu")
    assert env["PYTHONPATH"].split(launcher.os.pathsep) == [cpu.SITE_DIR, "/mine", serve_cmd.PACKAGE_ROOT]
    assert serve_cmd.server_environment({}, "cuda") == {"PYTHONPATH": serve_cmd.PACKAGE_ROOT}
    monkeypatch.setattr(site, "getsitepackages", lambda: [serve_cmd.PACKAGE_ROOT])
    assert serve_cmd.server_environment({}, "cuda") == {}
