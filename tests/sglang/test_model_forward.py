"""Our SGLang draft class, built with SGLang's layers, against the plain-PyTorch reference drafter.

Every checkpoint dialect (F1-F12, F14 of the format catalogue) is loaded through SGLang's path
(normalised config -> model class -> load_weights) and run for a prefill on target aux states
followed by a decode step on the carried hidden state, over SGLang's paged KV cache; logits and
carried states must match the reference to fp32 rounding.
"""

import os

import pytest
import torch

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.errors import DrafterError
from sglang_eagle_ext.reference.drafter import DraftCache, ReferenceDrafter
from sglang_eagle_ext.drafter.target import read_target
from sglang_eagle_ext.testing import fixtures

TOKENS = 5


def target_for(name: str):
    config = fixtures.target_config(hidden=96 if "cross-width" in name else 64)
    config["model_type"] = "gpt_oss" if "gpt-oss" in name else "llama"
    return read_target(config)


def build_draft(directory: str, target):
    """Our model exactly as SGLang builds it: normalised config, class, load_weights, sharing."""
    from sglang_eagle_ext.sglang.compat.config_loading import DraftConfigLoader
    from sglang_eagle_ext.sglang.model import LlamaForCausalLMEagle3

    loader = DraftConfigLoader(original=None)
    loader.target = target
    model = LlamaForCausalLMEagle3(loader(directory))
    model.load_weights(iter(()))
    return model


@pytest.mark.parametrize("name", sorted(fixtures.FIXTURES))
def test_forward_matches_reference(name, tmp_path, sglang_dist, no_grad):
    from tests.sglang.draft_forward import DraftRunner
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    directory = fixtures.build(name, str(tmp_path / "drafter"), seed=hash(name) % 1000)
    target = target_for(name)
    checkpoint = read_drafter(directory, target=target)
    spec = checkpoint.spec
    model = build_draft(directory, target)
    gen = torch.Generator().manual_seed(len(name))
    target_embed = torch.randn(spec.vocab_size, spec.hidden_size, generator=gen) * 0.5
    target_head = torch.randn(spec.vocab_size, spec.hidden_size, generator=gen) * 0.3
    # what SGLang's EAGLE worker does after loading the draft
    if model.load_lm_head_from_target:
        model.set_embed_and_head(target_embed, target_head)
    else:
        model.set_embed(target_embed)
    reference = ReferenceDrafter.from_tensors(spec, checkpoint.load_tensors(),
                                              target_embed=target_embed, target_lm_head=target_head)

    width = spec.fc_in_features if spec.use_aux_hidden_state else spec.hidden_size
    ids = torch.randint(0, spec.vocab_size, (TOKENS + 1,), generator=gen)
    aux = torch.randn(TOKENS, width, generator=gen)
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


def test_own_embedding_is_kept_and_missing_one_is_shared(tmp_path, sglang_dist, no_grad):
    """speculators checkpoints carry embed_tokens: the target's must not replace it."""
    own = build_draft(fixtures.build("F6-speculators", str(tmp_path / "own")), target_for("F6"))
    before = own.model.embed_tokens.weight.clone()
    own.set_embed(torch.randn_like(before))
    assert torch.equal(own.model.embed_tokens.weight, before)

    shared = build_draft(fixtures.build("F1-specforge", str(tmp_path / "shared")), target_for("F1"))
    embed = torch.randn_like(shared.model.embed_tokens.weight)
    shared.set_embed(embed)
    assert shared.model.embed_tokens.weight is embed


def test_unknown_tensor_is_an_error(tmp_path, sglang_dist, no_grad, monkeypatch):
    from sglang_eagle_ext.drafter.reader import DrafterCheckpoint

    model = build_draft(fixtures.build("F1-specforge", str(tmp_path / "d")), target_for("F1"))
    stream = DrafterCheckpoint.tensors

    def with_extra(self, dtype=None):
        yield from stream(self, dtype)
        yield "layers.0.self_attn.r_proj.weight", torch.randn(4, 4, generator=torch.Generator().manual_seed(0))

    monkeypatch.setattr(DrafterCheckpoint, "tensors", with_extra)
    with pytest.raises(DrafterError, match="r_proj"):
        model.load_weights(iter(()))


def test_missing_tensor_is_an_error(tmp_path, sglang_dist, no_grad, monkeypatch):
    from sglang_eagle_ext.drafter.reader import DrafterCheckpoint

    model = build_draft(fixtures.build("F7-speculators-2-layers", str(tmp_path / "d")), target_for("F7"))
    stream = DrafterCheckpoint.tensors

    def without_k(self, dtype=None):
        yield from ((name, t) for name, t in stream(self, dtype) if name != "layers.1.self_attn.k_proj.weight")

    monkeypatch.setattr(DrafterCheckpoint, "tensors", without_k)
    with pytest.raises(DrafterError, match=r"layers\.1\.self_attn\.qkv_proj\.weight.*unloaded"):
        model.load_weights(iter(()))


def test_draft_window_option_reaches_every_layer(tmp_path, sglang_dist, no_grad, monkeypatch):
    """``--speculative-draft-window-size`` bounds every draft layer's attention, as upstream's class
    does, and is reported to the attention backend; without it the checkpoint's own windows hold."""
    import types

    from sglang.srt import runtime_context, server_args

    from sglang_eagle_ext.sglang.compat import runtime

    window = int(torch.randint(8, 64, ()).item())
    directory = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    monkeypatch.setattr(runtime_context, "get_spec",
                        lambda: types.SimpleNamespace(speculative_draft_window_size=window))
    model = build_draft(directory, target_for("F7"))
    assert len(model.model.layers) == 2
    assert [layer.self_attn.attn.sliding_window_size for layer in model.model.layers] == [window] * 2
    assert model.get_attention_sliding_window_size() == window

    # releases before the runtime context (0.5.12 - 0.5.16) keep the option in the global args
    monkeypatch.setattr(runtime, "_runtime_context", lambda: None)
    monkeypatch.setattr(server_args, "get_global_server_args",
                        lambda: types.SimpleNamespace(speculative_draft_window_size=window + 1), raising=False)
    assert runtime.draft_window_size() == window + 1

    monkeypatch.undo()
    unset = build_draft(directory, target_for("F7"))
    assert [layer.self_attn.attn.sliding_window_size for layer in unset.model.layers] == [-1, -1]
    assert unset.get_attention_sliding_window_size() is None
