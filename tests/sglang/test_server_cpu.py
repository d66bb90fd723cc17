"""Stock SGLang serving EAGLE3 through the plugin on the CPU.

The engine's greedy output must equal plain greedy decoding of the target (HF transformers,
fp32, the same weights): speculative decoding is lossless whatever the drafter proposes. The
acceptance counters must show that drafting actually ran.

The offline engine's tests read three runs served side by side: a 2-layer, 4-aux speculators drafter at
chain 3, and the session's distilled drafter with every depth in turn, its off steps making one plain token a
request or two. The others share one ``sglang-eagle serve`` HTTP server with tree drafting (the session's
target and distilled drafter, top-k 2, 2 steps): greedy, sampled requests as a user's ``openai`` client sends them, and
malformed or hostile requests, each of which must get a 4xx and leave the server serving, and
last a short soak (``benchmarks/soak.py``) of every request kind from concurrent clients.
"""

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from tests.conftest import GREEDY_TOKENS
from tests.http_server import post, post_raw, serving
from tests.script_module import ROOT

from sglang_eagle_ext.demo.run import PROMPTS, DemoFailure, serve_greedy
from sglang_eagle_ext.sglang.shape_policy import DEFAULT_STEPS
from tests.kit.matched_drafter import build_matched_drafter


@pytest.fixture(scope="module")
def models(shared_target, tmp_path_factory):
    drafter = build_matched_drafter(str(tmp_path_factory.mktemp("server") / "drafter"), shared_target, layers=2,
                                    num_aux=4, fc_norm=True, dialect="speculators", seed=3)
    return shared_target, drafter


@pytest.fixture(scope="module")
def engine_runs(models, shared_target, shared_drafter):
    """The offline engine's greedy runs of the demo's prompts at chain 3, served side by side (a CPU engine's
    scheduler holds about one core: on CI's 2 cores, one after another, they took 49, 57 and 54 s): ``chain``, the
    speculators drafter of :func:`models`; ``cycle``, the demo's drafter with every depth in turn (this package's
    policy in its test mode); ``cycle-off-2-tokens``, that with every off step making 2 plain tokens a request and
    the drafter's extend deferred at 4. {name: its ``ServedRun``, or the ``DemoFailure`` it stopped with}."""
    from sglang_eagle_ext.sglang.compat import deferred_extend, plain_off

    runs = {"chain": (*models, {}),
            "cycle": (shared_target, shared_drafter, {"adaptive": "cycle"}),
            "cycle-off-2-tokens": (shared_target, shared_drafter, {"adaptive": "cycle", "switches": {
                plain_off.TOKENS_SWITCH: "2", deferred_extend.ENV_SWITCH: "4"}})}

    def serve(run):
        target, drafter, options = run
        try:
            return serve_greedy(target, drafter, "cpu", num_steps=3, new_tokens=GREEDY_TOKENS, timeout=420, **options)
        except DemoFailure as failure:
            return failure

    with ThreadPoolExecutor(len(runs)) as pool:
        return dict(zip(runs, pool.map(serve, runs.values())))


def engine_run(engine_runs, name: str):
    """:func:`engine_runs`' run ``name``, its failure raised in the test that reads it."""
    run = engine_runs[name]
    if isinstance(run, DemoFailure):
        raise run
    return run


def test_eagle3_greedy_equals_plain_greedy(engine_runs, shared_greedy_reference):
    served = engine_run(engine_runs, "chain")
    assert served.activation and all("sglang_eagle_ext.sglang.model.LlamaForCausalLMEagle3" in line
                                     for line in served.activation if "drafts served" in line)
    assert [o["output_ids"] for o in served.outputs] == shared_greedy_reference
    for output in served.outputs:
        assert output["completion_tokens"] == GREEDY_TOKENS
        assert 0 < output["spec_verify_ct"] <= GREEDY_TOKENS


@pytest.fixture(scope="module")
def tree_server(shared_target, shared_drafter, tmp_path_factory):
    """``sglang-eagle serve`` with tree drafting (top-k 2, 2 steps: 5 verify rows per request):
    yields ``(port, log path)``."""
    log_path = tmp_path_factory.mktemp("tree-server") / "server.log"
    # bounded JSON whitespace: the soak's constrained outputs must end within their max_tokens
    with serving(["--target", shared_target, "--draft", shared_drafter, "--topk", "2", "--num-steps", "2"],
                 log_path, sglang_args=("--constrained-json-disable-any-whitespace",)) as (port, _):
        yield port, log_path


def greedy_outputs(port: int) -> list[dict]:
    return post(port, "/generate", {"text": PROMPTS, "sampling_params": {
        "temperature": 0, "max_new_tokens": GREEDY_TOKENS, "ignore_eos": True}})


def test_tree_drafting_greedy_equals_plain_greedy(tree_server, shared_greedy_reference):
    port, _ = tree_server
    replies = greedy_outputs(port)
    assert [reply["output_ids"] for reply in replies] == shared_greedy_reference
    assert all(reply["meta_info"]["spec_verify_ct"] < GREEDY_TOKENS for reply in replies)  # drafts accepted


# (OpenAI parameters, SGLang's extra ones): what issue 25's user sent
SAMPLED_REQUESTS = {"T0.8": ({"temperature": 0.8}, {}),
                    "T0.8 top-p 0.9": ({"temperature": 0.8, "top_p": 0.9}, {}),
                    "T0.8 top-k 20": ({"temperature": 0.8}, {"top_k": 20})}
SAMPLED_TOKENS = 8


def test_sampled_requests_are_served(tree_server, shared_greedy_reference):
    """The three are sent at once, so that SGLang verifies them in one batch."""
    port, log_path = tree_server
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=300)

    def complete(name):
        openai_params, sglang_params = SAMPLED_REQUESTS[name]
        return client.completions.create(model="target", prompt=PROMPTS[0], max_tokens=SAMPLED_TOKENS,
                                         extra_body={"ignore_eos": True, **sglang_params}, **openai_params)

    with ThreadPoolExecutor(len(SAMPLED_REQUESTS)) as pool:
        completions = dict(zip(SAMPLED_REQUESTS, pool.map(complete, SAMPLED_REQUESTS)))
    for name, completion in completions.items():
        assert completion.choices[0].finish_reason == "length", name
        assert completion.usage.completion_tokens == SAMPLED_TOKENS, name
    # SGLang's sampled verify ran on our plain-torch ops (it has none on this host) ...
    assert "sampled EAGLE verify on this host by sglang_eagle_ext.sglang.compat.cpu_sampling" in log_path.read_text()
    # ... and the server still serves greedy requests losslessly
    assert [reply["output_ids"] for reply in greedy_outputs(port)] == shared_greedy_reference


OVERSIZED_PROMPT = " ".join(["river"] * 1100)  # longer than the target's 1024-token context


def completion_body(**fields) -> bytes:
    return json.dumps({"model": "target", "prompt": PROMPTS[0], "max_tokens": 4, **fields}).encode()


# name: (path, body, what the 4xx answer must say)
BAD_REQUESTS = {
    "oversized prompt": ("/v1/completions", completion_body(prompt=OVERSIZED_PROMPT),
                         "longer than the model's context length"),
    "oversized prompt, native": ("/generate", json.dumps({"text": OVERSIZED_PROMPT}).encode(),
                                 "longer than the model's context length"),
    "temperature -1": ("/v1/completions", completion_body(temperature=-1), "temperature must be"),
    "top_p 2": ("/v1/completions", completion_body(top_p=2), "top_p must be in (0, 1]"),
    "top_k -5": ("/v1/completions", completion_body(top_k=-5), "top_k must be -1"),
    "max_tokens -1": ("/v1/completions", completion_body(max_tokens=-1), "max_tokens must be positive"),
    "malformed JSON": ("/v1/completions", b'{"model": "target", "prompt": "hi", ', "JSON decode error"),
    "malformed JSON, native": ("/generate", b'{"text": "hi",,}', "JSON decode error"),
    # stock SGLang lets these reach the target's embedding, which kills the scheduler
    "token id above the vocabulary": ("/v1/completions", completion_body(prompt=[5, 99999]),
                                      "input_ids[1] = 99999 is not a token of this model"),
    "negative token id, native": ("/generate", json.dumps({"input_ids": [-3, 5]}).encode(),
                                  "input_ids[0] = -3 is not a token of this model"),
}


def test_bad_requests_get_a_4xx_and_the_server_keeps_serving(tree_server, shared_greedy_reference):
    port, _ = tree_server
    answers = {name: post_raw(port, path, body) for name, (path, body, _) in BAD_REQUESTS.items()}
    for name, (status, text) in answers.items():
        assert 400 <= status < 500 and BAD_REQUESTS[name][2] in text, (name, status, text[:300])
    assert [reply["output_ids"] for reply in greedy_outputs(port)] == shared_greedy_reference


SOAK_KINDS = {"greedy", "sampled", "stop", "json", "logprobs", "aborted_stream", "malformed"}


def test_short_soak_passes_every_check(tree_server, tmp_path):
    """The soak benchmark's CI version: 4 clients, two requests of each kind, against this server
    after the tests above (its log, hostile requests included, must hold no traceback)."""
    port, log_path = tree_server
    out = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--out", str(out),
                           "--base-url", f"http://127.0.0.1:{port}", "--server-log", str(log_path), "--clients", "4",
                           "--requests-per-kind", "2", "--max-tokens-cap", "12", "--greedy-prompts", "3",
                           "--duration-s", "480", "--request-timeout", "600", "--sample-every", "1",
                           "--progress-every", "60"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["passed"] and result["counts"]["server_restarts"] == 0
    assert result["counts"]["served"] == {kind: 2 for kind in SOAK_KINDS}
    assert result["checks"]["greedy equals sequential"]["rule"] == "exact"
    assert result["counts"]["acceptance_length"] > 1  # drafts were accepted under load


def test_depths_switched_every_step_keep_greedy_equal_to_plain(engine_runs, shared_greedy_reference):
    """SGLang's --speculative-adaptive with this package's policy in its test mode: every depth in turn, one
    per step (no speculation, chain 1, chain 3, chain 5), with the demo's distilled drafter (whose drafts the target
    accepts). Whatever depth a step runs, its verify is SGLang's, and the state carried between steps (the
    drafter's KV, its hidden rows) must survive each switch: the greedy output still equals plain greedy
    decoding, and drafts are still accepted after the switches."""
    served = engine_run(engine_runs, "cycle")
    assert any("adaptive shape: round-robin (test mode) in place of stock's" in line for line in served.activation)
    assert any(f"adaptive shape: round-robin (test mode) over depths {list(DEFAULT_STEPS)}" in line
               for line in served.activation)
    assert [o["output_ids"] for o in served.outputs] == shared_greedy_reference
    # depth 0 was plain decoding (a DECODE forward writing the target's KV where the verify would): the outputs
    # above then also judge the target's KV it wrote and the drafter state the warm extend kept
    assert any("adaptive off: 1 step by plain decoding" in line for line in served.activation)
    # the first token comes from the prefill; a step that accepts no draft makes one token
    steps, tokens = sum(o["spec_verify_ct"] for o in served.outputs), sum(o["completion_tokens"] - 1
                                                                           for o in served.outputs)
    assert all(o["completion_tokens"] == GREEDY_TOKENS for o in served.outputs) and 0 < steps < tokens


def test_off_steps_of_two_plain_tokens_keep_greedy_equal_to_plain(engine_runs, shared_greedy_reference):
    """The same cycle with every off step making 2 plain tokens a request (``SGLANG_EAGLE_EXT_ADAPTIVE_OFF_TOKENS``,
    the drafter's extend deferred at 4): the second token of a step is a DECODE forward at the next position over
    the target's KV the first one wrote, and this target's next token depends on its context, so a wrong position,
    length or slot shows in the greedy output, which must still equal plain greedy decoding; the drafter drafts
    warm after the catch-ups (drafts accepted)."""
    from sglang_eagle_ext.sglang.compat import plain_off

    served = engine_run(engine_runs, "cycle-off-2-tokens")
    assert any(f"2 tokens a request a step ({plain_off.TOKENS_SWITCH})" in line for line in served.activation)
    assert not any("off: 1 token a request a step" in line for line in served.activation)  # none held back
    assert [o["output_ids"] for o in served.outputs] == shared_greedy_reference
    assert any("adaptive off: 1 step by plain decoding" in line for line in served.activation)
    assert any("deferred drafter extend: 1 catch-up" in line for line in served.activation)
    steps, tokens = sum(o["spec_verify_ct"] for o in served.outputs), sum(o["completion_tokens"] - 1
                                                                           for o in served.outputs)
    assert all(o["completion_tokens"] == GREEDY_TOKENS for o in served.outputs) and 0 < steps < tokens
