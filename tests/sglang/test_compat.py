"""The release table and each patch: worker patches for the SGLang releases that size the draft
input ``3 * H``, and the target capture ids re-resolved when they are applied (for a late
activation).

The patched classes do not exist in the CI's SGLang (0.5.23), so each patch is applied to a
stand-in with the same shape as the release's code (attribute names and call pattern of
0.5.11 / 0.5.12-0.5.14); the GPU runs exercise them on the real releases, and
``test_release_source`` checks the code each patch declares it relies on against the releases'
own source.
"""

import json
import os
import random
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig

from packaging.version import Version

from sglang_eagle_ext.sglang import compat, plugin
from sglang_eagle_ext.sglang.compat import (config_loading, draft_width, extend_graph_width, hidden_size_for,
                                            idle_input_width, prompt_token_range, stop_strings)
from sglang_eagle_ext.sglang.compat.patch import UnsupportedRelease, after_import
from tests.kit import fixtures

A, T, H = 4, 96, 64  # four aux states of a 96-wide target; the draft is 64 wide


def draft_hf_config(use_aux=True):
    return SimpleNamespace(hidden_size=H, target_hidden_size=T, num_aux_hidden_states=A,
                           eagle_config={"use_aux_hidden_state": use_aux,
                                         "eagle_aux_hidden_state_layer_ids": [1, 3, 5, 7]})


def eagle3_worker(use_aux=True, **extra):
    algorithm = SimpleNamespace(is_eagle3=lambda: True)
    return SimpleNamespace(speculative_algorithm=algorithm, eagle_use_aux_hidden_state=use_aux, **extra)


class ExtendGraphRunner:
    """0.5.11's EAGLEDraftExtendCudaGraphRunner: a 3*H buffer built in __init__, then capture()."""

    def __init__(self, worker, hf_config):
        self.eagle_worker = worker
        self.model_runner = SimpleNamespace(model_config=SimpleNamespace(hf_config=hf_config))
        self.buffers = SimpleNamespace(hidden_states=torch.zeros(12, 3 * hf_config.target_hidden_size))
        self.captured_width = None

    def capture(self):
        self.captured_width = self.buffers.hidden_states.shape[1]


def test_draft_extend_graph_buffer_gets_the_draft_width():
    assert extend_graph_width.patch_draft_extend_graph_width(ExtendGraphRunner)
    assert not extend_graph_width.patch_draft_extend_graph_width(ExtendGraphRunner)  # once only
    runner = ExtendGraphRunner(eagle3_worker(), draft_hf_config())
    runner.capture()
    assert runner.captured_width == A * T
    assert runner.buffers.hidden_states.shape == (12, A * T)
    # without aux states (EAGLE-1-style head) the stock buffer stays
    plain = ExtendGraphRunner(eagle3_worker(use_aux=False), draft_hf_config(use_aux=False))
    plain.capture()
    assert plain.captured_width == 3 * T


class DraftInput:
    """0.5.11's EagleDraftInput.create_idle_input(device, hidden_size, dtype, topk, ...)."""

    def __init__(self, hidden_states):
        self.hidden_states = hidden_states

    @classmethod
    def create_idle_input(cls, device, hidden_size, dtype, topk, capture_hidden_mode=None):
        return cls(torch.empty((0, hidden_size), device=device, dtype=dtype))


class Worker:
    """0.5.11's EAGLEWorker.forward_draft_extend_after_decode: inline ``hidden_size * 3``."""

    def __init__(self, use_aux=True):
        self.speculative_algorithm = SimpleNamespace(is_eagle3=lambda: True)
        self.eagle_use_aux_hidden_state = use_aux
        self.model_config = SimpleNamespace(hidden_size=H, hf_config=draft_hf_config(use_aux))

    def forward_draft_extend_after_decode(self, batch):
        width = self.model_config.hidden_size * 3 if self.eagle_use_aux_hidden_state else H
        return DraftInput.create_idle_input(device="cpu", hidden_size=width, dtype=torch.float32, topk=1)


def test_idle_draft_extend_input_gets_the_draft_width():
    assert idle_input_width.patch_idle_draft_input_width(DraftInput, [Worker])
    assert Worker().forward_draft_extend_after_decode(None).hidden_states.shape == (0, A * T)
    # outside the worker method, and for workers without aux states, nothing changes
    assert DraftInput.create_idle_input("cpu", 7, torch.float32, 1).hidden_states.shape == (0, 7)
    assert Worker(use_aux=False).forward_draft_extend_after_decode(None).hidden_states.shape == (0, H)


class ExtendInput:
    """0.5.12-0.5.14's EagleDraftExtendInput.hidden_size_for: reads the *target* config."""

    @classmethod
    def hidden_size_for(cls, worker):
        target = worker.target_worker.model_runner.model_config.hf_config
        return 3 * target.hidden_size


def test_hidden_size_for_reads_the_draft_config():
    target = SimpleNamespace(model_runner=SimpleNamespace(model_config=SimpleNamespace(
        hf_config=SimpleNamespace(hidden_size=T))))
    draft_runner = SimpleNamespace(is_draft_worker=True,
                                   model_config=SimpleNamespace(hf_config=draft_hf_config()))
    assert ExtendInput.hidden_size_for(eagle3_worker(target_worker=target)) == 3 * T
    assert hidden_size_for.patch_hidden_size_for(ExtendInput)
    assert ExtendInput.hidden_size_for(eagle3_worker(target_worker=target, draft_runner=draft_runner)) == A * T
    assert ExtendInput.hidden_size_for(eagle3_worker(use_aux=False, target_worker=target,
                                                     draft_runner=draft_runner)) == 3 * T



class RequestValidator:
    """TokenizerManager's per-request check (every release): ``_validate_one_request(obj, input_ids)``."""

    def __init__(self, vocab_size):
        self.model_config = SimpleNamespace(vocab_size=vocab_size)
        self.validated = []

    def _validate_one_request(self, obj, input_ids):
        self.validated.append(list(input_ids))


def test_prompt_token_ids_outside_the_vocabulary_are_a_bad_request():
    assert prompt_token_range.patch_prompt_token_range(RequestValidator)
    assert not prompt_token_range.patch_prompt_token_range(RequestValidator)  # once only
    manager = RequestValidator(vocab_size=512)
    for ids, position in (([5, 512], 1), ([-1, 3], 0), ([7, 8, 99999], 2)):
        with pytest.raises(ValueError, match=rf"input_ids\[{position}\] = {ids[position]} .*\[0, 512\)"):
            manager._validate_one_request(SimpleNamespace(input_ids=ids), ids)
    assert manager.validated == []  # rejected before SGLang's own checks
    manager._validate_one_request(SimpleNamespace(input_ids=[0, 511]), [0, 511])
    # ids the tokenizer made from text, and multimodal placeholders (outside the vocabulary by
    # design), are SGLang's to judge
    manager._validate_one_request(SimpleNamespace(input_ids=None, text="hi"), [600])
    manager._validate_one_request(SimpleNamespace(input_ids=[1, 600], image_data=["a.png"]), [1, 600])
    assert manager.validated == [[0, 511], [600], [1, 600]]


# Patches each release line needs, from the releases' own code (see each patch module).
RELEASE_PATCHES = {
    "0.5.11": ["draft-config", "target-capture-ids", "draft-extend-graph-width", "idle-draft-input-width",
               "prompt-token-range"],
    "0.5.12": ["draft-config", "target-capture-ids", "hidden-size-for", "prompt-token-range"],
    "0.5.14": ["draft-config", "target-capture-ids", "hidden-size-for", "prompt-token-range",
               "first-stop-string"],
    "0.5.15": ["draft-config", "target-capture-ids", "prompt-token-range", "first-stop-string"],
    "0.5.16": ["draft-config", "target-capture-ids", "prompt-token-range", "first-stop-string"],
    "0.5.23": ["draft-config", "target-capture-ids", "prompt-token-range", "first-stop-string"],
    "0.5.23.post1": ["draft-config", "target-capture-ids", "prompt-token-range", "first-stop-string"],
    # newer than supported: the newest set
    "0.6.0": ["draft-config", "target-capture-ids", "prompt-token-range", "first-stop-string"],
}


@pytest.mark.parametrize("release", sorted(RELEASE_PATCHES))
def test_release_table(release, monkeypatch):
    monkeypatch.setattr("sglang_eagle_ext.sglang.compat.patch.after_import", lambda name, hook: None)
    assert plugin.arm(Version(release), []) == RELEASE_PATCHES[release]
    assert (Version(release) in compat.SUPPORTED) == (release != "0.6.0")


def test_releases_before_the_range_are_refused():
    with pytest.raises(UnsupportedRelease, match="older than the supported range"):
        plugin.arm(Version("0.5.10"), [])


def test_installed_release_is_read_from_its_metadata():
    import sglang

    assert compat.installed_release() == Version(sglang.__version__)


def test_patches_apply_when_sglang_imports_the_module(tmp_path, monkeypatch):
    """Patches wait for SGLang's own import of a module (importing it early breaks 0.5.11)."""
    (tmp_path / "late_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    after_import("late_module", lambda module: seen.append(module.VALUE))
    assert seen == []
    import late_module  # noqa: F401
    assert seen == [1]
    after_import("late_module", lambda module: seen.append(2))  # already loaded: now
    assert seen == [1, 2]


def test_draft_input_width_precedence():
    config = draft_hf_config()
    assert draft_width.draft_input_width(config) == A * T
    del config.num_aux_hidden_states  # falls back to the nested ids (4), as SGLang 0.5.15+ does
    assert draft_width.draft_input_width(config) == 4 * T
    assert draft_width.draft_input_width(draft_hf_config(use_aux=False)) is None


class TargetRunner:
    """0.5.11 - 0.5.15's ModelRunner: reads the drafter's capture ids in ``__init__`` through whatever
    config loader is in force then (here: the raw config, as before a late activation) and
    applies them in ``init_aux_hidden_state_capture``."""

    def __init__(self, drafter_path, target_config, is_draft_worker=False):
        self.server_args = SimpleNamespace(speculative_draft_model_path=drafter_path)
        self.model_config = SimpleNamespace(hf_config=target_config)
        self.is_draft_worker = is_draft_worker
        self.eagle_use_aux_hidden_state = True
        raw = {}
        if os.path.isdir(drafter_path):
            with open(os.path.join(drafter_path, "config.json")) as handle:
                raw = json.load(handle)
        self.eagle_aux_hidden_state_layer_ids = (raw.get("eagle_config") or {}).get(
            "eagle_aux_hidden_state_layer_ids")
        self.applied = "not yet"

    def init_aux_hidden_state_capture(self):
        self.applied = self.eagle_aux_hidden_state_layer_ids


class TargetRunnerWithAuxConfig(TargetRunner):
    """0.5.16+: the ids live in ``spec_aux_config`` and ``init_attention_backends`` applies them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.spec_aux_config = SimpleNamespace(
            eagle_use_aux_hidden_state=True, eagle_aux_hidden_state_layer_ids=self.eagle_aux_hidden_state_layer_ids)
        del self.eagle_use_aux_hidden_state, self.eagle_aux_hidden_state_layer_ids

    def init_attention_backends(self):
        self.applied = self.spec_aux_config.eagle_aux_hidden_state_layer_ids


@pytest.mark.parametrize("runner_cls, method", [(TargetRunner, "init_aux_hidden_state_capture"),
                                                (TargetRunnerWithAuxConfig, "init_attention_backends")])
def test_target_capture_ids_come_from_the_normalised_config(tmp_path, runner_cls, method):
    # 4 aux states at top-level hidden-state indices 2, 5, 9, 11 (speculators): the raw config
    # has no eagle_config, so a runner that read it before activation would capture the default
    # 3 taps; the patch applies the drafter's own ids in SGLang's convention
    drafter = fixtures.build("F8-speculators-4-aux", str(tmp_path / "d"))
    target = LlamaConfig(**fixtures.target_config())

    def applied(*args, **kwargs):
        runner = runner_cls(*args, **kwargs)
        getattr(runner, method)()
        return runner.applied

    assert applied(drafter, target) is None
    holder = "spec_aux_config" if method == "init_attention_backends" else ""
    assert config_loading.patch_target_capture_ids(runner_cls, method, holder)
    assert not config_loading.patch_target_capture_ids(runner_cls, method, holder)  # once only
    assert applied(drafter, target) == [1, 4, 8, 10]
    # the draft worker's runner and a hub id are left to SGLang
    assert applied(drafter, target, is_draft_worker=True) is None
    assert applied("org/some-eagle3-drafter", target) is None


@pytest.mark.parametrize("release, method", [("0.5.11", "init_aux_hidden_state_capture"),
                                             ("0.5.13", "init_aux_hidden_state_capture"),
                                             ("0.5.15.post1", "init_aux_hidden_state_capture"),
                                             ("0.5.16", "init_attention_backends"),
                                             ("0.5.23", "init_attention_backends")])
def test_each_release_applies_the_capture_ids_where_its_runner_does(release, method):
    # (read from each release's model_runner.py) up to 0.5.15 init_aux_hidden_state_capture
    # applies self.eagle_aux_hidden_state_layer_ids; from 0.5.16 init_attention_backends applies
    # spec_aux_config's
    (patch,) = [p for p in config_loading.CAPTURE_IDS_PATCHES if p.needed(Version(release))]
    runner_module = SimpleNamespace(ModelRunner=type("ModelRunner", (), {}))
    with pytest.raises(UnsupportedRelease, match=f"ModelRunner.{method}"):
        patch.apply(runner_module)


# Tokens whose text holds a stop string, part of one, or both (". The", "iver.").
STOP_VOCAB = ["a", "b", " ", ".", " river", " ri", "ver", "x.", ". The", "r", "iver.", " the"]
STOPS = [" river", "."]


def decode(ids) -> str:
    return "".join(STOP_VOCAB[i] for i in ids)


def stop_reference(tokens) -> tuple[int, str] | None:
    """Decoding one token at a time: the first output length whose text holds a stop string, and
    the text cut before the stop string that ends first (then starts first)."""
    for length in range(1, len(tokens) + 1):
        text = decode(tokens[:length])
        found = [(text.find(stop) + len(stop), text.find(stop)) for stop in STOPS if stop in text]
        if found:
            return length, text[:min(found)[1]]
    return None


def serve_steps(req_cls, tokens, steps) -> tuple[int, str] | None:
    """SGLang's own Req check after each verify step, then its detokenizer's trim of the text."""
    from sglang.srt.managers.detokenizer_manager import DetokenizerManager

    req = object.__new__(req_cls)
    req.sampling_params = SimpleNamespace(stop_strs=STOPS, stop_regex_strs=[], stop_regex_max_len=0,
                                          stop_str_max_len=max(map(len, STOPS)))  # >= each one's token count
    req.tokenizer = SimpleNamespace(decode=decode)
    req.output_ids, req.decoded_text, req.finished_reason, req.finished_len = [], "", None, None
    for accepted in steps:
        req.output_ids.extend(tokens[len(req.output_ids):len(req.output_ids) + accepted])
        if req._check_str_based_finish(accepted):
            length = len(req.output_ids) if req.finished_len is None else req.finished_len
            text = DetokenizerManager.trim_matched_stop(None, decode(req.output_ids[:length]),
                                                        {"matched": req.finished_reason.matched}, False)
            return length, text
    return None


def test_a_verify_step_ends_at_the_stop_string_reached_first():
    """Against decoding one token at a time: stock SGLang's check, given steps of several accepted
    tokens, ends some outputs at the stop string listed first and keeps an earlier one; patched,
    every output ends where one-token decoding ends it."""
    from sglang.srt.managers import schedule_batch

    class PatchedReq(schedule_batch.Req):  # the patch changes this subclass, not SGLang's class
        pass

    assert stop_strings.patch_first_stop_string(PatchedReq, schedule_batch.FINISH_MATCHED_STR)
    generator = random.Random(20261125)
    stock_wrong = 0
    for _ in range(400):
        tokens = [generator.randrange(len(STOP_VOCAB)) for _ in range(12)]
        steps = [generator.randint(1, 5) for _ in tokens]
        expected = stop_reference(tokens)
        assert serve_steps(PatchedReq, tokens, steps) == expected, (tokens, steps)
        assert serve_steps(PatchedReq, tokens, [1] * len(tokens)) == expected, tokens
        stock_wrong += serve_steps(schedule_batch.Req, tokens, steps) != expected
    assert stock_wrong > 0  # the bug the patch exists for is still in the installed SGLang


def test_a_method_is_wrapped_once_per_patch_and_two_patches_of_it_both_hold():
    """wrap_method once skipped any second wrapper of a method already wrapped, so a second patch of the same
    method would have been dropped without a word. One patch applied twice changes nothing; two patches stack."""
    import functools

    from sglang_eagle_ext.sglang.compat.patch import wrap_method

    class Owner:
        def method(self, x):
            return [x]

        @classmethod
        def build(cls, x):
            return [cls.__name__, x]

    def tagging(original, tag):
        def method(self, x):
            return original(self, x) + [tag]
        return method

    def doubling(original):
        def method(self, x):
            return original(self, x) * 2
        return method

    assert wrap_method(Owner, "method", functools.partial(tagging, tag="a"))
    assert not wrap_method(Owner, "method", functools.partial(tagging, tag="b"))  # the same patch: once
    assert Owner().method(1) == [1, "a"]
    assert wrap_method(Owner, "method", doubling)  # another patch wraps the wrapped method
    assert Owner().method(1) == [1, "a", 1, "a"]
    assert not wrap_method(Owner, "method", doubling)

    class Later(Owner):
        pass

    def suffixing(original):
        def build(cls, x):
            return original(cls, x) + ["built"]
        return build

    assert wrap_method(Later, "build", suffixing)  # an inherited classmethod stays bound to the class it is read on
    assert Later.build(2) == ["Later", 2, "built"] and Owner.build(2) == ["Owner", 2]
