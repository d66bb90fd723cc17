"""Speculation "off" as plain decoding (issue 39; ``docs/adaptive-shape.md`` section 12), SGLang 0.5.23.

At depth 0 stock's adaptive mode still verifies: the previous bonus token goes through the target in
``TARGET_VERIFY`` mode at width 1 (the extend attention kernel with a tree mask) and the verify's
sampler picks the next one. On a target whose speculation loses to plain decoding, "off" must cost what a
plain decode step costs. This module replaces that width-1 verify, and only it, by the target's ordinary
``DECODE`` forward and SGLang's own sampler (``ModelRunner.sample``), returning what the verify returns
at width 1: accept length 1, the sampled token as the next bonus token, sequence lengths + 1, and the
target's EAGLE-3 aux hidden states of the step (SGLang's Llama captures them in every mode,
``models/llama.py`` ``LlamaModel.forward``; ``CaptureHiddenMode.FULL`` packs them as the verify's do).
The worker's own code does the rest as at depth 0: it publishes the new lengths, runs the drafter's
width-1 extend (so the drafter's KV, hidden row and top-k stay current and a later depth >= 1 drafts
warm), and returns the result to the scheduler.

What stays stock's (:func:`stock_reason` names why, per batch): grammar, log-probs, returned hidden
states, penalties (frequency, presence, repetition, min-new-tokens), custom logit processors,
watermarks, pipeline or attention-DP parallelism, multimodal rope positions, hybrid (mamba, GDN) models,
hierarchical sparse attention:
their hooks live inside the verify (``eagle_utils.eagle_sample``, ``eagle_worker_common.run_eagle_verify``)
or are applied differently by the plain sampler, so only stock's verify keeps their semantics.

CUDA graphs: under speculation the target's graph runner holds ``TARGET_VERIFY`` graphs only, and its
``can_run_graph`` would accept a ``DECODE`` batch (it checks the batch size, not the mode), so the plain
forward never replays it. Where the target's decode is graphed, :data:`OFF_SWITCH` ``plain`` (the default)
captures the target's own ``DECODE`` graphs beside depth 0's state (:mod:`.off_graphs`) and replays them
for the plain step, a batch above their largest size keeping stock's graphed width-1 verify; where the
target decodes eagerly anyway (CUDA graphs disabled, e.g. on a CPU) the plain step runs eagerly. ``eager``
runs the plain step eagerly under graphs too (for measuring the graphs against it), ``stock`` never takes
it.

Counts reach the log as ``adaptive off: N steps by plain decoding`` and ``adaptive off: N steps by
stock's width-1 verify (REASON)`` when a count reaches a power of two (a handful of lines per run), so a
test can see which path ran.
"""

from __future__ import annotations

import contextlib
import functools
import sys

from sglang_eagle_ext import env
from sglang_eagle_ext.sglang.compat import off_graphs, releases
from sglang_eagle_ext.sglang.compat.patch import Target, require, wrap_method

OFF_SWITCH = "SGLANG_EAGLE_EXT_ADAPTIVE_OFF"
OFF_MODES = ("plain", "eager", "stock")
# tokens a request an off step makes by plain decoding (docs/adaptive-shape.md section 21): each a DECODE forward
# of the one before, so that the speculative worker's and the scheduler's work of a step is shared by them
TOKENS_SWITCH = "SGLANG_EAGLE_EXT_ADAPTIVE_OFF_TOKENS"
MOST_TOKENS = 8
RELEASES = releases.PLAIN_OFF.releases
_WORKER = "sglang.srt.speculative.eagle_worker_v2"

# The call replaced: at depth 0 the decode branch builds the width-1 input and verifies it, then publishes
# and runs the draft extend from the verify's result (which therefore must be verify-shaped)
SEAMS = (Target(RELEASES, _WORKER, "EAGLEWorkerV2", "verify", params=("self", "batch"),
                keywords=("pp_proxy_tensors", "grammar_barrier")),
         Target(RELEASES, _WORKER, "EAGLEWorkerV2", "forward_batch_generation",
                reads=("self._build_trivial_verify_input", "self.verify", "self.speculative_num_steps",
                       "new_seq_lens", "self.draft_worker._draft_extend_for_decode")),
         # the width-1 input: an EagleVerifyInput of the previous bonus tokens, spec_steps=0, draft_token_num=1
         # (keywords of its call, which the check cannot see; is_width_one_verify reads them back)
         Target(RELEASES, _WORKER, "EAGLEWorkerV2", "_build_trivial_verify_input",
                reads=("bonus_tokens", "EagleVerifyInput")),
         # what the draft extend reads of the result and the batch (seq lens before the step, the verify's slots)
         Target(RELEASES, _WORKER, "EagleDraftWorker", "_draft_extend_for_decode",
                reads=("accept_lens", "next_token_ids", "logits_output.hidden_states", "next_draft_input")),
         Target(RELEASES, "sglang.srt.speculative.eagle_worker_common", "prepare_for_draft_extend",
                reads=("batch.seq_lens", "batch.forward_mode")),
         # where the width-1 verify writes the token's KV: req_to_token[request, seq_len]; it also prepares
         # hierarchical sparse attention's buffers (a fallback)
         Target(RELEASES, "sglang.srt.speculative.eagle_utils", "eagle_prepare_for_verify",
                reads=("assign_extend_cache_locs_uniform_func", "req_to_token", "batch.seq_lens",
                       "batch.hisparse_coordinator")),
         Target(RELEASES, "sglang.srt.model_executor.forward_batch_info", "ForwardBatch", "init_new",
                params=("cls", "batch", "model_runner"),
                keywords=("capture_hidden_mode", "return_hidden_states_before_norm")),
         # the target forward without sampling (is_verify), then SGLang's sampler
         Target(RELEASES, "sglang.srt.managers.tp_worker", "TpModelWorker", "forward_batch_generation",
                params=("self", "batch", "forward_batch"), keywords=("is_verify",)),
         Target(RELEASES, "sglang.srt.model_executor.model_runner", "ModelRunner", "sample",
                params=("self", "logits_output", "forward_batch")),
         # the graph runner detached for the plain forward: _forward_raw replays it only when it is set
         Target(RELEASES, "sglang.srt.model_executor.model_runner", "ModelRunner", "_forward_raw",
                reads=("self.decode_cuda_graph_runner",)),
         # EAGLE-3's aux states captured whatever the forward mode
         Target(RELEASES, "sglang.srt.models.llama", "LlamaModel", "forward", reads=("self.layers_to_capture",)),
         # stock's verify waits on the grammar barrier only for a batch with a grammar
         Target(RELEASES, "sglang.srt.speculative.eagle_worker_common", "run_eagle_verify",
                reads=("batch.has_grammar", "grammar_barrier")),
         # the fallbacks' tests: hybrid models as stock detects them, parallelism, a graphed target decode
         Target(RELEASES, "sglang.srt.configs.hybrid_arch", "mambaish_config"),
         Target(RELEASES, "sglang.srt.runtime_context", "get_parallel"),
         Target(RELEASES, "sglang.srt.model_executor.runner.eager_runner", "EagerRunner"),
         Target(RELEASES, "sglang.srt.managers.utils", "GenerationBatchResult"),
         # the KV slots a decode step reserves a request: how many tokens an off step may make
         Target(RELEASES, "sglang.srt.mem_cache.allocation_sizing", "get_alloc_len_per_decode"),
         Target(RELEASES, "sglang.srt.speculative.eagle_info", "EagleDraftInput"))


def selected() -> str:
    return env.choice(OFF_SWITCH, OFF_MODES, "plain")


def selected_tokens() -> int:
    """Tokens a request an off step makes (1, the default: one, as stock's width-1 verify does)."""
    value = env.text(TOKENS_SWITCH)
    if value is None:
        return 1
    if not value.isdigit() or not 1 <= int(value) <= MOST_TOKENS:
        raise env.SwitchError(f"{TOKENS_SWITCH}={value!r}: expected the tokens a request an off step makes by plain "
                              f"decoding, 1 to {MOST_TOKENS} (unset: 1)")
    return int(value)


def bind(worker_module, mode: str, tokens: int = 1) -> str:
    """Wrap ``EAGLEWorkerV2.verify``; the phrase of the activation line that says what "off" runs."""
    if mode == "stock":
        return f"off: stock's width-1 verify ({OFF_SWITCH}=stock)"
    release = releases.installed_release()
    if not releases.PLAIN_OFF.holds(release):
        return f"off: stock's width-1 verify (plain decoding as off is built for SGLang {RELEASES}; this is {release})"
    verify = SEAMS[0]
    require(hasattr(getattr(worker_module, verify.name, None), verify.member), verify.path)
    wrap_method(getattr(worker_module, verify.name), verify.member,
                functools.partial(_plain_when_off, mode=mode, tokens=tokens))
    several = f", {tokens} tokens a request a step ({TOKENS_SWITCH})" if tokens > 1 else ""
    if mode == "eager":
        return f"off: plain decoding{several}, eager even under CUDA graphs ({OFF_SWITCH}=eager)"
    off_graphs.bind(worker_module)
    return f"off: plain decoding{several}, by the target's own decode graphs where its decode is graphed"


def at_power_of_two(count: int) -> bool:
    """Whether a running count is due in the log: at powers of two, a handful of lines a run however long."""
    return count & (count - 1) == 0


class OffCounts:
    """Steps at depth 0 by path, logged when a count reaches a power of two."""

    def __init__(self, log=None):
        self.counts: dict[str, int] = {}
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))

    def add(self, path: str) -> None:
        count = self.counts.get(path, 0) + 1
        self.counts[path] = count
        if at_power_of_two(count):
            self._log(f"sglang-eagle-ext: adaptive off: {count} step{'s' if count > 1 else ''} by {path}")


COUNTS = OffCounts()
PLAIN = "plain decoding"


def _plain_when_off(original, mode: str, tokens: int):
    @functools.wraps(original)
    def verify(self, batch, pp_proxy_tensors=None, grammar_barrier=None):
        if not is_width_one_verify(self, batch):
            return original(self, batch, pp_proxy_tensors=pp_proxy_tensors, grammar_barrier=grammar_barrier)
        # the overlap scheduler hands every EAGLE decode batch a grammar barrier, grammar or not; stock uses it
        # only when the batch has a grammar (run_eagle_verify), so its presence decides nothing here
        reason = stock_reason(self, batch, pp_proxy_tensors, graphs_only=mode == "plain")
        if reason is not None:
            COUNTS.add(f"stock's width-1 verify ({reason})")
            return original(self, batch, pp_proxy_tensors=pp_proxy_tensors, grammar_barrier=grammar_barrier)
        COUNTS.add(PLAIN)
        return plain_decode_step(self, batch, tokens)
    return verify


def is_width_one_verify(worker, batch) -> bool:
    """The verify of depth 0's input (stock's ``_build_trivial_verify_input``: no drafts, one token a
    request) on a batch with requests."""
    spec = batch.spec_info
    return (worker.speculative_num_steps == 0 and not batch.forward_mode.is_idle()
            and getattr(spec, "spec_steps", None) == 0 and getattr(spec, "draft_token_num", None) == 1)


def stock_reason(worker, batch, pp_proxy_tensors, graphs_only: bool) -> str | None:
    """Why this depth-0 batch keeps stock's width-1 verify; ``None`` when plain decoding may serve it.
    ``graphs_only``: where the target's decode is graphed, only by the plain decode graphs."""
    runner = worker.target_worker.model_runner
    info = batch.sampling_info
    if graphs_only and _graphed(runner.decode_cuda_graph_runner):
        graphs = off_graphs.for_worker(worker)
        if graphs is None:
            return "the target's decode is graphed; its plain decode graphs are not captured"
        if not off_graphs.can_serve(graphs, batch.seq_lens.shape[0]):
            return "a batch above the plain decode graphs' largest"
    if batch.has_grammar:
        return "grammar"
    if batch.return_logprob:
        return "log-probs"
    if batch.return_hidden_states:
        return "returned hidden states"
    if any(has_penalty(request.sampling_params) for request in batch.reqs):
        return "penalties"
    if info is None or info.has_custom_logit_processor or getattr(info, "has_watermark_candidates", False):
        return "custom logit processor or watermark"
    if pp_proxy_tensors is not None:
        return PARALLELISM
    if batch.hisparse_coordinator is not None:
        return "hierarchical sparse attention"  # the verify prepares and commits its buffers
    return engine_reason(worker)


PARALLELISM = "pipeline or attention-DP parallelism"
_ENGINE_REASON = "_sglang_eagle_ext_engine_reason"  # on the worker: engine_reason's answer, once read


def engine_reason(worker) -> str | None:
    """What keeps every depth-0 batch of this engine on stock's width-1 verify, or ``None``: its parallelism and its
    target's kind, which do not change while it serves. Read at the first step and kept on the worker: reading a
    config for hybrid layers walks it attribute by attribute, a cost an off step bound by the host feels
    (``docs/adaptive-shape.md`` section 18)."""
    known = getattr(worker, _ENGINE_REASON, False)
    if known is not False:
        return known
    from sglang.srt.configs.hybrid_arch import mambaish_config
    from sglang.srt.runtime_context import get_parallel

    model_config = worker.target_worker.model_runner.model_config
    parallel = get_parallel()
    reason = None
    if parallel.pp_size > 1 or parallel.attn_dp_size > 1:
        reason = PARALLELISM
    elif model_config.model_is_mrope or mambaish_config(model_config) is not None:
        reason = "multimodal rope or hybrid state"  # the verify commits a hybrid model's state (mamba, GDN)
    setattr(worker, _ENGINE_REASON, reason)
    return reason


def has_penalty(params) -> bool:
    """SGLang's penalizers for one request's sampling parameters: frequency, presence, repetition,
    min-new-tokens (``sampling/penaltylib``)."""
    return bool(params.frequency_penalty or params.presence_penalty or params.repetition_penalty != 1.0
                or params.min_new_tokens)


def _graphed(runner) -> bool:
    from sglang.srt.model_executor.runner.eager_runner import EagerRunner

    return runner is not None and not isinstance(runner, EagerRunner)


@contextlib.contextmanager
def _decode_runner_detached(model_runner):
    """No graph runner while the plain forward runs: the one attached replays ``TARGET_VERIFY`` graphs,
    and ``ModelRunner._forward_raw`` replays whatever runner is set and says it can run the batch."""
    attached = model_runner.decode_cuda_graph_runner
    model_runner.decode_cuda_graph_runner = None
    try:
        yield
    finally:
        model_runner.decode_cuda_graph_runner = attached


# the ScheduleBatch fields the plain forward batch is built from and the draft extend then reads as the
# verify left them (lengths before the step, the draft input)
_RESTORED = ("seq_lens", "seq_lens_cpu", "seq_lens_sum", "spec_info")


def plain_decode_step(worker, batch, tokens: int = 1):
    """``tokens`` DECODE forwards of the target, each of the token the one before sampled (the first of the
    previous bonus tokens), with SGLang's sampling, as a verify result whose every token is accepted: accept
    length ``tokens`` a request, the last sampled token as next bonus token, the aux hidden states of each forward
    in order (the drafter's extend reads a row a token). As many as :func:`step_tokens` allows."""
    import torch
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    model_runner = worker.target_worker.model_runner
    seq_lens = batch.seq_lens
    requests = seq_lens.shape[0]
    tokens = step_tokens(worker, tokens)
    # the slots the forwards write: the request's next reserved ones, from its pre-step length
    req_to_token = worker.req_to_token_pool.req_to_token
    graphs = off_graphs.for_worker(worker)  # captured only where depth 0's target decode is graphed
    target = (off_graphs.serving(model_runner, graphs) if off_graphs.can_serve(graphs, requests)
              else _decode_runner_detached(model_runner))
    drawn, rows, forward_batches = [], [], []
    made = batch.spec_info.draft_token
    with target:  # the forward batches too are built against the runner and backend the forwards use
        for k in range(tokens):
            slots = req_to_token[batch.req_pool_indices, seq_lens + k].to(torch.int64)
            forward_batch = _plain_forward_batch(batch, model_runner, made, slots, offset=k)
            forward = worker.target_worker.forward_batch_generation(batch=None, forward_batch=forward_batch,
                                                                    is_verify=True)  # is_verify: not sampled yet
            made = model_runner.sample(forward.logits_output, forward_batch).to(torch.int32)
            drawn.append(made)
            forward_batches.append(forward_batch)
            if tokens > 1 and forward.logits_output.hidden_states is not None:
                # a graph's output rows: the next replay overwrites them
                rows.append(forward.logits_output.hidden_states.clone())
            if forward.routed_experts_output is not None or forward.indexer_topk_output is not None:
                break  # a step's routing or indexer output is one forward's: one token
    tokens = len(drawn)
    logits_output = forward.logits_output
    if tokens > 1 and rows:
        logits_output.hidden_states = torch.stack(rows, dim=1).flatten(0, 1)
    return GenerationBatchResult(
        logits_output=logits_output,
        next_token_ids=torch.stack(drawn, dim=1).flatten() if tokens > 1 else made,
        can_run_cuda_graph=forward.can_run_cuda_graph,
        speculative_num_draft_tokens=tokens,
        next_draft_input=EagleDraftInput(bonus_tokens=made),
        accept_lens=torch.full((requests,), tokens, dtype=torch.int32, device=made.device),
        accept_index=torch.arange(requests * tokens, dtype=torch.int32, device=made.device).view(requests, tokens),
        new_seq_lens=seq_lens + tokens,
        routed_experts_output=forward.routed_experts_output,
        indexer_topk_output=forward.indexer_topk_output,
        extra_keep_alive_refs=forward_batches,
    )


_STEP_TOKENS = "_sglang_eagle_ext_off_step_tokens"  # on the worker: step_tokens' answer, once read


def step_tokens(worker, asked: int) -> int:
    """Tokens a request this engine's off steps make, of the ``asked``: one where its drafter keeps stock's
    per-step extend (which takes one; ``deferred_extend.deferral_reason``), at most the KV slots a decode step
    reserves a request beyond its length (SGLang's ``get_alloc_len_per_decode``: at depth 0 the draft-token bound
    of the set's largest shape). Engine facts: read at the first off step and kept on the worker; a smaller
    answer is logged once, with its reason."""
    if asked == 1:
        return 1
    known = getattr(worker, _STEP_TOKENS, None)
    if known is None:
        from sglang.srt.mem_cache.allocation_sizing import get_alloc_len_per_decode

        # here, not at the top: deferred_extend imports this module (engine_reason, at_power_of_two)
        from sglang_eagle_ext.sglang.compat.deferred_extend import deferral_reason

        reason = deferral_reason(worker.draft_worker)
        reserved = get_alloc_len_per_decode()
        known = 1 if reason is not None else min(asked, reserved)
        if known < asked:
            why = (f"the drafter's extend is not deferred on this engine ({reason})" if reason is not None
                   else f"a decode step reserves {reserved} KV slots a request")
            print(f"sglang-eagle-ext: off: {known} token{'s' if known > 1 else ''} a request a step, not {asked} "
                  f"({TOKENS_SWITCH}): {why}", file=sys.stderr, flush=True)
        setattr(worker, _STEP_TOKENS, known)
    return known


def _plain_forward_batch(batch, model_runner, input_ids, slots, offset: int = 0):
    """SGLang's ``ForwardBatch`` of a decode step of ``input_ids`` into ``slots``, ``offset`` tokens past the
    verify's position, built from the schedule batch, whose fields are put back at once (the draft extend reads
    them as the verify left them)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    seq_lens = batch.seq_lens
    requests = seq_lens.shape[0]
    saved = {name: getattr(batch, name) for name in _RESTORED}
    grown = offset + 1
    try:
        # a decode batch counts the input token in its lengths (positions = lengths - 1 = the verify's + offset)
        batch.forward_mode = ForwardMode.DECODE
        batch.input_ids = input_ids
        batch.out_cache_loc = slots
        batch.spec_info = None  # the attention backend then plans an ordinary decode
        batch.seq_lens = seq_lens + grown
        batch.seq_lens_cpu = None if saved["seq_lens_cpu"] is None else saved["seq_lens_cpu"] + grown
        batch.seq_lens_sum = None if saved["seq_lens_sum"] is None else saved["seq_lens_sum"] + requests * grown
        return ForwardBatch.init_new(batch, model_runner, capture_hidden_mode=off_graphs.step_hidden_mode(model_runner),
                                     return_hidden_states_before_norm=False)
    finally:
        for name, value in saved.items():
            setattr(batch, name, value)
