"""Fused verify in SGLang's server: the installed release's own ``eagle_sample`` with the fused
sampler wired in, against the float64 reference with the same coins; and when it hands back."""

import dataclasses
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from packaging.version import Version

from sglang_eagle_ext.sglang.compat import cpu, fused_verify

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("seed", [3, 8])
def test_sglang_eagle_sample_serves_sampled_verify_fused(seed):
    # turned on explicitly: under tensor parallelism (the case's two-rank group) the default hands back
    env = cpu.process_environment({**os.environ, fused_verify.ENV_SWITCH: "1"})
    result = subprocess.run([sys.executable, "-m", "tests.sglang.fused_verify_case", str(seed)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["sites"] == ["eagle_sample"]
    # the same draws as the reference on the adjusted logits (logit bias, grammar -inf, a greedy row)
    assert out["fused"] == out["want"]
    assert out["logits_untouched"] and out["is_all_greedy_restored"]
    assert out["broadcast_count"] == 3 and out["broadcasts"] == [[True, 0], [True, 0]]  # from rank 0
    assert out["greedy"] == out["greedy_want"]  # an all-greedy batch keeps SGLang's greedy verify


def _context(release="0.5.23", tp=1, turned_on=False, rocm=False, **settings):
    """A CPU process's context: the speculative settings given (any other setting is off), TP size ``tp``."""
    group = SimpleNamespace(world_size=tp)
    return fused_verify.VerifyContext(Version(release), ("cpu",), rocm=rocm, turned_on=turned_on,
                                      setting=lambda name: settings.get(name, False), tp_group=lambda: group)


def _call(**changes):
    info = SimpleNamespace(is_all_greedy=False, has_watermark_candidates=False)
    batch = SimpleNamespace(forward_mode=SimpleNamespace(is_idle=lambda: changes.get("idle", False)),
                            sampling_info=info, seq_lens=torch.tensor([5]))
    info.is_all_greedy = changes.get("greedy", False)
    verify_input = type(changes.get("input", "EagleVerifyInput"), (), {})()
    logits = changes.get("logits", torch.zeros(4, 8))
    return verify_input, batch, SimpleNamespace(next_token_logits=logits)


@pytest.mark.parametrize("changes, uno, reason", [
    ({}, None, None),
    ({"logits": torch.zeros(4, 8, device="meta")}, None, "device meta"),
    ({"idle": True}, None, "idle batch"),
    ({"greedy": True}, None, "all-greedy batch"),
    ({"input": "NgramVerifyInput"}, None, "verify input NgramVerifyInput"),
    ({}, 20, "UNO target sampling"),
    ({"logits": torch.zeros(4, 8, dtype=torch.float64)}, None, "logits torch.float64 (4, 8)"),
    ({"logits": torch.zeros(8, 4).t()}, None, "logits torch.float32 (4, 8)"),
])
def test_hand_back_reasons(changes, uno, reason):
    assert fused_verify._hand_back_reason(_context(), *_call(**changes), uno) == reason


def test_rocm_hands_back():
    # ROCm's torch names its devices "cuda"; SGLang verifies sampled batches greedily there
    assert fused_verify._hand_back_reason(_context(rocm=True), *_call()) == "ROCm"


def test_tensor_parallelism_hands_back_unless_turned_on():
    assert fused_verify._hand_back_reason(_context("0.5.16", tp=2), *_call()).startswith("tensor parallelism")
    assert fused_verify._hand_back_reason(_context("0.5.16", tp=2, turned_on=True), *_call()) is None


@pytest.mark.parametrize("value, turned_on", [(None, False), ("1", True), (" Yes ", True), ("on", True)])
def test_the_context_is_read_from_the_process(monkeypatch, value, turned_on):
    if value is None:
        monkeypatch.delenv(fused_verify.ENV_SWITCH, raising=False)
    else:
        monkeypatch.setenv(fused_verify.ENV_SWITCH, value)
    context = fused_verify.verify_context(Version("0.5.23"))
    assert context.turned_on is turned_on and context.rocm is bool(torch.version.hip)
    assert context.tp_group is fused_verify._tp_group
    # served on CUDA only unless asked: CPU logits hand back
    assert context.devices == ("cuda",)
    assert fused_verify._hand_back_reason(context, *_call()) == "device cpu"


def _recording_branch(calls):
    def branch(verify_input, batch, logits_output, *rest, **kwargs):
        calls.append((batch.sampling_info.is_all_greedy, rest, kwargs))
        return "stock"

    return branch


# the speculative settings each release's server has (a missing one raises, as on a real server)
SETTINGS = {"0.5.11": {"speculative_accept_threshold_single": 1.0, "speculative_accept_threshold_acc": 1.0},
            "0.5.16": {"speculative_accept_threshold_single": 1.0, "speculative_accept_threshold_acc": 1.0,
                       "speculative_use_rejection_sampling": False}}


@pytest.mark.parametrize("release, seam, rest, kwargs, routed", [
    ("0.5.16", fused_verify.SEAMS[0], (None, None), {}, True),                 # eagle_sample(grammar_mask, uno)
    ("0.5.16", fused_verify.SEAMS[0], (None, 20), {}, False),                  # UNO given positionally
    ("0.5.16", fused_verify.SEAMS[0], (None,), {"uno_target_max_top_k": 20}, False),
    ("0.5.16", fused_verify.SEAMS[0], (None,), {"watermark_state": object()}, True),  # no watermark candidates
    ("0.5.11", fused_verify.SEAMS[2], ("allocator", 16, None), {}, True),      # v1 verify(allocator, page_size, mask)
    ("0.5.11", fused_verify.SEAMS[1], (None,), {}, True),                      # v2 mixin sample(vocab_mask)
])
def test_the_wrapper_routes_each_seams_call(release, seam, rest, kwargs, routed):
    assert Version(release) in seam.releases
    settings = SimpleNamespace(**SETTINGS[release])
    context = dataclasses.replace(_context(release), setting=lambda name: getattr(settings, name))
    calls = []
    wrapped = fused_verify._wrap_branch(context, seam, _recording_branch(calls))
    verify_input, batch, output = _call()
    assert wrapped(verify_input, batch, output, *rest, **kwargs) == "stock"
    # routed: the greedy arm runs with is_all_greedy set for the call, restored after it
    assert calls == [(routed, rest, kwargs)] and batch.sampling_info.is_all_greedy is False


def test_rejection_sampling_and_watermark_hand_back():
    rejection = _context("0.5.16", speculative_use_rejection_sampling=True)
    assert fused_verify._hand_back_reason(rejection, *_call()) == "rejection sampling"
    # 0.5.11 has no such setting: never read there
    assert fused_verify._hand_back_reason(_context("0.5.11", speculative_use_rejection_sampling=True), *_call()) is None
    verify_input, batch, output = _call()
    batch.sampling_info.has_watermark_candidates = True
    assert fused_verify._hand_back_reason(_context(), verify_input, batch, output, watermark=object()) == "watermark"


def test_switch_default_and_log_phrase(monkeypatch):
    verified, held_back, unrun = Version("0.5.16"), Version("0.5.21"), Version("0.5.19")
    sites = ["eagle_sample"]
    monkeypatch.delenv(fused_verify.ENV_SWITCH, raising=False)
    # unset: on where the wiring has run end to end on a GPU with stock's outputs and speed, opt-in
    # elsewhere; the line says which and why
    assert fused_verify.selected(verified) is True
    assert not any(fused_verify.selected(release) for release in (held_back, unrun))
    assert fused_verify.describe(verified, sites) == (
        "fused sampler for sampled verify (default on SGLang 0.5.16 at TP size 1, where it ran end to end on a GPU "
        "at stock's speed or better with stock's outputs; SGLANG_EAGLE_EXT_FUSED_VERIFY=0 turns it off; "
        "eagle_sample)")
    assert (fused_verify.selected(Version("0.5.16rc1")) is False
            and fused_verify.selected(Version("0.5.16.post1")) is False)
    assert "opt-in on SGLang 0.5.21, " + fused_verify.HELD_BACK[held_back] in fused_verify.describe(held_back, [])
    assert "opt-in on SGLang 0.5.19, not yet validated end to end on a GPU" in fused_verify.describe(unrun, [])
    other = held_back
    assert "SGLANG_EAGLE_EXT_FUSED_VERIFY=1 turns it on" in fused_verify.describe(other, [])
    monkeypatch.setenv(fused_verify.ENV_SWITCH, "1")
    assert fused_verify.selected(other) is True
    assert fused_verify.describe(other, sites).endswith("(SGLANG_EAGLE_EXT_FUSED_VERIFY=1; eagle_sample)")
    monkeypatch.setenv(fused_verify.ENV_SWITCH, "0")
    assert fused_verify.selected(verified) is False
    assert fused_verify.describe(verified, []) == "stock SGLang (SGLANG_EAGLE_EXT_FUSED_VERIFY=0)"
    monkeypatch.setenv(fused_verify.ENV_SWITCH, "fast")
    with pytest.raises(ValueError, match="SGLANG_EAGLE_EXT_FUSED_VERIFY='fast'"):
        fused_verify.selected(verified)


def test_the_first_verify_compiles_the_sampler_ahead_once_where_it_would_serve(monkeypatch):
    """compile_ahead: at a process's first verify (greedy ones included), the fused sampler compiled for the logits'
    vocabulary and dtype, once each, with the release's acceptance test; not where stock serves those logits; a
    failure logged as this package's, the server served on, and not tried again."""
    from sglang_eagle_ext.kernels.sampling import from_logits

    compiled, lines = [], []
    monkeypatch.setattr(fused_verify, "_compiled", set())
    monkeypatch.setattr(from_logits, "compile_for_vocabulary", lambda vocab, device, dtype, strict_acceptance:
                        compiled.append((vocab, dtype, strict_acceptance)))
    fused_verify.compile_ahead(_context(), torch.zeros(4, 8), log=lines.append)
    fused_verify.compile_ahead(_context(), torch.zeros(2, 8), log=lines.append)  # another batch: compiled already
    fused_verify.compile_ahead(_context("0.5.16"), torch.zeros(4, 16, dtype=torch.bfloat16), log=lines.append)
    assert compiled == [(8, torch.float32, True), (16, torch.bfloat16, False)]  # 0.5.21+'s strict test
    assert "fused sampler compiled ahead for vocabulary 8 (float32) in" in lines[0] and len(lines) == 2
    for context, logits in ((_context(tp=2), torch.zeros(4, 24)), (_context(), torch.zeros(4, 32, device="meta")),
                            (_context(rocm=True), torch.zeros(4, 40)),
                            (_context(), torch.zeros(4, 48, dtype=torch.float64))):
        fused_verify.compile_ahead(context, logits, log=lines.append)
    assert len(compiled) == 2 and len(lines) == 2  # stock serves each of those
    fused_verify.compile_ahead(_context(tp=2, turned_on=True), torch.zeros(4, 56), log=lines.append)
    assert compiled[-1] == (56, torch.float32, True)

    def failing(vocab, device, dtype, strict_acceptance):
        compiled.append("tried")
        raise RuntimeError("PTX assembly failed")

    monkeypatch.setattr(from_logits, "compile_for_vocabulary", failing)
    for _ in range(2):
        fused_verify.compile_ahead(_context(), torch.zeros(4, 64), log=lines.append)
    assert compiled.count("tried") == 1
    assert lines[-1].startswith("sglang-eagle-ext: fused sampler not compiled ahead (RuntimeError: PTX assembly "
                                "failed); its first sampled verify compiles it (this package's failure")
