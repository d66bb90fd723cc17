"""`sglang-eagle serve`: drafter resolution, print-only, legacy export, failures, launching."""

import importlib.util
import json
import os
import signal
import sys
import threading
from types import SimpleNamespace

import pytest
import torch
from tests.conftest import GREEDY_TOKENS
from tests.http_server import post, serving

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.cli import main, serve_cmd
from sglang_eagle_ext.drafter.export import export_legacy
from sglang_eagle_ext.sglang.compat import cpu, launcher
from tests.kit import fixtures


@pytest.fixture
def target(tmp_path):
    directory = tmp_path / "target"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(fixtures.target_config()))
    return str(directory)


def listing(root):
    return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files)


def test_print_only_nemo_training_checkpoint(tmp_path, target, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    outer = tmp_path / "epoch_2_step_1200"
    fixtures.build("F12-nemo", str(outer / "model"), seed=1)
    before = listing(tmp_path)
    assert main(["serve", "--target", target, "--draft", str(outer), "--print-only",
                 "--num-steps", "5", "--", "--port", "31000"]) == 0
    out = capsys.readouterr().out
    assert listing(tmp_path) == before  # nothing written, not even the cache
    assert f"--speculative-draft-model-path {outer / 'model'}" in out
    assert "--speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6" in out
    assert out.rstrip().endswith("--port 31000")
    assert "nemo dialect" in out
    # NeMo default taps: layer outputs [1, N//2-1, N-4] = hidden-state indices [2, 6, 9] for N=12
    assert "target capture: [1, 5, 8]" in out


def test_legacy_layout_in_a_training_step_folder_is_exported(tmp_path, target, capsys):
    """NeMo's older trainer kept draft_model.pt + config.json + eagle_meta.pt in epoch_*_step_*/."""
    legacy, _, _ = _legacy(tmp_path)
    step = tmp_path / "run" / "epoch_1_step_6250"
    os.makedirs(step.parent)
    os.rename(legacy, step)
    assert main(["serve", "--target", target, "--draft", str(step), "--export-dir", str(tmp_path / "x"),
                 "--print-only"]) == 0
    out = capsys.readouterr().out
    assert "legacy draft_model.pt checkpoint, exported to a model directory" in out and "(to be written)" in out


def test_consolidated_nemo_checkpoint_is_found(tmp_path, target, capsys):
    step = tmp_path / "epoch_0_step_10"
    fixtures.build("F12-nemo", str(step / "model" / "consolidated"), seed=4)
    assert main(["serve", "--target", target, "--draft", str(step), "--print-only"]) == 0
    assert f"--speculative-draft-model-path {step / 'model' / 'consolidated'}" in capsys.readouterr().out


def test_peagle_in_a_training_step_folder_is_named(tmp_path, target, capsys):
    step = tmp_path / "epoch_0_step_5"
    fixtures.build("F13-peagle-speculators", str(step))
    assert main(["serve", "--target", target, "--draft", str(step), "--print-only"]) == 1
    assert "P-EAGLE" in capsys.readouterr().err


def test_a_missing_local_target_is_reported(tmp_path, capsys):
    draft = fixtures.build("F1-specforge", str(tmp_path / "d"))
    assert main(["serve", "--target", str(tmp_path / "no-such-target"), "--draft", draft, "--print-only"]) == 1
    err = capsys.readouterr().err
    assert "no-such-target" in err and "--target" in err


def _legacy(tmp_path):
    """A legacy NeMo checkpoint: draft_model.pt (model.-prefixed, no d2t) + eagle_meta.pt."""
    nemo = fixtures.build("F12-nemo", str(tmp_path / "nemo"), seed=2)
    tensors = read_drafter(nemo).load_tensors()
    d2t = tensors.pop("d2t")
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    torch.save({"model." + k: v for k, v in tensors.items()}, legacy / "draft_model.pt")
    selected = torch.arange(d2t.numel()) + d2t
    mask = torch.zeros(512, dtype=torch.bool)
    mask[selected] = True
    torch.save({"global_step": 10, "epoch": 1, "selected_token_ids": selected,
                "selected_token_mask": mask}, legacy / "eagle_meta.pt")
    for name in ("config.json", "config.yaml"):  # the step folder keeps NeMo's run config too
        (legacy / name).write_text((tmp_path / "nemo" / name).read_text())
    return str(legacy), tensors, d2t


def test_legacy_checkpoint_print_only_then_export(tmp_path, target, capsys):
    legacy, tensors, d2t = _legacy(tmp_path)
    exports = tmp_path / "exports"
    assert main(["serve", "--target", target, "--draft", legacy, "--export-dir", str(exports),
                 "--print-only"]) == 0
    out = capsys.readouterr().out
    assert "(to be written)" in out and "legacy draft_model.pt" in out
    assert not exports.exists()
    exported = export_legacy(legacy, str(exports / "x"), target=target)
    assert sorted(os.listdir(exported)) == ["config.json", "exported_from.json", "model.safetensors"]
    config = json.load(open(os.path.join(exported, "config.json")))
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["num_hidden_layers"] == 1
    checkpoint = read_drafter(exported, target=target)
    loaded = checkpoint.load_tensors()
    assert torch.equal(loaded["d2t"], d2t)
    for name, tensor in tensors.items():
        assert torch.equal(loaded[name], tensor), name
    assert [p for p in os.listdir(exports) if p.startswith(".export-")] == []


def test_peagle_is_rejected_with_fix(tmp_path, target, capsys):
    draft = fixtures.build("F13-peagle-speculators", str(tmp_path / "p"))
    assert main(["serve", "--target", target, "--draft", draft, "--print-only"]) == 1
    err = capsys.readouterr().err
    assert "P-EAGLE" in err and "fix:" in err


def test_missing_directory_is_reported(tmp_path, target, capsys):
    assert main(["serve", "--target", target, "--draft", str(tmp_path / "nope"),
                 "--print-only"]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_without_sglang_exit_code_2(tmp_path, target, capsys, monkeypatch):
    draft = fixtures.build("F6-speculators", str(tmp_path / "d"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sglang" else real(name, *a))
    assert main(["serve", "--target", target, "--draft", draft]) == 2
    err = capsys.readouterr().err
    assert "pip install" in err and "Traceback" not in err


def test_launch_builds_flags_and_returns_exit_code(tmp_path, target, monkeypatch):
    draft = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    seen = []
    monkeypatch.setattr(serve_cmd, "launch", lambda command, env=None: seen.append((command, env)) or 3)
    assert main(["serve", "--target", target, "--draft", draft, "--topk", "2", "--device", "cpu",
                 "--", "--dtype", "bfloat16"]) == 3
    command, env = seen[0]
    assert command[:2] == [launcher.console_script(), "serve"]
    assert command[command.index("--speculative-draft-model-path") + 1] == draft
    assert command[command.index("--speculative-num-draft-tokens") + 1] == "7"
    # on CPU: SGLang's CPU flags, except one the user gave, and the shims in every SGLang process
    assert command[command.index("--device") + 1] == "cpu" and "--disable-cuda-graph" not in command
    assert command[command.index("--cuda-graph-backend-decode") + 1] == "disabled"  # SGLang 0.5.14+
    assert command.count("--dtype") == 1 and command[command.index("--dtype") + 1] == "bfloat16"
    assert env["TRITON_INTERPRET"] == "1" and env["PYTHONPATH"].split(os.pathsep)[0] == cpu.SITE_DIR


def test_print_only_cpu_command_runs_as_printed(tmp_path, target, capsys, monkeypatch):
    """The printed CPU command carries the variables SGLang's processes need: run in a shell from an
    environment without them, the line up to the launcher (this environment's ``sglang`` script)
    starts, in the interpreter that script runs, the CPU shims and Triton's interpreter (and imports
    torchvision where one is installed)."""
    import shlex
    import subprocess

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    draft = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    assert main(["serve", "--target", target, "--draft", draft, "--device", "cpu", "--print-only"]) == 0
    printed = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("command:"))
    before_launcher, _, _ = printed.removeprefix("command:").strip().partition(" serve ")
    *variables, script = shlex.split(before_launcher)
    assert script == launcher.console_script()
    with open(script, encoding="utf-8") as handle:
        shebang = handle.readline()
    assert shebang.startswith("#!") and not shebang.startswith("#!/bin/sh"), shebang
    interpreter = shebang[2:].strip()
    before_launcher = shlex.join([*variables, interpreter])
    probe = ("import os, sys, importlib.util; assert os.environ['TRITON_INTERPRET'] == '1'; "
             "importlib.util.find_spec('torchvision') and __import__('torchvision'); "
             "assert 'sglang_eagle_ext' in sys.modules, 'the CPU shims did not start'; "
             f"assert sys.prefix == {sys.prefix!r}, sys.prefix")
    ran = subprocess.run(["bash", "-c", f"{before_launcher} -c {shlex.quote(probe)}"], capture_output=True,
                         text=True, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr


def test_cpu_serving_without_extra_flags(shared_target, shared_drafter, shared_greedy_reference, tmp_path):
    # what a user types on a CPU-only machine: no PYTHONPATH, no TRITON_INTERPRET, no SGLang flags;
    # the served greedy text must equal plain greedy decoding of the target
    from sglang_eagle_ext.demo.run import PROMPTS

    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH")}
    with serving(["--target", shared_target, "--draft", shared_drafter], tmp_path / "server.log", env) as (port, _):
        reply = post(port, "/generate", {"text": PROMPTS[0], "sampling_params": {
            "temperature": 0, "max_new_tokens": GREEDY_TOKENS, "ignore_eos": True}})
    assert reply["output_ids"] == shared_greedy_reference[0]
    assert reply["meta_info"]["spec_verify_ct"] < GREEDY_TOKENS  # drafts were accepted: EAGLE-3 ran
    log = (tmp_path / "server.log").read_text()
    assert "drafts served by sglang_eagle_ext.sglang.model" in log
    # started as the release recommends, with none of its deprecated options
    assert "recommended entrypoint" not in log and "--disable-cuda-graph" not in log
    assert "is deprecated and will be removed" not in log  # SGLang's words for any deprecated flag


def test_cpu_kv_pool_is_bounded_and_its_memory_said(tmp_path, target, capsys, monkeypatch):
    """On a CPU host the command bounds SGLang's KV pool (--max-total-tokens) and the pre-flight
    says what it takes, from the target's and the drafter's geometry in float32; --cpu-kv-tokens
    sets it; a --max-total-tokens after -- wins."""
    draft = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    spec = read_drafter(draft).spec
    config = fixtures.target_config()

    def served(*options):
        assert main(["serve", "--target", target, "--draft", draft, "--device", "cpu", "--print-only", *options]) == 0
        lines = capsys.readouterr().out.splitlines()
        return next(line for line in lines if line.startswith("command:")), \
            next(line for line in lines if line.startswith("kv pool:"))

    command, kv = served()
    assert f"--max-total-tokens {cpu.DEFAULT_KV_TOKENS}" in command
    heads = config["num_attention_heads"]
    per_token = 2 * 4 * config["num_hidden_layers"] * config.get("num_key_value_heads", heads) * \
        config.get("head_dim", config["hidden_size"] // heads)
    draft_per_token = 2 * 4 * spec.num_layers * spec.num_key_value_heads * spec.head_dim
    assert f"target {per_token * cpu.DEFAULT_KV_TOKENS / 2**20:,.0f} MiB" in kv
    assert f"drafter {draft_per_token * cpu.DEFAULT_KV_TOKENS / 2**20:,.0f} MiB" in kv
    command, kv = served("--cpu-kv-tokens", "4096")
    assert "--max-total-tokens 4096" in command and kv.startswith("kv pool:        4,096 tokens")
    command, kv = served("--", "--max-total-tokens", "99")
    assert command.count("--max-total-tokens") == 1 and "--max-total-tokens 99" in command


def test_launch_forwards_signals(tmp_path):
    ready = tmp_path / "ready"
    child = ("import signal, sys, time, pathlib\n"
             "signal.signal(signal.SIGTERM, lambda *a: sys.exit(5))\n"
             f"pathlib.Path({str(ready)!r}).write_text('x')\n"
             "while True: time.sleep(0.05)\n")

    def send_when_ready():
        while not ready.exists():
            threading.Event().wait(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=send_when_ready, daemon=True).start()
    assert serve_cmd.launch([sys.executable, "-c", child]) == 5


def test_print_only_says_what_stock_does_only_when_asked(tmp_path, target, capsys):
    """Without --stock-check the pre-flight says stock was not checked (never a guess); with it, stock's own
    loader runs on the drafter and its refusal of a speculators config is quoted."""
    draft = fixtures.build("F8-speculators-4-aux", str(tmp_path / "d"), seed=4)
    assert main(["serve", "--target", target, "--draft", draft, "--print-only"]) == 0
    assert "stock SGLang: not checked (--stock-check runs stock SGLang's own loader on it)" in capsys.readouterr().out
    assert main(["serve", "--target", target, "--draft", draft, "--print-only", "--stock-check"]) == 0
    out = capsys.readouterr().out
    assert "refuses it: ValueError: Unrecognized model in" in out and "this plugin can" in out


def test_adaptive_adds_sglangs_flag_and_this_packages_switch(tmp_path, target, monkeypatch):
    draft = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    seen = []
    monkeypatch.delenv("SGLANG_EAGLE_EXT_ADAPTIVE", raising=False)
    monkeypatch.setattr(serve_cmd, "launch", lambda command, env=None: seen.append((command, env)) or 0)
    assert main(["serve", "--target", target, "--draft", draft, "--adaptive", "--device", "cpu"]) == 0
    command, env = seen[0]
    assert "--speculative-adaptive" in command and env["SGLANG_EAGLE_EXT_ADAPTIVE"] == "1"
    # SGLang starts the deepest chain of the depths the policy chooses among (stock requires one of them)
    assert command[command.index("--speculative-num-steps") + 1] == "3"
    assert command[command.index("--speculative-num-draft-tokens") + 1] == "4"


@pytest.mark.parametrize("options", [["--num-steps", "2"], ["--num-steps", "3", "--num-draft-tokens", "6"]])
def test_adaptive_refuses_a_shape_it_cannot_start_from(tmp_path, target, capsys, options):
    draft = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    assert main(["serve", "--target", target, "--draft", draft, "--adaptive", "--print-only", *options]) == 2
    error = capsys.readouterr().err
    assert error.startswith("serve: --adaptive chooses among chains (top-k 1) of 1, 3 or 5 steps") and \
        "--topk 1 --num-steps 5" in error


def test_adaptive_needs_a_release_with_sglangs_policy(tmp_path, target, capsys, monkeypatch):
    from packaging.version import Version

    draft = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    monkeypatch.setattr(serve_cmd, "serving_release", lambda: Version("0.5.16"))
    assert main(["serve", "--target", target, "--draft", draft, "--adaptive", "--print-only"]) == 2
    assert "needs SGLang 0.5.21 or later" in capsys.readouterr().err


def test_adaptive_launches_a_tree_as_the_sets_deepest_shape(tmp_path, target, monkeypatch):
    draft = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    seen = []
    monkeypatch.delenv("SGLANG_EAGLE_EXT_ADAPTIVE", raising=False)
    monkeypatch.setattr(serve_cmd, "launch", lambda command, env=None: seen.append((command, env)) or 0)
    assert main(["serve", "--target", target, "--draft", draft, "--adaptive", "--device", "cpu",
                 "--topk", "4", "--num-steps", "5", "--num-draft-tokens", "8"]) == 0
    command, env = seen[0]
    assert "--speculative-adaptive" in command and env["SGLANG_EAGLE_EXT_ADAPTIVE"] == "1"
    shape = [command[command.index(flag) + 1] for flag in
             ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")]
    assert shape == ["5", "4", "8"]


@pytest.mark.parametrize("steps, topk, draft_tokens", [(5, 4, 8), (5, 2, None), (5, 2, 4), (5, 4, 3), (3, 2, None),
                                                         (4, 4, 8), (7, 4, 16)])
def test_adaptive_tree_refusals_are_the_plugins_own(tmp_path, target, capsys, steps, topk, draft_tokens):
    """This command refuses a tree launch exactly where the plugin's launch check (``TreeSet.checked``, run by the
    server at start-up on the policy's depths) would stop it, and its hint is a launch that check accepts."""
    from sglang_eagle_ext.sglang.compat.adaptive_trees import TreeSet
    from sglang_eagle_ext.sglang.shape_policy import DEFAULT_STEPS

    draft = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    options = ["--topk", str(topk), "--num-steps", str(steps)]
    options += ["--num-draft-tokens", str(draft_tokens)] if draft_tokens else []
    code = main(["serve", "--target", target, "--draft", draft, "--adaptive", "--print-only", *options])
    try:
        # the draft tokens this command passes to SGLang, with --num-draft-tokens or without
        passed = serve_cmd.draft_tokens_of(SimpleNamespace(num_draft_tokens=draft_tokens, num_steps=steps, topk=topk))
        TreeSet.checked(steps, topk, passed, list(DEFAULT_STEPS))
        plugin_accepts = True
    except ValueError:
        plugin_accepts = False
    assert code == (0 if plugin_accepts else 2)
    if not plugin_accepts:
        error = capsys.readouterr().err
        assert error.startswith(f"serve: --adaptive with --topk {topk} launches the set's tree as its deepest")
        assert "--num-steps 5 and --num-draft-tokens of at least 4" in error
        TreeSet.checked(5, 4, 8, list(DEFAULT_STEPS))  # the example it gives


def test_adaptive_tree_needs_the_release_with_trees_in_the_set(tmp_path, target, capsys, monkeypatch):
    from packaging.version import Version

    draft = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    monkeypatch.setattr(serve_cmd, "serving_release", lambda: Version("0.5.21"))
    assert main(["serve", "--target", target, "--draft", draft, "--adaptive", "--print-only",
                 "--topk", "4", "--num-steps", "5", "--num-draft-tokens", "8"]) == 2
    assert "with --topk 4 (a tree in the set) needs SGLang >=0.5.23; this is 0.5.21" in capsys.readouterr().err
    # its own depths do not change that: 0.5.21's stock would serve the tree as a fixed shape, with a warning
    config = tmp_path / "adaptive.json"
    config.write_text('{"1": {"candidate_steps": [0, 1, 5]}}')
    assert main(["serve", "--target", target, "--draft", draft, "--adaptive", "--print-only", "--topk", "4",
                 "--num-steps", "5", "--num-draft-tokens", "8",
                 "--", "--speculative-adaptive-config", str(config)]) == 2


def test_adaptive_leaves_a_launch_with_its_own_depths_to_the_server(tmp_path, target, capsys):
    """With ``--speculative-adaptive-config`` after ``--`` the depths are that file's: this command does not judge
    the launch by the policy's default depths."""
    draft = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    config = tmp_path / "adaptive.json"
    config.write_text('{"1": {"candidate_steps": [0, 2]}}')
    assert main(["serve", "--target", target, "--draft", draft, "--adaptive", "--print-only", "--num-steps", "2",
                 "--", "--speculative-adaptive-config", str(config)]) == 0
