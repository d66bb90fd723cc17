"""Run one SGLang draft model forward on CPU with SGLang's own attention-test kit.

A real ``ForwardBatch`` over a real paged KV pool (one slot per draft layer) and the
``torch_native`` attention backend; the drafter's input hidden states are set the way the EAGLE
worker sets them (``spec_info.hidden_states``).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

CONTEXT = 64


class DraftRunner:
    """A KV pool sized for ``spec`` plus the attention backend, shared by consecutive forwards."""

    def __init__(self, spec):
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.test.kits.attention_unittest.attention_methods import dense_attention as kit

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
