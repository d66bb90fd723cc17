"""Greedy and sampled decoding stay lossless while the drafting shape changes every step (issue 39 point 2 and
stage B), on a CPU server (or a GPU's, below).

SGLang's ``--speculative-adaptive`` with this package's policy in its test mode switches the shape at every
step (no speculation, chain 1/1/2, chain 3/1/4, tree 5/4/8, in turn). One server serves every check: it is
launched at the tree 5/4/8, the set's envelope (``compat/adaptive_trees.py``: the launch at top-k above 1 is the
set's one tree, the config's other steps chains and off), so that both the chains' switches and the tree's top-k
carried across them (the drafter's next top-k computed at the tree's width, sliced for a chain) are judged on the
same outputs. A launch at top-k 1 (chains only, the tree wrappers passed through) is served by
``test_server_cpu``'s cycle test. Each step's verify is SGLang's, but the state carried across
a switch (the drafter's KV, its hidden rows, the drafted tokens, their top-k width) is what could go wrong, and a
wrong draft that is then accepted by mistake biases the output towards the drafter. The check needs a target whose
next-token law is known exactly at every position: ``zipf_target``'s, written as files by
``benchmarks/gpu/zipf_checkpoint.py --smoke``, where the law after token t is ``softmax(logits[t mod 64] / T)``
whatever came before (the logits read off the written weights by HF transformers), with its ``zipf_drafter``,
which drafts that law (so drafts are accepted and every depth does work). The target's own KV cache is not
judged here (its next token does not depend on the context): ``test_server_cpu``'s cycle test does that.
Greedy, the output is the law's argmax chain and each chain step at depth d makes d + 1 tokens (the drafts are
right), a tree step at least 2 (its first draft is the drafter's argmax, which every tree keeps) and at most 6
(the policy's trace counts each step's accepted drafts by shape), which a damaged drafter state would break.
Each sampled token is mapped through the exact conditional law to its rank there (0: the most probable token);
Pearson's chi-square compares the binned ranks with the counts that law expects (a drafter's bias shows as too
many top ranks, a wrong temperature as a shifted spread). The same tokens judged under a neighbouring law
(T 0.9 for 0.7) are rejected, so the test can fail.

Where a GPU is present (``benchmarks/gpu/stage_package.sh`` on the GPU machine) the server is SGLang's GPU
server: the overlap scheduler, CUDA graphs, Triton attention, and depth 0's plain step replaying the target's
plain decode graphs (``compat/off_graphs.py``; until 2026-11-29 ``SGLANG_EAGLE_EXT_ADAPTIVE_OFF=eager``, the plain
step run eagerly under graphs; a CPU host has neither the overlap scheduler nor graphs).
The pair is built on the CPU either way, for a CPU server with ``--fewest-heads`` (2 query heads on 1 KV head, half
the smoke geometry's: Triton's interpreter runs its attention a program per request and head, and the law does not
read the heads); the GPU server runs the smoke geometry at SGLang's default dtype
for a float32 config, float16, whose argmax chains and laws the tests judged as they stand (H100, commit
``cd324a7``, where the pair was still drawn on the GPU and the server launched at chain 3/1/4; the tree's launch
on an H200, commit ``422ad6d``: ``benchmarks/results/gpu_tests/``).
"""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from sglang_eagle_ext.sglang.compat import deferred_extend
from sglang_eagle_ext.sglang.compat.plain_off import PLAIN, TOKENS_SWITCH
from sglang_eagle_ext.sglang.shape_policy import DEFAULT_STEPS
from tests.conftest import needs_sglang
from tests.script_module import ROOT, load_siblings

_, zipf_target = load_siblings("benchmarks/gpu", "verify_workload", "zipf_target")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
GEOMETRY_OPTIONS = {"cpu": ["--fewest-heads"], "cuda": []}  # zipf_checkpoint's, beside --smoke (docstring: why)
OFF_ACTIVATION = "off: plain decoding{}, by the target's own decode graphs where its decode is graphed"

TEMPERATURE = 0.7
# the sampled run's 16 x 24 tokens: as many as the depth-0-only batch's (below), whose 360 the neighbouring law's
# check rejects at p <= 1.1e-9 against this test's 1e-4 (40 a request took 105 s of a CPU server's 200, 2 cores)
PROMPT_TOKENS, GREEDY_REQUESTS, GREEDY_TOKENS, SAMPLED_REQUESTS, SAMPLED_TOKENS = 12, 8, 16, 16, 24
# The law every check of sampled tokens must reject: 360 tokens drawn at T 0.7 (the depth-0-only batch's plain
# ones) scored p <= 1.1e-9 under T 0.9 over 30 seeds, against up to 0.16 under T 0.8, too near for that many
NEIGHBOUR_TEMPERATURE = 0.9
LAW_SEED = 1234  # any law of zipf_target's family, for the check of the check
# at least 6 verify steps when every draft is accepted (23 tokens, at most 1 + 2 + 4 + 6 a turn of 4 steps), so
# each fallback batch meets depth 0
FALLBACK_REQUESTS, FALLBACK_TOKENS = 2, 24
# batches of OFF_REQUESTS (17 or more) run at depth 0 only: the plain sampler's tokens alone (24 x 15 = 360 after
# the prefill's), for the law test
OFF_REQUESTS, OFF_TOKENS = 24, 16
# the set: off, chain 1/1/2, chain 3/1/4 and the launch's tree 5/4/8 (its envelope), switched in turn every step
SET = DEFAULT_STEPS
LAUNCH = {"speculative_num_steps": 5, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}
TREE = tuple(LAUNCH.values())
ADAPTIVE_CONFIG = {"1": {"candidate_steps": list(SET)}, "17": {"candidate_steps": [0]}}
# tokens a tree step makes greedily: its first draft (the drafter's argmax, which every tree keeps) and the bonus
# token at least, its deepest path's S drafts and the bonus token at most
TREE_TOKENS = range(2, TREE[0] + 2)
# how the server's log names each path a depth-0 step took
STOCK_PENALTIES, STOCK_LOGPROBS = "stock's width-1 verify (penalties)", "stock's width-1 verify (log-probs)"
RANK_BINS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 1 << 30)  # at least 5 tokens expected in each here


# each run: its name, sampling parameters, whether it asks for log-probs, how many of the prompts
RUNS = (("greedy", {"temperature": 0.0, "max_new_tokens": GREEDY_TOKENS}, False, GREEDY_REQUESTS),
        ("sampled", {"temperature": TEMPERATURE, "max_new_tokens": SAMPLED_TOKENS}, False, SAMPLED_REQUESTS),
        # batches the plain "off" leaves to stock's width-1 verify
        ("penalized", {"temperature": 0.0, "max_new_tokens": FALLBACK_TOKENS, "frequency_penalty": 0.5},
         False, FALLBACK_REQUESTS),
        ("logprobs", {"temperature": 0.0, "max_new_tokens": FALLBACK_TOKENS}, True, FALLBACK_REQUESTS),
        # a batch size that allows only depth 0: every step after the prefill's is a plain one
        ("sampled-off", {"temperature": TEMPERATURE, "max_new_tokens": OFF_TOKENS}, False, OFF_REQUESTS))


def engine_child() -> None:
    """Runs in a fresh process: one engine launched at :data:`LAUNCH` with :data:`ADAPTIVE_CONFIG` (written into
    WORK, this server's own folder), the :data:`RUNS` in turn, one RESULT line. Arguments: TARGET DRAFTER
    PROMPTS_JSON WORK."""
    from sglang_eagle_ext.sglang.compat import cpu

    if DEVICE == "cpu":
        cpu.install()
    import sglang

    from sglang_eagle_ext.sglang.compat.releases import installed_release

    target, drafter, prompts, work = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    # the GPU server as users run it (graphs, overlap), with an attention backend every kit has
    device_options = cpu.engine_options(installed_release()) if DEVICE == "cpu" else {"attention_backend": "triton"}
    config_path = os.path.join(work, "adaptive.json")
    with open(config_path, "w", encoding="utf-8") as handle:
        json.dump(ADAPTIVE_CONFIG, handle)
    engine = sglang.Engine(speculative_adaptive_config=config_path,
                           model_path=target, skip_tokenizer_init=True, max_total_tokens=8192, context_length=256,
                           log_level="error", random_seed=7, speculative_algorithm="EAGLE3",
                           speculative_draft_model_path=drafter, speculative_adaptive=True, **LAUNCH, **device_options)
    results = {}
    try:
        for mode, params, logprobs, count in RUNS:
            outputs = engine.generate(input_ids=prompts[:count], sampling_params={**params, "ignore_eos": True},
                                      return_logprob=logprobs)
            results[mode] = [{"output_ids": o["output_ids"], "verify": o["meta_info"].get("spec_verify_ct")}
                             for o in outputs]
    finally:
        engine.shutdown()
    print("RESULT " + json.dumps(results), flush=True)


def rank_test_p_value(previous: list[int], drawn: list[int], logits: torch.Tensor, temperature: float) -> float:
    """Pearson's chi-square p-value of the drawn tokens' ranks, binned, against the counts expected when each
    token x_i was drawn from ``softmax(logits[previous_i mod classes] / T)`` (rank 0: the most probable)."""
    probs = torch.softmax(logits.double()[torch.tensor(previous) % zipf_target.CLASSES] / temperature, dim=-1)
    order = probs.argsort(dim=-1, descending=True)
    ranks = order.argsort(dim=-1).gather(1, torch.tensor(drawn).unsqueeze(1)).squeeze(1)
    cumulative = torch.nn.functional.pad(probs.gather(1, order).cumsum(-1), (1, 0))
    edges = torch.tensor([min(edge, probs.shape[1]) for edge in RANK_BINS])
    expected = (cumulative[:, edges[1:]] - cumulative[:, edges[:-1]]).sum(0)
    observed = torch.stack([((ranks >= low) & (ranks < high)).sum() for low, high in zip(edges[:-1], edges[1:])])
    statistic = ((observed - expected) ** 2 / expected).sum()
    return float(torch.special.gammaincc(torch.tensor((len(expected) - 1) / 2, dtype=torch.float64), statistic / 2))


# the drafter's extend at every off step (stock's), or deferred to a catch-up at 2 tokens a request or before a
# drafting step (compat/deferred_extend.py), each catch-up audited against stock's extends, run as well; and
# deferred at 4 with every off step making 2 plain tokens a request (plain_off.TOKENS_SWITCH; unaudited: stock's
# extends are width-1)
DEFERRALS = {"extend-every-step": {}, "deferred-2-audited": {deferred_extend.ENV_SWITCH: "2",
                                                             deferred_extend.AUDIT_SWITCH: "1"},
             "deferred-4-off-2-tokens": {deferred_extend.ENV_SWITCH: "4", TOKENS_SWITCH: "2"}}


def off_tokens(deferral: str) -> int:
    """Tokens a request an off step of the server ``deferral`` makes."""
    return int(DEFERRALS[deferral].get(TOKENS_SWITCH, 1))
# the audit's line: catch-ups, requests, the largest KV and hidden-row differences, requests whose top-k ids differ
AUDIT_LINE = re.compile(r"deferred drafter extend audit: (\d+) catch-ups over (\d+) requests: drafter KV max "
                        r"\|difference\| (\S+) \(values up to (\S+)\), next hidden row (\S+) \(values up to "
                        r"(\S+)\), top-k ids differing in (\d+) requests")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """The zipf pair built once and served by :func:`engine_child` for each of :data:`DEFERRALS` at once, with the
    switch at ``cycle`` (the test mode, at the tree's launch) and the drafter's extend (and off's tokens) as it
    names (side by side, since a CPU server's step is mostly one Python thread's scheduling: on CI's 2 cores two
    of them one after the other took 194 and 215 s, together 232 s): {deferral: (the prompts, the child's results
    by run, the law (:func:`served_law`), the server's stderr, the policy's trace rows (one a verify result: its
    bucket, traffic, depth, requests and accepted drafts), in order)}."""
    root = tmp_path_factory.mktemp("zipf")
    built = subprocess.run([sys.executable, "benchmarks/gpu/zipf_checkpoint.py", str(root), "--smoke",
                            *GEOMETRY_OPTIONS[DEVICE], "--device", "cpu"], cwd=ROOT, capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    target, drafter = str(root / "models" / "target"), str(root / "models" / "drafter")
    config = json.loads((root / "models" / "target" / "config.json").read_text())
    prompts = torch.randint(0, config["vocab_size"], (max(SAMPLED_REQUESTS, OFF_REQUESTS), PROMPT_TOKENS),
                            generator=torch.Generator().manual_seed(3)).tolist()

    from sglang_eagle_ext.demo.run import server_environment
    from sglang_eagle_ext.sglang.compat.adaptive_shape import ENV_SWITCH as ADAPTIVE_SWITCH
    from sglang_eagle_ext.sglang.compat.adaptive_shape import TRACE_SWITCH
    from sglang_eagle_ext.sglang.compat.plain_off import OFF_SWITCH
    from sglang_eagle_ext.sglang.plugin import SWITCH as PLUGIN_SWITCH

    children = {}
    for name, switches in DEFERRALS.items():
        work = root / name
        work.mkdir()
        env = {**server_environment(DEVICE), ADAPTIVE_SWITCH: "cycle", TRACE_SWITCH: str(work / "trace"), **switches}
        for switch in (deferred_extend.ENV_SWITCH, deferred_extend.AUDIT_SWITCH, TOKENS_SWITCH):
            if switch not in switches:
                env.pop(switch, None)
        env.pop(OFF_SWITCH, None)  # its default: plain decoding, by the plain decode graphs under CUDA graphs
        # the checkout first, then what the environment had (on a CPU host the shims' folder)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.pop(PLUGIN_SWITCH, None)  # the plugin at its default: on
        # into files, not pipes: a child whose pipe nobody reads while the other is waited on would stall
        with open(work / "stdout", "w") as stdout, open(work / "stderr", "w") as stderr:
            children[name] = (work, subprocess.Popen(
                [sys.executable, "-c", f"from {__name__} import engine_child; engine_child()", target, drafter,
                 json.dumps(prompts), str(work)], cwd=ROOT, stdout=stdout, stderr=stderr, env=env))
    try:
        returncodes = {name: child.wait(timeout=900) for name, (_, child) in children.items()}
    finally:
        for _, child in children.values():
            if child.poll() is None:
                child.kill()
    law = served_law(target)
    served_runs = {}
    for name, (work, _) in children.items():
        stderr = (work / "stderr").read_text()
        served_runs[name] = (prompts, served_result(returncodes[name], (work / "stdout").read_text(), stderr,
                                                    off_tokens(name)), law, stderr, served_trace(work))
    return served_runs


def served_result(returncode: int, stdout: str, stderr: str, tokens: int) -> dict:
    """A server's results by run, after the checks of its start-up lines (off making ``tokens`` a request)."""
    results = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert returncode == 0 and results, stderr[-4000:]
    several = f", {tokens} tokens a request a step ({TOKENS_SWITCH})" if tokens > 1 else ""
    assert OFF_ACTIVATION.format(several) in stderr  # the activation line
    assert ("plain decode graphs captured" in stderr) == (DEVICE == "cuda")  # a CPU server captures none
    assert f"round-robin (test mode) over depths {list(SET)}" in stderr
    assert "adaptive set: tree 5/4/8 with off, chain 1/1/2, chain 3/1/4" in stderr
    return json.loads(results[0][len("RESULT "):])


def served_trace(work) -> list[dict]:
    """The scheduler's trace rows, written every 2 s while it ran (its last ones may be lost at the shutdown)."""
    trace = [json.loads(line) for path in sorted(work.glob("trace.*.jsonl")) for line in path.read_text().splitlines()]
    return sorted(trace, key=lambda row: row["t"])


@pytest.fixture(scope="module", params=list(DEFERRALS))
def served(request, servers):
    """One of :func:`servers`' runs: the prompts, results by run, law, stderr and trace."""
    return servers[request.param]


def served_law(target: str) -> torch.Tensor:
    """``[classes, vocab]`` logits after a token of each class, by HF transformers' forward of the weights as
    written (bf16 values; float32, as the CPU server runs them): zipf_target's profiles to within bf16's
    rounding, which is what the server's tokens must follow."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    with torch.no_grad():  # token c is of class c; after one token the law is its class's
        return model(input_ids=torch.arange(zipf_target.CLASSES).unsqueeze(1)).logits[:, 0]


@needs_sglang
def test_greedy_output_is_the_targets_argmax_chain_and_every_chains_drafts_are_accepted_whole(served, request):
    """Greedy: each token is the argmax of the law after the one before, across chains, the tree and off. This
    drafter drafts the argmax chain, so when the state carried across the switches is intact every step of the
    greedy batch (8 requests) at chain depth d accepts d drafts a request, every tree step at least its first
    (the drafter's argmax) and at most S, off none (the policy's trace, the batch's last step excepted: a request
    reaching its length accepts fewer); and the tokens after the prefill's take as many verify steps as the
    shapes in turn need from some starting shape with those tree steps (:func:`cycle_steps`); a draft rejected
    after a switch, or a tree drafting from a chain's columns, would break one or the other. Tree steps were
    taken and accepted drafts."""
    prompts, results, law, _, trace = served
    tokens = off_tokens(request.node.callspec.params["served"])
    prompts = prompts[:GREEDY_REQUESTS]
    top2 = law.topk(2, dim=-1).values
    assert (top2[:, 0] - top2[:, 1]).min() > 0.01  # no argmax here is a float32 rounding away from another
    argmax = law.argmax(-1)
    for prompt, output in zip(prompts, results["greedy"]):
        assert output["output_ids"] == argmax_chain(argmax, prompt[-1], GREEDY_TOKENS)
    verify = sorted(output["verify"] for output in results["greedy"])
    print(f"{DEVICE}: verify steps for {GREEDY_TOKENS - 1} tokens: {verify}")
    assert set(verify) <= cycle_steps(GREEDY_TOKENS - 1, off=tokens)
    # the greedy run's steps: the only greedy batch of 8 requests (the penalized and log-prob ones have 2)
    steps = [(row["depth"], row["accepted"]) for row in trace
             if "accepted" in row and row["traffic"] == "greedy" and row["requests"] == GREEDY_REQUESTS][:-1]
    print(f"{DEVICE}: the greedy batch's (depth, accepted drafts) but its last step: {steps}")
    assert {depth for depth, _ in steps} == set(SET)  # every shape ran, the tree included
    for depth, accepted in steps:
        if depth == TREE[0]:
            assert GREEDY_REQUESTS <= accepted <= GREEDY_REQUESTS * depth
        else:  # an off step's plain tokens after its first reach the policy as accepted "drafts"
            assert accepted == GREEDY_REQUESTS * (depth or tokens - 1)


def argmax_chain(argmax: torch.Tensor, token: int, length: int) -> list[int]:
    chain = []
    for _ in range(length):
        token = int(argmax[token % zipf_target.CLASSES])
        chain.append(token)
    return chain


def off_steps(stderr: str, path: str) -> int:
    """The largest count of depth-0 steps by ``path`` the server logged (plain_off logs powers of two)."""
    counts = [int(count) for count in re.findall(rf"adaptive off: (\d+) steps? by {re.escape(path)}", stderr)]
    return max(counts, default=0)


@needs_sglang
def test_off_is_plain_decoding_except_where_stock_must_verify(served):
    """At depth 0 the greedy and sampled batches (no penalties, no log-probs) were decoded by the target's plain
    DECODE forward (at least one depth-0 step in every turn of four: 4 or more over the two runs, whose tokens
    the greedy and the law tests judge); a batch with a frequency penalty and one asking for log-probs took
    stock's width-1 verify at depth 0, and the one with log-probs still made the argmax chain (stock's path
    is as lossless after plain steps of other batches)."""
    prompts, results, law, stderr, _ = served
    print(f"{DEVICE}: depth-0 steps by plain decoding {off_steps(stderr, PLAIN)}, by stock's verify "
          f"(penalties) {off_steps(stderr, STOCK_PENALTIES)}, (log-probs) {off_steps(stderr, STOCK_LOGPROBS)} "
          "(powers of two: the log's)")
    assert off_steps(stderr, PLAIN) >= 4
    assert off_steps(stderr, STOCK_PENALTIES) >= 1
    assert off_steps(stderr, STOCK_LOGPROBS) >= 1
    argmax = law.argmax(-1)
    for prompt, output in zip(prompts, results["logprobs"]):
        assert output["output_ids"] == argmax_chain(argmax, prompt[-1], FALLBACK_TOKENS)


def cycle_steps(tokens: int, tree_tokens=TREE_TOKENS, off: int = 1) -> set[int]:
    """Verify steps that make ``tokens`` tokens when the set's shapes come in turn, from each shape the turn may
    start at, every chain's drafts are accepted whole (depth d: d + 1 tokens), each tree step makes any of
    ``tree_tokens`` and each off step ``off``."""
    counts = set()

    def walk(position: int, made: int, steps: int) -> None:
        if made >= tokens:
            counts.add(steps)
            return
        depth = SET[position % len(SET)]
        for step_tokens in (tree_tokens if depth == TREE[0] else (depth + 1 if depth else off,)):
            walk(position + 1, made + step_tokens, steps + 1)

    for start in range(len(SET)):
        walk(start, 0, 0)
    return counts


@needs_sglang
def test_sampled_tokens_follow_the_targets_law_while_shapes_switch_every_step(served):
    """Sampled at T 0.7 across chains, the tree and off: the ranks pass the law's chi-square test and fail the
    neighbouring law's; drafts were accepted, by the tree's steps too (the policy's trace)."""
    prompts, results, law, _, trace = served
    prompts = prompts[:SAMPLED_REQUESTS]
    outputs = results["sampled"]
    assert all(len(o["output_ids"]) == SAMPLED_TOKENS for o in outputs)
    # drafts were accepted: fewer verify steps than tokens after the prefill's
    assert 0 < sum(o["verify"] for o in outputs) < SAMPLED_REQUESTS * (SAMPLED_TOKENS - 1)
    # the sampled run's tree steps accepted drafts (the depth-0-only batch is the only other sampled one: 24
    # requests, finishing together)
    assert sum(row["accepted"] for row in trace if "accepted" in row and row["traffic"] == "sampled"
               and row["depth"] == TREE[0] and row["requests"] <= SAMPLED_REQUESTS) > 0
    previous, drawn = [], []
    for prompt, output in zip(prompts, outputs):
        sequence = prompt[-1:] + output["output_ids"]
        previous += sequence[:-1]
        drawn += sequence[1:]
    assert rank_test_p_value(previous, drawn, law, TEMPERATURE) > 1e-4, "not drawn from the target's law"
    # the same tokens judged under a neighbouring law are rejected: the check has the power to fail
    assert rank_test_p_value(previous, drawn, law, NEIGHBOUR_TEMPERATURE) < 1e-4


@pytest.mark.parametrize("tokens", [SAMPLED_REQUESTS * SAMPLED_TOKENS, OFF_REQUESTS * (OFF_TOKENS - 1)])
@pytest.mark.parametrize("seed", [9, 10, 11])
def test_the_rank_test_accepts_only_the_law_the_tokens_came_from(seed, tokens):
    """The check itself, on tokens drawn here from the exact law at T 0.7 (as many as each server test judges):
    accepted under that law, rejected under T 0.5 and the neighbouring law."""
    hidden, vocab, generator = 128, 4096, torch.Generator().manual_seed(seed)
    profiles, _ = zipf_target.profiles_and_basis(hidden, vocab, LAW_SEED, "cpu")
    token, previous, drawn = 17, [], []
    for _ in range(tokens):
        probs = torch.softmax(profiles[token % zipf_target.CLASSES].double() / TEMPERATURE, dim=-1)
        previous.append(token)
        token = int(torch.multinomial(probs, 1, generator=generator))
        drawn.append(token)
    assert rank_test_p_value(previous, drawn, profiles, TEMPERATURE) > 1e-3
    assert rank_test_p_value(previous, drawn, profiles, 0.5) < 1e-6
    assert rank_test_p_value(previous, drawn, profiles, NEIGHBOUR_TEMPERATURE) < 1e-4  # the server tests' threshold


@needs_sglang
def test_tokens_of_plain_off_steps_alone_follow_the_targets_law(served, request):
    """A batch of 24 requests, where the config allows depth 0 only: every token after the prefill's was drawn by
    the plain off (the target's DECODE forward and SGLang's sampler), one a step; the ranks pass the law's
    chi-square test and fail a neighbouring law's (a plain path that took the argmax, or sampled at another
    temperature, fails here; the mixed run above has too few plain tokens to show it)."""
    prompts, results, law, stderr, _ = served
    tokens = off_tokens(request.node.callspec.params["served"])
    outputs = results["sampled-off"]
    steps = -(-(OFF_TOKENS - 1) // tokens)  # an off step makes `tokens` a request, the last one cut at the length
    assert all(len(o["output_ids"]) == OFF_TOKENS and o["verify"] == steps for o in outputs)
    # the log counts plain steps at powers of two over the whole run: at least the one at or below this batch's 15
    assert off_steps(stderr, PLAIN) >= 1 << (OFF_TOKENS - 1).bit_length() - 1
    previous, drawn = [], []
    for prompt, output in zip(prompts, outputs):
        sequence = prompt[-1:] + output["output_ids"]
        previous += sequence[1:-1]  # the prefill's token is stock's sampler's
        drawn += sequence[2:]
    assert rank_test_p_value(previous, drawn, law, TEMPERATURE) > 1e-4, "not drawn from the target's law"
    assert rank_test_p_value(previous, drawn, law, NEIGHBOUR_TEMPERATURE) < 1e-4


@needs_sglang
def test_deferred_catch_ups_rewrite_what_stocks_per_step_extends_wrote(served, request):
    """Deferred: the drafter caught up both at K pending tokens (the depth-0-only batch) and before drafting steps
    (the runs that switch shape every step), and the audit found each catch-up's drafter KV (every layer's keys
    and values at the slots it rewrote, poisoned before it ran) and next-draft state (hidden row, top-k ids) equal
    to what stock's per-step extends, run as well, had made: exactly on a CPU (float32), to float16 rounding on a
    GPU. With the extend at every step, no catch-up ran; with off steps of 2 tokens (no audit: stock's extends are
    width-1) the other tests' outputs are the check."""
    _, _, _, stderr, _ = served
    switches = DEFERRALS[request.node.callspec.params["served"]]
    if not switches:
        assert "deferred drafter extend" not in stderr and "drafter extend at every off step" in stderr
        return
    most = switches[deferred_extend.ENV_SWITCH]
    assert f"drafter extend deferred while off, at most {most} tokens a request" in stderr
    occasions = dict(re.findall(rf"deferred drafter extend: \d+ catch-ups? (at {most} tokens|before drafting) "
                                r"\((\d+) requests", stderr))
    assert set(occasions) == {f"at {most} tokens", "before drafting"}, stderr[-3000:]
    if deferred_extend.AUDIT_SWITCH not in switches:  # off steps of several tokens: the outputs are the check
        assert not AUDIT_LINE.findall(stderr)
        return
    audits = AUDIT_LINE.findall(stderr)
    assert audits, stderr[-3000:]
    catch_ups, requests, kv, kv_scale, hidden, hidden_scale, differing = audits[-1]
    print(f"{DEVICE}: audit over {catch_ups} catch-ups ({requests} requests): KV {kv} of values up to {kv_scale}, "
          f"hidden {hidden} of values up to {hidden_scale}, top-k ids differing in {differing}")
    relative = 0.0 if DEVICE == "cpu" else 1e-2  # float16's rounding of GEMMs of another row count, on a GPU
    assert int(catch_ups) >= 8 and float(kv_scale) > 0 and float(hidden_scale) > 0
    assert float(kv) <= relative * float(kv_scale) and float(hidden) <= relative * float(hidden_scale)
    assert int(differing) <= (0 if DEVICE == "cpu" else int(requests) // 100)
