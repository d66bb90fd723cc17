"""Our SGLang draft class against the plain-PyTorch reference drafter, on CPU.

A drafter is loaded the way SGLang loads it (normalised config -> model class -> load_weights ->
the worker's embedding/head sharing) and run for a prefill on target aux states and one decode
step on the carried hidden state by :class:`~sglang_eagle_ext.sglang.draft_forward.DraftRunner`
(SGLang's paged KV cache, ``torch_native`` attention); logits, carried states and the
draft-to-target token map must match the reference. Needs stock SGLang importable (the CPU shims
installed) and SGLang's single-process distributed state initialised; every SGLang import is
inside a function for that reason.
"""

from __future__ import annotations

import torch

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.drafter.target import TargetInfo
from sglang_eagle_ext.reference.drafter import DraftCache
from sglang_eagle_ext.sglang.draft_forward import (TOKENS, DraftRunner, attention_kit, share_target_tensors,
                                                   worker_inputs)


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
