"""benchmarks/real_target/vllm_bench.py on a CPU: its arms, engine keywords and cells, and one measured arm
end to end (child process, pipe, cells, acceptance, agreement) against a stand-in ``vllm`` module that
answers with the fields vLLM 0.33's objects carry (RequestOutput.outputs[0].token_ids / .logprobs,
.metrics.first_token_latency, LLM.get_metrics() counters and the per-position vector)."""

import fcntl
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from tests.script_module import ROOT

BENCH_DIR = ROOT / "benchmarks" / "real_target"
HELD_S = 1.0  # how long another benchmark holds the measuring turn as this one's first arm asks to start

# A stand-in for vllm: greedy outputs depend on the prompt only (so speculative arms agree with plain
# decoding), each request counts 10 drafts with k/2 accepted tokens each (acceptance length 1 + k/2).
FAKE_VLLM = textwrap.dedent('''
    import time
    import types

    class SamplingParams:
        def __init__(self, temperature=1.0, top_p=1.0, max_tokens=16, ignore_eos=False, logprobs=None,
                     detokenize=True):
            self.temperature, self.max_tokens, self.logprobs = temperature, max_tokens, logprobs
            self.detokenize = detokenize

    class _Metric:
        def __init__(self, name, value=None, values=None):
            self.name, self.value, self.values, self.labels = name, value, values, {}

    class LLM:
        def __init__(self, model, speculative_config=None, disable_log_stats=True, skip_tokenizer_init=False,
                     **kwargs):
            assert disable_log_stats is False, "get_metrics needs stats"
            self.tokenless = skip_tokenizer_init
            if model == "BROKEN":
                raise ValueError("cannot read this drafter")
            self.fails_later = model == "FAILS_LATER"
            self.k = speculative_config["num_speculative_tokens"] if speculative_config else 0
            self.counts = [0, 0, 0, [0] * self.k]
            spec = None
            if speculative_config:
                hf = types.SimpleNamespace(architectures=["Eagle3LlamaForCausalLM"],
                                           eagle_aux_hidden_state_layer_ids=[1, 14, 27])
                spec = types.SimpleNamespace(method="eagle3", num_speculative_tokens=self.k,
                                             draft_model_config=types.SimpleNamespace(hf_config=hf))
            self.llm_engine = types.SimpleNamespace(
                vllm_config=types.SimpleNamespace(speculative_config=spec),
                engine_core=types.SimpleNamespace(shutdown=lambda: None))

        def generate(self, prompts, params, use_tqdm=True):
            time.sleep(0.003)  # a call's wall time: the time to first token of a one-token wave
            if self.tokenless and params.detokenize:
                raise ValueError("an engine without a tokenizer cannot detokenize")
            if self.fails_later and params.max_tokens > 8:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            outputs = []
            for prompt in prompts:
                ids = prompt["prompt_token_ids"]
                tokens = [(sum(ids) + 7 * i) % 97 for i in range(params.max_tokens)]
                if params.temperature > 0:
                    tokens = tokens[::-1]
                logprobs = None
                if params.logprobs:
                    logprobs = [{t: types.SimpleNamespace(logprob=-0.1), t + 1: types.SimpleNamespace(logprob=-3.0)}
                                for t in tokens]
                if self.k:
                    accepted = self.k // 2
                    self.counts[0] += 10
                    self.counts[1] += 10 * self.k
                    self.counts[2] += 10 * accepted
                    self.counts[3] = [c + (10 if p < accepted else 0) for p, c in enumerate(self.counts[3])]
                completion = types.SimpleNamespace(token_ids=tokens, logprobs=logprobs)
                outputs.append(types.SimpleNamespace(outputs=[completion],
                                                     metrics=types.SimpleNamespace(first_token_latency=0.002)))
            return outputs

        def get_metrics(self):
            if not self.k:
                return [_Metric("vllm:num_requests_running", value=0)]
            return [_Metric("vllm:spec_decode_num_drafts", value=self.counts[0]),
                    _Metric("vllm:spec_decode_num_draft_tokens", value=self.counts[1]),
                    _Metric("vllm:spec_decode_num_accepted_tokens", value=self.counts[2]),
                    _Metric("vllm:spec_decode_num_accepted_tokens_per_pos", values=list(self.counts[3]))]
''')

DRIVER = textwrap.dedent('''
    import json, sys, types
    sys.path.insert(0, sys.argv[1])
    import vllm_bench

    if __name__ == "__main__":  # the engine's child process is spawned: it imports this file again
        ids = [[1, 2, 3, i] for i in range(80)]
        args = types.SimpleNamespace(target="T", batches=(1, 16), context_length=512, attention_backend=None,
                                     memory=0.5, compilation=None, out=sys.argv[2], single=3, rounds=2, new_tokens=12,
                                     tokenizer=None, turns=sys.argv[3], kv_cache_bytes=None)
        open(sys.argv[2] + "/asking", "w").close()  # the test's cue: the first arm asks for its turn now
        plain = vllm_bench.measure_arm("plain", args, ids, {}, None)
        spec = vllm_bench.measure_arm("d/k4/vllm", args, ids, {"d": "D"}, plain)
        args.tokenizer = "TOKENIZER"  # the prompts' ids from another model's tokenizer: the engine has none
        tokenless = vllm_bench.measure_arm("d/k4/vllm", args, ids, {"d": "D"}, plain)
        args.tokenizer = None
        args.target = "BROKEN"
        broken = vllm_bench.measure_arm("d/k1/vllm", args, ids, {"d": "D"}, plain)
        args.target = "FAILS_LATER"
        later = vllm_bench.measure_arm("d/k2/vllm", args, ids, {"d": "D"}, plain)
        print(json.dumps({"plain": plain, "spec": spec, "broken": broken, "later": later, "tokenless": tokenless}))
''')


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH_DIR))
    try:
        import vllm_bench

        yield vllm_bench
    finally:
        sys.path.remove(str(BENCH_DIR))


def test_arms_and_names(bench):
    names = bench.arm_names(["speculators", "specforge"], [1, 3])
    assert names == ["plain", "speculators/k1/vllm", "speculators/k3/vllm", "specforge/k1/vllm", "specforge/k3/vllm"]
    assert [bench.parse_arm(n) for n in names] == [(None, None), ("speculators", 1), ("speculators", 3),
                                                   ("specforge", 1), ("specforge", 3)]
    for bad in ("d/3/vllm", "d/k0/vllm", "d/k2/plugin"):
        with pytest.raises(ValueError):
            bench.parse_arm(bad)
    assert bench.shape_label(3) == "chain 3/1/4"


def test_engine_kwargs(bench):
    plain = bench.engine_kwargs("T", None, None, (1, 16, 64), 2048)
    assert "speculative_config" not in plain and plain["disable_log_stats"] is False
    assert plain["max_num_seqs"] == 64 and plain["enable_prefix_caching"] is False and plain["dtype"] == "bfloat16"
    spec = bench.engine_kwargs("T", "D", 3, (1, 16, 64), 2048, attention_backend="TRITON_ATTN")
    assert spec["speculative_config"] == {"method": "eagle3", "model": "D", "num_speculative_tokens": 3}
    assert spec["attention_config"] == {"backend": "TRITON_ATTN"}
    assert bench.sampling_kwargs("sampled", 128) == {"temperature": 0.7, "top_p": 0.9, "max_tokens": 128,
                                                     "ignore_eos": True}
    assert bench.sampling_kwargs("greedy", 8, top2=True)["logprobs"] == 2
    # a target without a tokenizer (zipf_checkpoint.py's): ids in, ids out, nothing to detokenize with
    assert "skip_tokenizer_init" not in spec and "detokenize" not in bench.sampling_kwargs("greedy", 8)
    assert bench.engine_kwargs("T", None, None, (1,), 2048, skip_tokenizer=True)["skip_tokenizer_init"] is True
    assert bench.sampling_kwargs("greedy", 8, detokenize=False)["detokenize"] is False


def test_cells_are_serve_bench_cells(bench):
    assert bench.plan(80, (1, 16, 64), 8) == {1: [1] * 8, 16: [16, 16], 64: [64]}


def test_counters(bench):
    class Metric:
        def __init__(self, name, value=None, values=None):
            self.name, self.value, self.values = name, value, values

    before = bench.spec_counts([Metric("vllm:spec_decode_num_drafts", 5),
                                Metric("vllm:spec_decode_num_accepted_tokens_per_pos", values=[4, 1])])
    after = bench.spec_counts([Metric("vllm:spec_decode_num_drafts", 9), Metric("vllm:spec_decode_num_drafts", 1),
                               Metric("vllm:spec_decode_num_accepted_tokens", 7),
                               Metric("vllm:spec_decode_num_accepted_tokens_per_pos", values=[6, 3, 1])])
    assert bench.counts_delta(after, before) == {"drafts": 5, "draft_tokens": 0, "accepted": 7,
                                                 "per_position": [2, 2, 1]}


def test_dry_run(bench, capsys):
    assert bench.main(["/tmp/unused", "--target", "T", "--prompts", "/nonexistent.jsonl", "--drafter", "d=D",
                       "--chains", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert '"num_speculative_tokens": 2' in out and out.count("d/k2/vllm") == 1


def test_measured_arm_with_a_stand_in_vllm(tmp_path):
    (tmp_path / "fake" / "vllm").mkdir(parents=True)
    (tmp_path / "fake" / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    (tmp_path / "driver.py").write_text(DRIVER)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "fake"))
    # another engine's benchmark measures (holds the turn exclusively) as this one begins: its first start waits
    lock = tmp_path / "turns.lock"
    with open(lock, "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        driver = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), str(BENCH_DIR), str(tmp_path),
                                   str(lock)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                  cwd=ROOT)
        deadline = time.monotonic() + 120
        while not (tmp_path / "asking").exists() and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.05)
        time.sleep(HELD_S)
        fcntl.flock(other, fcntl.LOCK_UN)
    stdout, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 0, stderr[-3000:]
    result = json.loads(stdout.strip().splitlines()[-1])
    plain, spec = result["plain"], result["spec"]
    assert "failed" not in plain and "failed" not in spec, (plain.get("failed"), spec.get("failed"))
    # --turns given: each arm says how long it waited for its start and its measurement; the first start waited for
    # the other benchmark's measurement, the later ones for nothing
    assert all(set(arm["turn_waits_s"]) == {"start", "measure"} for arm in (plain, spec))
    assert HELD_S - 0.2 < plain["turn_waits_s"]["start"] < HELD_S + 5 and spec["turn_waits_s"]["start"] < 0.5
    assert set(plain["cells"]) == {"batch1/greedy", "batch1/sampled", "batch16/greedy", "batch16/sampled"}
    assert len(plain["cells"]["batch16/greedy"]["outputs"]) == 32  # two waves of 16, as serve_bench sends
    assert plain["cells"]["batch1/greedy"]["top2"][0][0] == [-0.1, -3.0]
    assert plain["cells"]["batch16/greedy"]["plain_batched_vs_single"]["exact"] == 3
    cell = spec["cells"]["batch1/greedy"]
    assert spec["shape"] == "chain 4/1/5" and spec["speculative"]["num_speculative_tokens"] == 4
    assert cell["accept_length"] == 3.0 and cell["accept_rate_per_position"] == [1.0, 1.0, 0.0, 0.0]
    assert cell["spec"]["drafts"] == 2 * 3 * 10  # two rounds of three one-request waves
    assert cell["vs_plain"] == {"requests": 3, "exact": 3, "near_tie": 0, "mismatch": []}
    assert cell["engine_ttft_ms_median"] == 2.0 and len(cell["tok_s"]) == 2 and "speedup_median" in cell
    # time to first token as serve_bench measures it: each wave alone with one new token, once per round
    assert len(cell["ttft_ms"]) == 2 * 3 and len(spec["cells"]["batch16/greedy"]["ttft_ms"]) == 2 * 2
    assert all(ms >= 3 for ms in cell["ttft_ms"]) and "ttft_ms" not in spec["cells"]["batch1/sampled"]
    assert "accept_length" not in plain["cells"]["batch1/greedy"]
    assert result["broken"]["failed"] == "ValueError: cannot read this drafter"
    tokenless = result["tokenless"]
    assert "failed" not in tokenless and tokenless["engine_kwargs"]["skip_tokenizer_init"] is True
    assert tokenless["cells"]["batch1/greedy"]["vs_plain"]["exact"] == 3
    assert result["later"]["failed"].startswith("during the cells: RuntimeError: CUDA error")
    # the arm's log says where its start went: building the engine, then the warm-up
    assert re.search(r"^start: engine built in \d+\.\d s, warm-up \d+\.\d s$",
                     (tmp_path / "vllm_plain.log").read_text(), re.M)


def test_arms_that_would_end_past_the_deadline_are_not_started(bench, tmp_path, monkeypatch):
    """The arm loop asks the clock before each arm: with every arm timed at 100 s and 150 s left, plain
    decoding and the first drafter arm run, the second is noted under ``not_run`` and not started."""
    now = [1000.0]
    monkeypatch.setattr(bench.time, "time", lambda: now[0])
    measured = []

    def measure(name, *_):
        measured.append(name)
        now[0] += 100.0
        return {"arm": name, "cells": {}}

    monkeypatch.setattr(bench, "measure_arm", measure)
    monkeypatch.setattr(bench.serve_bench, "prompt_ids", lambda args: [[1, 2]])
    monkeypatch.setattr(bench, "environment", lambda: {"engine": "vllm"})  # no vLLM here to report its version
    ticks = iter(range(0, 10_000, 100))  # perf_counter: each arm 100 s
    monkeypatch.setattr(bench.time, "perf_counter", lambda: float(next(ticks)))
    assert bench.main([str(tmp_path), "--target", "T", "--prompts", "p.jsonl", "--drafter", "d=D",
                       "--arms", "plain,d/k1/vllm,d/k3/vllm", "--deadline", "1250", "--arm-seconds", "90"]) == 0
    results = json.loads((tmp_path / "vllm_bench.json").read_text())
    assert measured == ["plain", "d/k1/vllm"] and list(results["arms"]) == ["plain", "d/k1/vllm"]
    assert results["not_run"] == {"d/k3/vllm": "not started: 50 s were left before --deadline and the longest "
                                                "arm so far took 100 s"}
    # a call whose plain decoding the deadline refuses notes every arm, not plain's alone
    measured.clear()
    assert bench.main([str(tmp_path / "late"), "--target", "T", "--prompts", "p.jsonl", "--drafter", "d=D",
                       "--arms", "plain,d/k1/vllm", "--deadline", "1000"]) == 0
    assert measured == [] and set(json.loads((tmp_path / "late" / "vllm_bench.json").read_text())["not_run"]) == {
        "plain", "d/k1/vllm"}


def test_an_engine_gone_mid_cells_keeps_the_cells_begun(bench, monkeypatch):
    """measure_cells fills the arm's cells as answers come: a host that answers batch 1's four rounds (two per
    mode) and its time-to-first-token requests, then batch 16's first greedy round and ends, leaves batch 1's
    cells whole and batch 16's greedy begun when EngineGone reaches the arm, which records why and which cells
    had begun."""
    serve_bench = bench.serve_bench
    answer = {"seconds": 0.5, "tokens": 64, "output_ids": [[5, 6]], "engine_ttft_s": [0.01],
              "spec": bench.zero_counts()}

    class Dying:
        def __init__(self, answers: int):
            self.left, self.sent = answers, []

        def send(self, message):
            self.sent.append(message)

        def recv(self):
            if not self.left:
                raise serve_bench.EngineGone("engine process exited (1)")
            self.left -= 1
            return answer

    args = SimpleNamespace(batches=(1, 16), single=2, rounds=2, new_tokens=8)
    ids = [[1, 2], [3, 4], [5, 6]]
    batch1 = 2 * 2 + 2 * 2  # rounds x modes (each message all waves), then one token per wave per round
    cells, link = {}, Dying(batch1 + 1)
    with pytest.raises(serve_bench.EngineGone):
        bench.measure_cells(link, cells, args, ids, "d/k1/vllm")
    assert sorted(cells) == ["batch1/greedy", "batch1/sampled", "batch16/greedy"]
    assert cells["batch1/greedy"]["tok_s"] == [128.0, 128.0] and len(cells["batch1/greedy"]["ttft_ms"]) == 4
    assert cells["batch16/greedy"]["tok_s"] == [128.0] and len(link.sent) == batch1 + 2
    ended = []
    monkeypatch.setattr(serve_bench, "end_group", lambda process, grace=30: ended.append((process, grace)))
    record = serve_bench.stopped({"arm": "d/k1/vllm"}, cells, serve_bench.EngineGone("engine process exited (1)"),
                                 "the host")
    assert ended == [("the host", 0)]
    assert record == {"arm": "d/k1/vllm", "failed": "during the cells: engine process exited (1)",
                      "cells_before_failure": ["batch1/greedy", "batch1/sampled", "batch16/greedy"]}
