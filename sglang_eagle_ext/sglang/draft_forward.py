"""A loaded drafter's forward through SGLang's own attention code on a CPU, as the EAGLE worker
feeds it: what the stock check (:mod:`.stock_check`) runs stock's model on and compares with the
reference drafter (:mod:`sglang_eagle_ext.reference.drafter`).

A prefill on target aux states and decode steps on the carried hidden state run over SGLang's
paged KV cache with the ``torch_native`` attention backend, on the batches of SGLang's
attention-backend test kit. Needs stock SGLang importable (the CPU shims installed) and SGLang's
single-process distributed state initialised; every SGLang import is inside a function for that
reason.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from sglang_eagle_ext.reference.drafter import ReferenceDrafter

CONTEXT = 64  # KV slots: enough for the prefill and the decode step
TOKENS = 5  # prefill length


def attention_kit():
    """SGLang's attention test kit, which the forwards run on; an error on releases without it."""
    from sglang_eagle_ext.sglang.compat import releases, runtime

    kit = runtime.attention_test_kit()
    if kit is None:
        raise RuntimeError(f"SGLang {releases.installed_release()} ships no attention test kit "
                           f"({releases.ATTENTION_TEST_KIT.releases}), which this harness runs on")
    return kit


class DraftRunner:
    """A KV pool sized for ``spec`` plus the attention backend, shared by consecutive forwards.

    The batch is SGLang's own attention-test kit's; the drafter's input hidden states are set the
    way the EAGLE worker sets them (``spec_info.hidden_states``).
    """

    def __init__(self, spec):
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        kit = attention_kit()
        self.kit, self.spec = kit, spec
        case = self.case(ForwardMode.EXTEND, prefix=0, new=1)
        self.runner = kit.MockModelRunner(
            case=case, model_config=kit.TinyModelConfig(
                num_heads=spec.num_attention_heads, num_kv_heads=spec.num_key_value_heads,
                head_dim=spec.head_dim, hidden_size=spec.hidden_size, context_len=CONTEXT),
            dtype=torch.float32, device="cpu", max_context_len=CONTEXT, head_dim=spec.head_dim)
        self.runner.token_to_kv_pool = MHATokenToKVPool(
            size=CONTEXT + 1, page_size=1, dtype=torch.float32, head_num=spec.num_key_value_heads,
            head_dim=spec.head_dim, layer_num=spec.num_layers, device="cpu",
            enable_memory_saver=False, enable_alt_stream=False)
        self.backend = ATTENTION_BACKENDS["torch_native"](self.runner)

    def case(self, mode, prefix: int, new: int):
        return self.kit.DenseAttentionCase(
            name="draft", backend="torch_native", forward_mode=mode,
            num_heads=self.spec.num_attention_heads, num_kv_heads=self.spec.num_key_value_heads,
            page_size=1, prefix_lens=(prefix,), extend_lens=(new,))

    def forward(self, model, mode, input_ids: torch.Tensor, hidden: torch.Tensor, prefix: int):
        """``input_ids [T]`` after ``prefix`` cached tokens; returns the LogitsProcessorOutput."""
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        batch = self.kit._make_forward_batch(self.case(mode, prefix, len(input_ids)), self.runner,
                                             max_context_len=CONTEXT, device="cpu")
        batch.input_ids = input_ids
        batch.spec_info = SimpleNamespace(hidden_states=hidden)
        batch.attn_backend = self.backend
        batch.return_logprob = False
        batch.capture_hidden_mode = CaptureHiddenMode.FULL
        with forward_context(ForwardContext(attn_backend=self.backend)):
            self.backend.init_forward_metadata(batch)
            return model(batch.input_ids, batch.positions, batch)


def worker_inputs(checkpoint, gen):
    """The target's embedding and lm_head as SGLang's EAGLE worker hands them to a loaded draft, the
    reference drafter on the same tensors, and seeded prompt ids (``TOKENS + 1``) and aux states
    (``TOKENS``) for a prefill and one decode step: ``(reference, embed, head, ids, aux)``.

    The target's tensors are seeded stand-ins, except the embedding of a drafter that carries its
    own ``embed_tokens``: producers copy the target's and keep it frozen, so that copy is what the
    worker's sharing puts in its place (the head is shared only with a drafter that has none).
    Everything runs in float32, as SGLang's model does on the CPU, whatever dtype the checkpoint
    was saved in (SpecForge and AngelSlim save bf16)."""
    tensors = checkpoint.load_tensors(torch.float32)
    spec = checkpoint.spec
    embed = torch.randn(spec.vocab_size, spec.hidden_size, generator=gen) * 0.5
    head = torch.randn(spec.vocab_size, spec.hidden_size, generator=gen) * 0.3
    embed = tensors.get("embed_tokens.weight", embed)
    reference = ReferenceDrafter.from_tensors(spec, tensors, target_embed=embed, target_lm_head=head)
    width = spec.fc_in_features if spec.use_aux_hidden_state else spec.hidden_size
    ids = torch.randint(0, spec.vocab_size, (TOKENS + 1,), generator=gen)
    aux = torch.randn(TOKENS, width, generator=gen)
    return reference, embed, head, ids, aux


def share_target_tensors(model, embed: torch.Tensor, head: torch.Tensor) -> None:
    """What SGLang's EAGLE worker does once the draft is loaded: the target's embedding, and its
    lm_head where the draft asks for it, replace the draft's."""
    if getattr(model, "load_lm_head_from_target", False):
        model.set_embed_and_head(embed, head)
    else:
        model.set_embed(embed)
