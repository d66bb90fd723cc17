"""off_graphs.py: the target's plain decode graphs captured beside depth 0's state and replayed by the plain step.

The capture itself needs a GPU (SGLang captures no graphs on a CPU); here, with SGLang 0.5.23's own classes where
they run on a CPU: which builds capture, what the runner class changes of SGLang's capture (the mode, the hidden
states, the spec info) and nothing else, the failure path, and the plain step taking the graphs and their backend
for its forward only. Its GPU run: docs/adaptive-shape.md section 17."""

import contextlib
from types import SimpleNamespace

import pytest

from sglang_eagle_ext.sglang.compat import off_graphs, plain_off

pytest.importorskip("sglang.srt.model_executor.runner.decode_cuda_graph_runner")


def test_only_depth_0s_graphed_state_captures_them(monkeypatch):
    captured = []
    monkeypatch.setattr(off_graphs, "capture", lambda worker, bs: captured.append((worker, bs)) or "graphs")
    states = {0: SimpleNamespace(target_graph_runner=object()), 3: SimpleNamespace(target_graph_runner=object())}
    build = off_graphs._capturing_beside_depth_0(
        lambda self, steps, draft_tokens, cuda_graph_bs=None: states[steps])
    worker = SimpleNamespace()
    assert build(worker, 3, 4, cuda_graph_bs=[1, 2]) is states[3] and captured == []
    assert build(worker, 0, 1, cuda_graph_bs=[1, 2]) is states[0]
    assert captured == [(worker, [1, 2])] and off_graphs.for_worker(worker) == "graphs"
    eager = SimpleNamespace()  # depth 0 without graphs (CUDA graphs off, or no batch size at depth 0)
    states[0] = SimpleNamespace(target_graph_runner=None)
    build(eager, 0, 1)
    assert len(captured) == 1 and off_graphs.for_worker(eager) is None


def _capturing_worker(calls):
    @contextlib.contextmanager
    def override(steps, draft_tokens, cuda_graph_bs=None):
        calls.append(("override", steps, draft_tokens, cuda_graph_bs))
        try:
            yield
        finally:  # as SGLang's own
            calls.append("restored")

    model_runner = SimpleNamespace(init_new_workspace=False)

    def backend(init_new_workspace):
        model_runner.init_new_workspace = init_new_workspace  # SGLang's builder leaves it set
        return "backend"

    model_runner._get_attention_backend = backend
    return SimpleNamespace(_override_worker_state=override, _target_worker=SimpleNamespace(model_runner=model_runner))


def test_capture_builds_sglangs_runner_at_depth_0_on_a_fresh_backend_and_logs_time_and_memory(monkeypatch):
    calls, lines = [], []

    def runner(model_runner, **kwargs):
        calls.append(("runner", kwargs))
        return SimpleNamespace(capture_bs=[1, 2, 4], max_bs=4)

    monkeypatch.setattr(off_graphs, "_runner_class", lambda: runner)
    worker = _capturing_worker(calls)
    free = iter([10 * 2**30, 9.5 * 2**30])
    graphs = off_graphs.capture(worker, [1, 2, 4], log=lines.append, free_memory=lambda: next(free))
    assert calls == [("override", 0, 1, [1, 2, 4]),
                     ("runner", dict(attn_backend="backend", speculative_num_steps=0, speculative_num_draft_tokens=1)),
                     "restored"]
    assert graphs.attn_backend == "backend" and graphs.runner.capture_bs == [1, 2, 4]
    assert worker._target_worker.model_runner.init_new_workspace is False  # put back as SGLang's own build does
    assert len(lines) == 1 and "captured for batch sizes [1, 2, 4] in" in lines[0] and "0.50 GiB" in lines[0]


def test_a_failed_capture_is_reported_as_ours_and_off_keeps_stocks_verify(monkeypatch):
    calls, lines = [], []

    def runner(model_runner, **kwargs):
        raise RuntimeError("Capture cuda graph failed: out of memory")

    monkeypatch.setattr(off_graphs, "_runner_class", lambda: runner)
    assert off_graphs.capture(_capturing_worker(calls), [1], log=lines.append, free_memory=lambda: 0) is None
    assert calls[-1] == "restored"  # the worker's depth put back
    assert lines == ["sglang-eagle-ext: off: the target's plain decode graphs not captured (RuntimeError: Capture "
                     "cuda graph failed: out of memory); off runs stock's graphed width-1 verify (this package's "
                     "failure: please report it)"]


def _runner(monkeypatch, width=1, ragged=False, standalone=False):
    """An instance of the runner class with what its capture reads, SGLang's own capture recording instead."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    seen = []
    monkeypatch.setattr(DecodeCudaGraphRunner, "capture",
                        lambda self: seen.append((self.capture_forward_mode, self.capture_hidden_mode)))
    runner = object.__new__(off_graphs._runner_class())
    # what SGLang's __init__ set under speculation before it captures
    runner.capture_forward_mode, runner.capture_hidden_mode = ForwardMode.TARGET_VERIFY, CaptureHiddenMode.NULL
    runner.captured_req_width, runner.ragged_verify_mode = width, ragged
    runner.model_runner = SimpleNamespace(spec_algorithm=SimpleNamespace(is_standalone=lambda: standalone))
    return runner, seen


def test_the_runner_captures_decode_at_width_1_with_the_drafters_hidden_states(monkeypatch):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    assert issubclass(off_graphs._runner_class(), DecodeCudaGraphRunner)
    runner, seen = _runner(monkeypatch)
    runner.capture()
    assert seen == [(ForwardMode.DECODE, CaptureHiddenMode.FULL)]  # SGLang's capture, in DECODE mode
    assert runner.get_spec_info(8) is None  # the captured batch: an ordinary decode, no verify input
    runner, seen = _runner(monkeypatch, standalone=True)  # a standalone drafter reads no target states
    runner.capture()
    assert seen == [(ForwardMode.DECODE, CaptureHiddenMode.NULL)]
    for width, ragged in ((2, False), (1, True)):
        runner, seen = _runner(monkeypatch, width=width, ragged=ragged)
        with pytest.raises(RuntimeError, match="where a plain decode step's is 1"):
            runner.capture()
        assert seen == []


def test_serving_puts_the_depths_own_runner_and_backend_back_even_after_a_failure():
    model_runner = SimpleNamespace(decode_cuda_graph_runner="verify graphs", attn_backend="verify backend")
    graphs = off_graphs.OffGraphs("decode graphs", "decode backend")
    with pytest.raises(KeyError):
        with off_graphs.serving(model_runner, graphs):
            assert (model_runner.decode_cuda_graph_runner, model_runner.attn_backend) == (
                "decode graphs", "decode backend")
            raise KeyError("forward failed")
    assert (model_runner.decode_cuda_graph_runner, model_runner.attn_backend) == ("verify graphs", "verify backend")
    assert off_graphs.can_serve(graphs := off_graphs.OffGraphs(SimpleNamespace(max_bs=8), None), 8)
    assert not off_graphs.can_serve(graphs, 9) and not off_graphs.can_serve(None, 1)


@pytest.mark.parametrize("max_bs, replayed", [(2, True), (1, False)])
def test_the_plain_step_forwards_through_the_graphs_where_they_hold_the_batch(monkeypatch, max_bs, replayed):
    import torch

    seen = []
    verify_graphs = SimpleNamespace()  # the depth's graphed width-1 verify runner

    def sample(logits_output, forward_batch):
        return torch.tensor([7, 8])

    model_runner = SimpleNamespace(decode_cuda_graph_runner=verify_graphs, attn_backend="verify backend",
                                   sample=sample)

    def forward_batch(batch, runner, input_ids, slots, offset=0):
        seen.append(("batch", model_runner.decode_cuda_graph_runner, model_runner.attn_backend, slots.tolist()))
        return "forward batch"

    def forward(batch, forward_batch, is_verify):
        seen.append(("forward", model_runner.decode_cuda_graph_runner, model_runner.attn_backend, is_verify))
        return SimpleNamespace(logits_output="logits", can_run_cuda_graph=replayed, routed_experts_output=None,
                               indexer_topk_output=None)

    monkeypatch.setattr(plain_off, "_plain_forward_batch", forward_batch)
    monkeypatch.setattr(plain_off, "_graphed", lambda runner: runner is verify_graphs)
    worker = SimpleNamespace(target_worker=SimpleNamespace(model_runner=model_runner, forward_batch_generation=forward),
                             req_to_token_pool=SimpleNamespace(req_to_token=torch.arange(20).view(2, 10)))
    graphs = off_graphs.OffGraphs(SimpleNamespace(max_bs=max_bs), "decode backend")
    setattr(worker, off_graphs.ATTRIBUTE, graphs)
    batch = SimpleNamespace(spec_info=SimpleNamespace(draft_token=torch.tensor([5, 6])),
                            seq_lens=torch.tensor([3, 4]), req_pool_indices=torch.tensor([0, 1]))
    result = plain_off.plain_decode_step(worker, batch)
    runner, backend = (graphs.runner, "decode backend") if replayed else (None, "verify backend")
    # the slots the width-1 verify would write: req_to_token[request, pre-step length]
    assert seen == [("batch", runner, backend, [3, 14]), ("forward", runner, backend, True)]
    assert (model_runner.decode_cuda_graph_runner, model_runner.attn_backend) == (verify_graphs, "verify backend")
    assert result.next_token_ids.tolist() == [7, 8] and result.next_token_ids.dtype == torch.int32
    assert result.new_seq_lens.tolist() == [4, 5] and result.accept_lens.tolist() == [1, 1]


@pytest.mark.parametrize("allowed, routed, made", [(3, False, 3), (2, False, 2), (3, True, 1)])
def test_an_off_step_of_several_tokens_feeds_each_token_back_and_returns_them_as_accepted(monkeypatch, allowed,
                                                                                          routed, made):
    """An off step of 3 tokens a request asked: forward k decodes the token forward k - 1 sampled (the first the
    previous bonus token) into the request's slot at its pre-step length + k; the result holds the tokens request
    by request, every one accepted, the aux rows of each forward in the same order (copied: a graph's next replay
    overwrites its output), the last token as the bonus token and the lengths + the tokens made. As many as the
    engine allows (:func:`plain_off.step_tokens`), one where the forward returns routing."""
    import torch

    seen, forwards = [], []
    model_runner = SimpleNamespace(decode_cuda_graph_runner=None, attn_backend="backend",
                                   sample=lambda logits_output, forward_batch: logits_output.drawn)

    def forward_batch(batch, runner, input_ids, slots, offset=0):
        seen.append((input_ids.tolist(), slots.tolist(), offset))
        return "forward batch"

    rows = torch.zeros(2, 3)  # one output buffer, as a graph's: every forward writes it in place

    def forward(batch, forward_batch, is_verify):
        k = len(forwards)
        forwards.append(k)
        rows.copy_(torch.full((2, 3), float(k)) + torch.tensor([[0.0], [0.5]]))
        logits = SimpleNamespace(hidden_states=rows, drawn=torch.tensor([10 + k, 20 + k]))
        return SimpleNamespace(logits_output=logits, can_run_cuda_graph=False, indexer_topk_output=None,
                               routed_experts_output="routing" if routed else None)

    monkeypatch.setattr(plain_off, "_plain_forward_batch", forward_batch)
    worker = SimpleNamespace(target_worker=SimpleNamespace(model_runner=model_runner, forward_batch_generation=forward),
                             req_to_token_pool=SimpleNamespace(req_to_token=torch.arange(20).view(2, 10)))
    setattr(worker, plain_off._STEP_TOKENS, allowed)
    batch = SimpleNamespace(spec_info=SimpleNamespace(draft_token=torch.tensor([5, 6])),
                            seq_lens=torch.tensor([3, 4]), req_pool_indices=torch.tensor([0, 1]))
    result = plain_off.plain_decode_step(worker, batch, 3)
    fed = [[5, 6]] + [[10 + k, 20 + k] for k in range(made - 1)]
    assert seen == [(fed[k], [3 + k, 14 + k], k) for k in range(made)]
    assert result.next_token_ids.tolist() == [10 + k for k in range(made)] + [20 + k for k in range(made)]
    assert result.speculative_num_draft_tokens == made and result.accept_lens.tolist() == [made, made]
    assert result.accept_index.tolist() == [list(range(made)), list(range(made, 2 * made))]
    assert result.new_seq_lens.tolist() == [3 + made, 4 + made]
    assert result.next_draft_input.bonus_tokens.tolist() == [10 + made - 1, 20 + made - 1]
    if made > 1:  # request by request, forward by forward: k, then k + 0.5 for the second request
        assert result.logits_output.hidden_states[:, 0].tolist() == (
            [float(k) for k in range(made)] + [k + 0.5 for k in range(made)])


@pytest.mark.parametrize("reason, reserved, allowed", [(None, 6, 3), (None, 2, 2), ("mixed chunked prefill", 6, 1)])
def test_an_engine_makes_several_off_tokens_only_where_its_drafter_defers_and_slots_are_reserved(
        monkeypatch, capsys, reason, reserved, allowed):
    """Read once a worker: one token where the drafter keeps stock's width-1 extend (it takes one token a
    request), at most the KV slots a decode step reserves a request; a smaller answer is logged with its why."""
    from sglang.srt.mem_cache import allocation_sizing

    from sglang_eagle_ext.sglang.compat import deferred_extend

    asked = []
    monkeypatch.setattr(deferred_extend, "deferral_reason", lambda drafter: asked.append(drafter) or reason)
    monkeypatch.setattr(allocation_sizing, "get_alloc_len_per_decode", lambda: reserved)
    worker = SimpleNamespace(draft_worker="drafter")
    assert plain_off.step_tokens(worker, 1) == 1 and asked == []  # the default reads nothing
    assert plain_off.step_tokens(worker, 3) == allowed and plain_off.step_tokens(worker, 3) == allowed
    assert asked == ["drafter"]  # once
    log = capsys.readouterr().err
    assert (f"off: {allowed} token" in log) == (allowed < 3)
    assert (reason or "reserves 2 KV slots") in log if allowed < 3 else log == ""


def test_forward_k_of_an_off_step_decodes_at_its_own_lengths_and_the_batch_is_put_back(monkeypatch):
    """The forward batch of token k: a DECODE of the input into the slots given, at lengths (device, host, sum)
    k + 1 past the step's, so its positions are the verify's + k; the schedule batch's lengths and spec input
    as they were, for the draft extend."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    seen = {}

    def init_new(batch, model_runner, capture_hidden_mode, return_hidden_states_before_norm):
        seen.update(mode=batch.forward_mode, input_ids=batch.input_ids.tolist(), slots=batch.out_cache_loc.tolist(),
                    spec=batch.spec_info, seq_lens=batch.seq_lens.tolist(), host=batch.seq_lens_cpu.tolist(),
                    total=batch.seq_lens_sum, hidden=capture_hidden_mode)
        return "forward batch"

    monkeypatch.setattr(ForwardBatch, "init_new", staticmethod(init_new))
    monkeypatch.setattr(plain_off.off_graphs, "step_hidden_mode", lambda runner: "FULL")
    spec = object()
    batch = SimpleNamespace(seq_lens=torch.tensor([3, 9]), seq_lens_cpu=torch.tensor([3, 9]), seq_lens_sum=12,
                            spec_info=spec, forward_mode="TARGET_VERIFY", input_ids=None, out_cache_loc=None)
    made = plain_off._plain_forward_batch(batch, "runner", torch.tensor([5, 6]), torch.tensor([30, 91]), offset=2)
    assert made == "forward batch"
    assert seen == {"mode": ForwardMode.DECODE, "input_ids": [5, 6], "slots": [30, 91], "spec": None,
                    "seq_lens": [6, 12], "host": [6, 12], "total": 18, "hidden": "FULL"}
    assert batch.seq_lens.tolist() == [3, 9] and batch.seq_lens_cpu.tolist() == [3, 9]
    assert batch.seq_lens_sum == 12 and batch.spec_info is spec

