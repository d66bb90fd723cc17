"""Activation in fresh interpreters, the way SGLang's processes activate us: the entry point
through SGLang's own plugin loader, the switch, the fallback package, and the refusal to fall
back silently when our code cannot load."""

import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from sglang_eagle_ext.sglang.compat.cpu import SITE_DIR as SITE

# the checkout's package: the CPU shims' sitecustomize imports it before the working directory is on sys.path
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVED = ("from sglang.srt.models.registry import ModelRegistry; "
          "print('SERVED', ModelRegistry.models['LlamaForCausalLMEagle3'].__module__)")


def run(code: str, **env):
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("SGLANG_EXTERNAL_MODEL_PACKAGE", "SGLANG_EAGLE_EXT")}
    environment.update(PYTHONPATH=os.pathsep.join([os.path.abspath(SITE), ROOT]), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                          timeout=300)


def served_by(result) -> str:
    lines = [line for line in result.stdout.splitlines() if line.startswith("SERVED")]
    assert lines, result.stdout + result.stderr
    return lines[-1].split()[1]


def test_entry_point_is_declared():
    (plugin,) = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == "eagle3_ext"]
    assert plugin.value == "sglang_eagle_ext.sglang.plugin:load"


def test_sglang_plugin_loader_activates_our_class():
    result = run("from sglang.srt.plugins import load_plugins; load_plugins(); " + SERVED)
    assert result.returncode == 0, result.stderr
    assert served_by(result) == "sglang_eagle_ext.sglang.model"
    lines = [entry for entry in result.stderr.splitlines() if entry.startswith("sglang-eagle-ext:")]
    (line,) = [entry for entry in lines if "drafts served" in entry]
    assert "served by sglang_eagle_ext.sglang.model.LlamaForCausalLMEagle3" in line
    assert "patches: draft-config" in line
    # the registry import loads SGLang's scheduler after activation: the binding logs then; the
    # switches default to SGLang's kernels, and to the fused sampler on 0.5.23 (see fused_verify.DEFAULT_ON)
    assert "tree kernels and verify bound when SGLang's scheduler loads" in line
    assert any(entry.startswith("sglang-eagle-ext: (pid") and
               "tree kernels: SGLang's (SGLANG_EAGLE_EXT_TREE_KERNELS=sglang); verify: fused sampler for sampled "
               "verify (default on SGLang 0.5.23 at TP size 1" in entry for entry in lines), lines


def test_switch_turns_the_plugin_off():
    result = run("from sglang.srt.plugins import load_plugins; load_plugins(); " + SERVED,
                 SGLANG_EAGLE_EXT="0")
    assert result.returncode == 0, result.stderr
    assert served_by(result) == "sglang.srt.models.llama_eagle3"
    assert "disabled by SGLANG_EAGLE_EXT=0" in result.stderr


@pytest.mark.parametrize("name", ["SGLANG_EAGLE_EXT", "SGLANG_EAGLE_EXT_FUSED_VERIFY", "SGLANG_EAGLE_EXT_TREE_KERNELS"])
def test_a_bad_switch_stops_start_up_with_one_line(name):
    # SGLang's scheduler loads after activation here: the verify switches are read before that
    result = run("from sglang.srt.plugins import load_plugins; load_plugins(); " + SERVED, **{name: "maybe"})
    assert result.returncode != 0 and "SERVED" not in result.stdout
    assert result.stderr.strip().splitlines()[-1].startswith(f"sglang-eagle-ext: not started: {name}='maybe': expected")
    assert "Traceback" not in result.stderr


def test_fallback_package_without_entry_points():
    result = run(SERVED + "; from sglang.srt.configs import model_config; "
                 "print('LOADER', type(model_config.get_config).__name__)",
                 SGLANG_EXTERNAL_MODEL_PACKAGE="sglang_eagle_ext.sglang.models")
    assert result.returncode == 0, result.stderr
    assert served_by(result) == "sglang_eagle_ext.sglang.model"
    assert "LOADER DraftConfigLoader" in result.stdout


def test_activation_failure_stops_the_process():
    # the plugin itself cannot run: SGLang's loader would log and go on; we exit instead
    result = run("import sglang_eagle_ext.sglang.plugin as p; p.arm = None; "
                 "from sglang.srt.plugins import load_plugins; load_plugins(); print('SURVIVED')")
    assert result.returncode != 0 and "SURVIVED" not in result.stdout
    assert "sglang-eagle-ext failed to activate (TypeError" in result.stderr


def test_import_failure_stops_the_process_instead_of_falling_back():
    # `None` in sys.modules makes `import sglang_eagle_ext.sglang.model` raise ImportError
    result = run("import sys; sys.modules['sglang_eagle_ext.sglang.model'] = None; "
                 "from sglang.srt.plugins import load_plugins; load_plugins(); " + SERVED)
    assert result.returncode != 0
    assert "SERVED" not in result.stdout
    assert "sglang-eagle-ext: cannot import sglang_eagle_ext.sglang.model (ModuleNotFoundError" in result.stderr
