"""Aux hidden-state capture against HF transformers' own hidden states, and a full draft step
(target capture -> drafter) for every drafter dialect the checkpoint reader accepts."""

import pytest
import torch

from sglang_eagle_ext.sglang.compat import cpu as cpu_shims
from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.reference.capture import CapturingTarget
from sglang_eagle_ext.reference.drafter import DraftCache, ReferenceDrafter
from tests.kit import fixtures

cpu_shims.install()


def hf_target(family: str, layers: int, hidden: int = 64, vocab: int = 512, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    config_class, model_class = ((Qwen3Config, Qwen3ForCausalLM) if family == "qwen3"
                                 else (LlamaConfig, LlamaForCausalLM))
    config = config_class(hidden_size=hidden, intermediate_size=128, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                          vocab_size=vocab, initializer_range=0.1, tie_word_embeddings=False)
    torch.manual_seed(seed)
    return model_class(config).eval()


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_capture_matches_hf_hidden_states(family):
    depth = 5
    model = hf_target(family, depth, seed=1)
    ids = torch.randint(0, 512, (2, 7), generator=torch.Generator().manual_seed(2))
    indices = (0, 3, 2, depth)  # unsorted on purpose: chunks follow the given order
    with torch.no_grad():
        step = CapturingTarget(model, indices)(ids)
        reference = model(ids, output_hidden_states=True)
    hs = reference.hidden_states
    chunks = step.aux.split(64, dim=-1)
    for chunk, index in zip(chunks[:3], indices[:3]):
        assert torch.equal(chunk, hs[index])
    # HF's last hidden state is after the final norm; index N is the residual before it.
    last = chunks[3]
    assert not torch.allclose(last, hs[depth])
    assert torch.allclose(model.model.norm(last), hs[depth], atol=1e-6)
    assert torch.allclose(step.logits, reference.logits)


def test_capture_with_kv_cache_matches_full_forward():
    model = hf_target("llama", 4, seed=3)
    ids = torch.randint(0, 512, (1, 9), generator=torch.Generator().manual_seed(4))
    target = CapturingTarget(model, (1, 2, 4))
    with torch.no_grad():
        full = target(ids)
        first = target(ids[:, :6], use_cache=True)
        rest = target(ids[:, 6:], past_key_values=first.past_key_values, use_cache=True)
    assert torch.allclose(torch.cat([first.aux, rest.aux], 1), full.aux, atol=1e-5)
    assert torch.allclose(torch.cat([first.logits, rest.logits], 1), full.logits, atol=1e-5)


def test_capture_rejects_missing_layers():
    with pytest.raises(ValueError, match=r"\[7\] do not exist in a 4-layer target"):
        CapturingTarget(hf_target("llama", 4), (1, 7))


@pytest.mark.parametrize("name", sorted(fixtures.FIXTURES))
def test_full_draft_step_for_every_dialect(name, tmp_path):
    """Every accepted checkpoint builds a reference drafter that runs prefill + a decode step on
    aux states captured from a real HF target; fc sees exactly the captured width."""
    path = fixtures.build(name, str(tmp_path / "drafter"), seed=5)
    spec = read_drafter(path).spec
    target = hf_target("llama", fixtures.TARGET_LAYERS, hidden=spec.target_hidden_size, seed=6)
    indices = spec.aux_layers.hidden_state_indices(fixtures.TARGET_LAYERS)
    checkpoint = read_drafter(path, target=target.config)
    if not spec.use_aux_hidden_state:
        indices = (fixtures.TARGET_LAYERS,)  # EAGLE-1-style head: the last hidden state
    drafter = ReferenceDrafter.from_tensors(
        spec, checkpoint.load_tensors(torch.float32),
        target_embed=target.model.embed_tokens.weight.detach(),
        target_lm_head=target.lm_head.weight.detach())
    ids = torch.randint(0, 512, (1, 6), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        captured = CapturingTarget(target, indices)(ids)
        assert captured.aux.shape[-1] == (spec.fc_in_features if spec.use_aux_hidden_state
                                          else spec.hidden_size)
        cache = DraftCache()
        shifted = torch.cat([ids[:, 1:], captured.logits[:, -1:].argmax(-1)], dim=1)
        out = drafter(shifted, torch.arange(6), aux=captured.aux, cache=cache)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        step = drafter(token, torch.tensor([6]), carried=out.carried[:, -1:], cache=cache)
    assert step.logits.shape == (1, 1, spec.draft_vocab_size)
    assert torch.isfinite(step.logits).all()
    target_ids = drafter.to_target_ids(step.logits.argmax(-1))
    assert 0 <= int(target_ids) < spec.vocab_size
