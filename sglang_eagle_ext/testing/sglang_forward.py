"""Our SGLang draft class against the plain-PyTorch reference drafter, on CPU.

A drafter is loaded the way SGLang loads it (normalised config -> model class -> load_weights ->
the worker's embedding/head sharing) and run for a prefill on target aux states and one decode
step on the carried hidden state, over SGLang's paged KV cache with the ``torch_native``
attention backend; logits, carried states and the draft-to-target token map must match the
reference. Needs stock SGLang importable (the CPU shims installed) and SGLang's single-process
distributed state initialised; every SGLang import is inside a function for that reason.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.drafter.target import TargetInfo
from sglang_eagle_ext.reference.drafter import DraftCache, ReferenceDrafter

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


def build_draft(directory: str, target: TargetInfo):
    """Our model exactly as SGLang builds it: normalised config, class, load_weights, sharing."""
    from sglang_eagle_ext.sglang.compat.config_loading import DraftConfigLoader
    from sglang_eagle_ext.sglang.compat.runtime import publish_default_server_args
    from sglang_eagle_ext.sglang.model import LlamaForCausalLMEagle3

    publish_default_server_args()  # what a server publishes before it builds the draft
    loader = DraftConfigLoader(original=None)
    loader.target = target
    model = LlamaForCausalLMEagle3(loader(directory))
    model.load_weights(iter(()))
    return model


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


def assert_forward_matches_reference(directory: str, target: TargetInfo, seed: int) -> None:
    """Prefill and one decode step of the SGLang-loaded drafter at ``directory`` equal the
    reference drafter's (fp32 rounding), and so do their draft-to-target token maps; every
    random input comes from ``seed``."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    attention_kit()  # before anything is built
    checkpoint = read_drafter(directory, target=target)
    spec = checkpoint.spec
    model = build_draft(directory, target)
    reference, embed, head, ids, aux = worker_inputs(checkpoint, torch.Generator().manual_seed(seed))
    share_target_tensors(model, embed, head)
    runner = DraftRunner(spec)
    prefill = runner.forward(model, ForwardMode.EXTEND, ids[:TOKENS], aux, prefix=0)
    cache = DraftCache()
    expected = reference(ids[None, :TOKENS], torch.arange(TOKENS), aux=aux[None], cache=cache)
    vocab = spec.draft_vocab_size  # SGLang pads the head to a multiple of 64
    torch.testing.assert_close(prefill.next_token_logits[0, :vocab], expected.logits[0, -1],
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(prefill.hidden_states, expected.carried[0], rtol=1e-5, atol=1e-5)

    carried = prefill.hidden_states[-1:]
    decode = runner.forward(model, ForwardMode.DECODE, ids[TOKENS:], carried, prefix=TOKENS)
    expected = reference(ids[None, TOKENS:], torch.tensor([TOKENS]), carried=carried[None], cache=cache)
    torch.testing.assert_close(decode.next_token_logits[0, :vocab], expected.logits[0, -1],
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(decode.hidden_states, expected.carried[0], rtol=1e-5, atol=1e-5)

    if spec.has_vocab_map:
        draft_ids = torch.arange(spec.draft_vocab_size)
        assert torch.equal(model.get_hot_token_id(), reference.to_target_ids(draft_ids))
    else:
        assert model.get_hot_token_id() is None
