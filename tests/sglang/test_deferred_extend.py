"""The deferred drafter extend's parts that need no server (``compat/deferred_extend.py``): the catch-up's layout
against a loop over the requests, and its switches. Its catch-ups in a CPU server, checked against stock's per-step
extends by its audit, and the outputs it serves: ``test_adaptive_lossless.py``."""

import random

import pytest
import torch
from packaging.version import Version

from sglang_eagle_ext import env
from sglang_eagle_ext.sglang.compat import adaptive_shape, deferred_extend


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_layout_lists_each_requests_pending_tokens_in_order(seed):
    """Request by request, column 0 up to its count; its first and last token where they lie in that list."""
    generator = random.Random(seed)
    counts = [generator.randint(1, 8) for _ in range(generator.randint(1, 12))]
    request, column, first, last = deferred_extend.extend_layout(counts)
    expected = [(r, c) for r, count in enumerate(counts) for c in range(count)]
    assert list(zip(request.tolist(), column.tolist())) == expected
    starts = [sum(counts[:r]) for r in range(len(counts))]
    assert first.tolist() == starts
    assert last.tolist() == [start + count - 1 for start, count in zip(starts, counts)]
    assert all(tensor.dtype == torch.int64 for tensor in (request, column, first, last))


@pytest.mark.parametrize("counts", [[], [2, 0, 1]])
def test_a_request_without_pending_tokens_is_no_catch_up(counts):
    with pytest.raises(ValueError, match="needs a pending token"):
        deferred_extend.extend_layout(counts)


@pytest.mark.parametrize("value, tokens", [(None, 0), ("0", 0), ("1", 1), (" 8 ", 8), ("64", 64)])
def test_the_switch_gives_the_tokens_a_request_may_hold(monkeypatch, value, tokens):
    if value is None:
        monkeypatch.delenv(deferred_extend.ENV_SWITCH, raising=False)
    else:
        monkeypatch.setenv(deferred_extend.ENV_SWITCH, value)
    assert deferred_extend.selected() == tokens


@pytest.mark.parametrize("value", ["65", "-1", "on", "8k"])
def test_a_value_the_switch_does_not_take_is_refused(monkeypatch, value):
    monkeypatch.setenv(deferred_extend.ENV_SWITCH, value)
    with pytest.raises(env.SwitchError, match=f"{deferred_extend.ENV_SWITCH}='{value}'.*1 to 64"):
        deferred_extend.selected()


def test_deferring_without_the_adaptive_policy_stops_start_up(monkeypatch):
    """Only this package's policy runs depth 0 through the wrapped extend: the switch alone would do nothing."""
    monkeypatch.delenv(adaptive_shape.ENV_SWITCH, raising=False)
    monkeypatch.setenv(deferred_extend.ENV_SWITCH, "8")
    with pytest.raises(env.SwitchError, match=f"Set {adaptive_shape.ENV_SWITCH}=1"):
        adaptive_shape.selected(Version("0.5.23"))
    monkeypatch.setenv(adaptive_shape.ENV_SWITCH, "1")
    assert adaptive_shape.selected(Version("0.5.23")) == "on"


def test_an_audit_without_deferral_stops_start_up(monkeypatch):
    monkeypatch.setenv(deferred_extend.AUDIT_SWITCH, "1")
    with pytest.raises(env.SwitchError, match=f"set {deferred_extend.ENV_SWITCH}"):
        deferred_extend.bind(None, 0)
    monkeypatch.setenv(deferred_extend.AUDIT_SWITCH, "0")
    assert deferred_extend.bind(None, 0) == "drafter extend at every off step"


@pytest.mark.parametrize("per_step", [1, 2])
@pytest.mark.parametrize("uniform", [True, False])
def test_each_step_is_kept_at_its_requests_column_and_a_first_one_at_its_position(uniform, per_step):
    """Steps appended to the buffers land, request by request (keyed by its pool slot), at the columns its count
    gives, a step's tokens in order (an off step makes ``per_step`` a request: tokens and rows request by
    request), and a request's first pending step sets its start to the step's length; against a loop over
    requests. Requests that joined together (one count) take the one-slice path, the others a column each."""
    generator = torch.Generator().manual_seed(5 + uniform + 2 * per_step)
    slots, most, width = 12, 8, 6
    rows = torch.randn(3, width, generator=generator)
    buffers = deferred_extend.PendingBuffers(slots, most, rows)
    expected_tokens = torch.zeros(slots, most, dtype=torch.int64)
    expected_rows = torch.zeros(slots, most, width)
    expected_start = torch.zeros(slots, dtype=torch.int64)
    pool = torch.tensor([7, 2, 9])
    lengths = torch.tensor([40, 17, 23])
    counts = [0, 0, 0] if uniform else [0, 1, 0]  # a catch-up comes before K = 8: columns stay below it
    for step in range(3):
        tokens = torch.randint(0, 1000, (3 * per_step,), generator=generator, dtype=torch.int32)
        rows = torch.randn(3 * per_step, width, generator=generator)
        batch = type("Batch", (), {"req_pool_indices": pool, "seq_lens": lengths + step * per_step})
        buffers.append(batch, tokens, rows, counts, per_step)
        for i, slot in enumerate(pool.tolist()):
            for j in range(per_step):
                expected_tokens[slot, counts[i] + j] = int(tokens[i * per_step + j])
                expected_rows[slot, counts[i] + j] = rows[i * per_step + j]
            if counts[i] == 0:
                expected_start[slot] = int(lengths[i]) + step * per_step
        counts = [count + per_step for count in counts]
    assert torch.equal(buffers.tokens, expected_tokens)
    assert torch.equal(buffers.rows, expected_rows)
    assert torch.equal(buffers.start, expected_start)
    assert int(buffers.start[7]) == 40  # the first request's start, set at its first step


@pytest.mark.parametrize("tokens, deferral, audit, off, fix", [
    ("2", None, None, None, f"Set {deferred_extend.ENV_SWITCH}=8"),
    ("4", "2", None, None, f"Set {deferred_extend.ENV_SWITCH}=8"),
    ("2", "8", "1", None, f"Unset {deferred_extend.AUDIT_SWITCH}"),
    ("2", "8", None, "stock", "Unset SGLANG_EAGLE_EXT_ADAPTIVE_OFF "),
    ("9", "8", None, None, "1 to 8"),
])
def test_an_off_step_of_several_tokens_it_cannot_serve_stops_start_up(monkeypatch, tokens, deferral, audit, off, fix):
    """Several tokens a request an off step need the deferral to hold them (stock's extend takes one), no audit
    (it compares with stock's width-1 extends) and off by plain decoding; the error names the fix."""
    from sglang_eagle_ext.sglang.compat import plain_off

    monkeypatch.setenv(adaptive_shape.ENV_SWITCH, "1")
    monkeypatch.setenv(plain_off.TOKENS_SWITCH, tokens)
    for name, value in ((deferred_extend.ENV_SWITCH, deferral), (deferred_extend.AUDIT_SWITCH, audit),
                        (plain_off.OFF_SWITCH, off)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    with pytest.raises(env.SwitchError, match=f"{plain_off.TOKENS_SWITCH}=.*{fix}"):
        adaptive_shape.selected(Version("0.5.23"))
    monkeypatch.setenv(plain_off.TOKENS_SWITCH, "2")
    monkeypatch.setenv(deferred_extend.ENV_SWITCH, "8")
    monkeypatch.delenv(deferred_extend.AUDIT_SWITCH, raising=False)
    monkeypatch.delenv(plain_off.OFF_SWITCH, raising=False)
    assert adaptive_shape.selected(Version("0.5.23")) == "on"


def test_pending_tokens_belong_to_the_pool_row_they_were_kept_in():
    """A request's count holds only in the row its tokens were kept in: a decode server that resumes a retracted
    request in another row (no prefill to reset it) finds none pending there, rather than another request's."""
    request = type("Req", (), {"kv": type("ReqKvInfo", (), {"req_pool_idx": 5})()})()  # SGLang 0.5.23's fields
    assert deferred_extend.pending(request) == 0
    deferred_extend.set_pending(request, 3)
    assert deferred_extend.pending(request) == 3
    request.kv.req_pool_idx = 9
    assert deferred_extend.pending(request) == 0


class _Drafter:
    """The drafter worker as the deferral's wrapper sees it at depth 0, with its buffers already made."""
    speculative_num_draft_tokens = 1
    topk = 1
    device = "cpu"


def _step(pool_rows: list[int], lengths: list[int], width: int, requests: list):
    """A depth-0 step's batch and result: ``width`` tokens a request (off's several, or stock's one)."""
    from types import SimpleNamespace

    batch = SimpleNamespace(reqs=requests, req_pool_indices=torch.tensor(pool_rows), seq_lens=torch.tensor(lengths),
                            seq_lens_cpu=torch.tensor(lengths), forward_mode=SimpleNamespace(is_idle=lambda: False),
                            hisparse_coordinator=None)
    result = SimpleNamespace(speculative_num_draft_tokens=width, next_draft_input=SimpleNamespace(),
                             next_token_ids=torch.arange(len(pool_rows) * width),
                             logits_output=SimpleNamespace(hidden_states=torch.randn(len(pool_rows) * width, 4)))
    return batch, result


def test_a_wider_step_after_width_one_steps_catches_up_only_the_requests_behind(monkeypatch):
    """Width-1 depth-0 steps (a batch stock's verify served) leave a request K - 1 tokens behind; an off step of 2
    then would not fit: the requests behind catch up first (a request that joined with none is no catch-up), and
    every request holds its new tokens after."""
    from types import SimpleNamespace

    most = 8
    buffers = deferred_extend.PendingBuffers(16, most, torch.zeros(1, 4))
    buffers.stub_spec = (4, torch.float32)
    drafter = _Drafter()
    setattr(drafter, deferred_extend._STATE, buffers)
    caught = []

    def catch_up(drafter, batch, buffers, rows, where):
        chosen = batch.reqs if rows is None else [batch.reqs[i] for i in rows]
        caught.append(([deferred_extend.pending(request) for request in chosen], where))
        for request in chosen:
            deferred_extend.set_pending(request, 0)
        return torch.zeros(len(chosen), 1), torch.zeros(len(chosen), 1, dtype=torch.int64), torch.zeros(len(chosen), 4)

    monkeypatch.setattr(deferred_extend, "catch_up", catch_up)
    wrapped = deferred_extend._deferring(lambda *args, **kwargs: pytest.fail("stock's extend"), most, audit=False)
    old = [SimpleNamespace(kv=SimpleNamespace(req_pool_idx=row)) for row in (3, 5)]
    for step in range(most - 1):
        wrapped(drafter, *_step([3, 5], [20 + step, 30 + step], 1, old))
    assert caught == [] and [deferred_extend.pending(r) for r in old] == [most - 1] * 2
    joined = SimpleNamespace(kv=SimpleNamespace(req_pool_idx=9))  # a prefill left it nothing pending
    wrapped(drafter, *_step([3, 5, 9], [27, 37, 12], 2, old + [joined]))
    assert caught[0] == ([most - 1, most - 1], f"at {most} tokens")  # only the two behind
    assert [deferred_extend.pending(r) for r in old + [joined]] == [2, 2, 2]


def test_an_off_step_of_several_tokens_that_reaches_stocks_width_one_extend_is_stopped_as_ours():
    """Where the drafter keeps stock's extend (here: no aux rows), an off step of 2 tokens would be fed to an
    extend that takes one a request: stopped with this package's error, not served wrong; one token passes."""
    from types import SimpleNamespace

    drafter = _Drafter()
    calls = []
    wrapped = deferred_extend._deferring(lambda *args, **kwargs: calls.append(args) or "stock's", 8, audit=False)
    request = SimpleNamespace(kv=SimpleNamespace(req_pool_idx=1))
    batch, result = _step([1], [10], 2, [request])
    result.logits_output.hidden_states = None
    with pytest.raises(RuntimeError, match="this package's fault"):
        wrapped(drafter, batch, result)
    batch, result = _step([1], [10], 1, [request])
    result.logits_output.hidden_states = None
    assert wrapped(drafter, batch, result) == "stock's" and len(calls) == 1
