"""The demo's SGLang processes get the plugin switch (``SGLANG_EAGLE_EXT``): as the user set it,
or forced on or off by the caller (the stock-vs-plugin comparison). The engine's own processes
inherit the environment of the child the demo starts, which is what is checked here: the child's
environment and arguments as handed to ``subprocess.run``."""

import json
import os
import subprocess

import pytest

from sglang_eagle_ext.demo import run

OUTPUT = {"text": "x", "output_ids": [5, 6], "completion_tokens": 2, "spec_verify_ct": 1}


@pytest.fixture
def started(monkeypatch):
    """Records each child the demo starts and answers as a finished engine would."""
    calls = []

    def fake_run(argv, **kwargs):
        calls.append({"argv": argv, "env": kwargs["env"]})
        result = json.dumps({"options": {}, "outputs": [OUTPUT]})
        return subprocess.CompletedProcess(argv, 0, stdout=f"RESULT {result}\n",
                                           stderr="sglang-eagle-ext: drafts served by stock\n")

    monkeypatch.setattr(run.subprocess, "run", fake_run)
    return calls


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("user_value", ["0", "off", "1", None])
def test_users_switch_reaches_the_server(started, monkeypatch, device, user_value):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the test session's own (conftest)
    if user_value is None:
        monkeypatch.delenv("SGLANG_EAGLE_EXT", raising=False)
    else:
        monkeypatch.setenv("SGLANG_EAGLE_EXT", user_value)
    served = run.serve_greedy("target", "drafter", device, num_steps=3, new_tokens=2)
    env = started[0]["env"]
    assert env.get("SGLANG_EAGLE_EXT") == user_value
    assert (env.get("TRITON_INTERPRET") == "1") == (device == "cpu")
    assert served.outputs == [OUTPUT] and served.accept_length == 2.0


@pytest.mark.parametrize("plugin, expected", [(False, "0"), (True, "1")])
def test_caller_forces_the_switch_over_the_users(started, monkeypatch, plugin, expected):
    monkeypatch.setenv("SGLANG_EAGLE_EXT", "1" if expected == "0" else "0")
    run.serve_greedy("target", "drafter", "cpu", num_steps=3, new_tokens=2, plugin=plugin)
    assert started[0]["env"]["SGLANG_EAGLE_EXT"] == expected


def test_tree_drafting_reaches_the_engine_child(started):
    run.serve_greedy("target", "drafter", "cpu", num_steps=3, new_tokens=2, topk=4, draft_tokens=8)
    run.serve_greedy("target", "drafter", "cpu", num_steps=3, new_tokens=2, prompts=["one", "two", "three"],
                     ignore_eos=False, adaptive="cycle")
    assert started[0]["argv"][-5:] == ["4", "8", json.dumps(run.PROMPTS), "1", "0"]
    # without adaptive the user's own setting of the switch (if any) reaches the engine untouched
    assert started[0]["env"].get("SGLANG_EAGLE_EXT_ADAPTIVE") == os.environ.get("SGLANG_EAGLE_EXT_ADAPTIVE")
    # a chain verifies its 3 drafts and one more token; the prompts given are the ones served, and an
    # answer may end at the end token (a real target's demo); adaptive depths: SGLang's flag and our switch
    assert started[1]["argv"][-5:] == ["1", "4", '["one", "two", "three"]', "0", "1"]
    assert started[1]["env"]["SGLANG_EAGLE_EXT_ADAPTIVE"] == "cycle"


def test_switches_given_reach_that_child_alone(started, monkeypatch):
    """Runs served side by side each get their own switches, over the caller's environment, which they leave as it
    was."""
    monkeypatch.setenv("SGLANG_EAGLE_EXT_ADAPTIVE_OFF_TOKENS", "3")
    run.serve_greedy("target", "drafter", "cpu", num_steps=3, new_tokens=2,
                     switches={"SGLANG_EAGLE_EXT_ADAPTIVE_OFF_TOKENS": "2", "SGLANG_EAGLE_EXT_DEFERRED_EXTEND": "4"})
    run.serve_greedy("target", "drafter", "cpu", num_steps=3, new_tokens=2)
    assert started[0]["env"]["SGLANG_EAGLE_EXT_ADAPTIVE_OFF_TOKENS"] == "2"
    assert started[0]["env"]["SGLANG_EAGLE_EXT_DEFERRED_EXTEND"] == "4"
    assert started[1]["env"]["SGLANG_EAGLE_EXT_ADAPTIVE_OFF_TOKENS"] == "3"
    assert "SGLANG_EAGLE_EXT_DEFERRED_EXTEND" not in started[1]["env"]
    assert "SGLANG_EAGLE_EXT_DEFERRED_EXTEND" not in os.environ
