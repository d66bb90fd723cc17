"""Our SGLang draft class, built with SGLang's layers, against the plain-PyTorch reference drafter.

Every checkpoint dialect (F1-F12, F14 of the format catalogue) is loaded through SGLang's path
and compared with the reference by :func:`sglang_forward.assert_forward_matches_reference`
(prefill on target aux states, a decode step on the carried hidden state, SGLang's paged KV cache;
logits and carried states equal to fp32 rounding).
"""

import zlib

import pytest
import torch

from sglang_eagle_ext.errors import DrafterError
from sglang_eagle_ext.drafter.target import read_target
from tests.kit import fixtures
from tests.kit.sglang_forward import assert_forward_matches_reference, build_draft


def target_for(name: str):
    config = fixtures.target_config(hidden=96 if "cross-width" in name else 64)
    config["model_type"] = "gpt_oss" if "gpt-oss" in name else "llama"
    return read_target(config)


@pytest.mark.parametrize("name", sorted(fixtures.FIXTURES))
def test_forward_matches_reference(name, tmp_path, sglang_dist, no_grad):
    # the seed is stable across processes
    directory = fixtures.build(name, str(tmp_path / "drafter"), seed=zlib.crc32(name.encode()) % 1000)
    assert_forward_matches_reference(directory, target_for(name), seed=len(name))


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

    from packaging.version import Version

    from sglang_eagle_ext.sglang.compat import releases, runtime

    window = int(torch.randint(8, 64, ()).item())
    directory = fixtures.build("F7-speculators-2-layers", str(tmp_path / "d"))
    monkeypatch.setattr(runtime_context, "get_spec",
                        lambda: types.SimpleNamespace(speculative_draft_window_size=window))
    model = build_draft(directory, target_for("F7"))
    assert len(model.model.layers) == 2
    assert [layer.self_attn.attn.sliding_window_size for layer in model.model.layers] == [window] * 2
    assert model.get_attention_sliding_window_size() == window

    # releases before the runtime context's getters (0.5.12 - 0.5.14) keep the option in the global args
    monkeypatch.setattr(releases, "installed_release", lambda: Version("0.5.13"))
    monkeypatch.setattr(server_args, "get_global_server_args",
                        lambda: types.SimpleNamespace(speculative_draft_window_size=window + 1), raising=False)
    assert runtime.draft_window_size() == window + 1

    monkeypatch.undo()
    unset = build_draft(directory, target_for("F7"))
    assert [layer.self_attn.attn.sliding_window_size for layer in unset.model.layers] == [-1, -1]
    assert unset.get_attention_sliding_window_size() is None
