"""A drafter written in another producer's layout (``drafter/producer_export.py``) is what that
producer's own export writes: the same tensor names, architecture and dialect as the package's
fixture of the layout (``tests/kit/``, built from the producer's code independently of the writer),
and it reads back as the same drafter with the same tensors bit for bit."""

import json
import os

import pytest
import torch
from safetensors import safe_open

from sglang_eagle_ext.drafter.producer_export import LAYOUTS, LayoutMismatch, write_in_layout
from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.drafter.spec import AuxLayers, Dialect, DrafterSpec, IdConvention, LaterLayerNorm
from sglang_eagle_ext.reference.drafter import ReferenceDrafter
from tests.kit import code_layouts, fixtures, producer_layouts

TARGET = dict(fixtures.target_config(), head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-5)

# layout -> (fixture builder, fixture name, drafter features of that fixture)
FIXTURE_OF = {
    "speculators": ("producer", "speculators-convert-eagle3", dict(num_layers=1)),
    "specforge": ("code", "specforge-eagle3.1", dict(num_layers=1, fc_norm=True)),
    "nemo": ("code", "nemo-eagle3.1", dict(num_layers=1, fc_norm=True, norm_output=True)),
    "modelopt-hf": ("producer", "modelopt-hf-eagle3-2-layers",
                    dict(num_layers=2, later_layer_norm=LaterLayerNorm.INPUT_LAYERNORM)),
    "modelopt-megatron": ("producer", "modelopt-megatron-eagle3-deep",
                          dict(num_layers=2, later_layer_norm=LaterLayerNorm.HIDDEN_NORM)),
}


@pytest.fixture
def target_dir(tmp_path):
    directory = tmp_path / "target"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(TARGET))
    return str(directory)


def drafter(seed: int, **features) -> ReferenceDrafter:
    """A seeded drafter for :data:`TARGET` with every parameter moved off its initial value."""
    features = {"intermediate_size": 128, "rms_norm_eps": 1e-5, **features}
    spec = DrafterSpec.from_values(
        path="<test>", dialect=Dialect.FLAT, architecture="LlamaForCausalLMEagle3", hidden_size=64,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=256, num_aux_hidden_states=3,
        aux_layers=AuxLayers((2, 6, 9), IdConvention.HIDDEN_STATE_INDEX, "<test>"), vocab_size=512,
        draft_vocab_size=128, has_vocab_map=True, embed_tokens_from_target=True, **features)
    torch.manual_seed(seed)
    model = ReferenceDrafter(spec)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
        model.d2t.copy_(torch.randperm(512)[:128].sort().values - torch.arange(128))
    return model


def tensor_names(directory: str) -> set[str]:
    with safe_open(os.path.join(directory, "model.safetensors"), "pt") as handle:
        return set(handle.keys())


def fixture(kind: str, name: str, directory: str) -> str:
    if kind == "producer":
        return producer_layouts.build(producer_layouts.LAYOUTS[name], directory, seed=1)
    return code_layouts.build(name, directory, seed=1)


@pytest.mark.parametrize("layout", sorted(FIXTURE_OF))
def test_written_like_the_producers_fixture(layout, target_dir, tmp_path):
    kind, name, features = FIXTURE_OF[layout]
    model = drafter(3, **features)
    written = write_in_layout(str(tmp_path / "written"), layout, model.spec, model.canonical_state_dict(),
                              target_dir)
    reference = fixture(kind, name, str(tmp_path / "fixture"))
    assert tensor_names(written) == tensor_names(reference) - {"model.embed_tokens.weight", "embed_tokens.weight"}
    configs = [json.loads((open(os.path.join(d, "config.json"))).read()) for d in (written, reference)]
    assert configs[0]["architectures"] == configs[1]["architectures"]
    ours, theirs = read_drafter(written, target=target_dir).spec, read_drafter(reference).spec
    for field in ("dialect", "num_layers", "later_layer_norm", "fc_norm", "norm_output", "has_vocab_map"):
        assert getattr(ours, field) == getattr(theirs, field), field


# each layout with the most features it can express
RICHEST = {"sglang": dict(num_layers=2, fc_norm=True, norm_output=True),
           "speculators": dict(num_layers=2, fc_norm=True, norm_output=True),
           "specforge": dict(num_layers=1, fc_norm=True),
           "nemo": dict(num_layers=1, fc_norm=True, norm_output=True),
           "modelopt-hf": dict(num_layers=2, later_layer_norm=LaterLayerNorm.INPUT_LAYERNORM),
           "modelopt-megatron": dict(num_layers=2, later_layer_norm=LaterLayerNorm.HIDDEN_NORM)}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_reads_back_as_the_same_drafter(layout, target_dir, tmp_path):
    model = drafter(5, **RICHEST[layout])
    written = write_in_layout(str(tmp_path / layout), layout, model.spec, model.canonical_state_dict(), target_dir)
    checkpoint = read_drafter(written, target=target_dir)
    loaded = checkpoint.load_tensors(torch.float32)
    assert loaded.keys() == model.canonical_state_dict().keys()
    for name, tensor in model.canonical_state_dict().items():
        assert torch.equal(loaded[name], tensor.to(loaded[name].dtype)), name
    assert checkpoint.spec.aux_layers.hidden_state_indices(12) == (2, 6, 9)
    for field, value in RICHEST[layout].items():
        assert getattr(checkpoint.spec, field) == value, field


@pytest.mark.parametrize("layout, features, message", [
    ("specforge", dict(num_layers=1, norm_output=True), "pre-norm"),
    ("specforge", dict(num_layers=2), "one draft layer"),
    ("modelopt-hf", dict(num_layers=2, later_layer_norm=LaterLayerNorm.HIDDEN_NORM), "input_layernorm"),
    ("modelopt-megatron", dict(num_layers=1, fc_norm=True), "no aux norms"),
    ("nemo", dict(num_layers=1, intermediate_size=256), "intermediate_size"),
    ("nemo", dict(num_layers=1, rms_norm_eps=1e-6), "rms_norm_eps"),
    ("nemo", dict(num_layers=1, attention_bias=True), "attention_bias"),
])
def test_a_drafter_the_producer_cannot_express_is_refused(layout, features, message, target_dir, tmp_path):
    model = drafter(7, **features)
    with pytest.raises(LayoutMismatch, match=message):
        write_in_layout(str(tmp_path / "out"), layout, model.spec, model.canonical_state_dict(), target_dir)
    assert not (tmp_path / "out").exists()


def test_nemo_writes_the_attention_biases_its_draft_takes_from_the_target(tmp_path):
    """A target with ``attention_bias``: NeMo's draft layer (HF Llama's) has q/k/v *and* o_proj
    biases, as the package's NeMo fixture built from NeMo's code; a drafter without the o_proj
    bias is refused, one with it reads back bit for bit."""
    directory = tmp_path / "biased-target"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(dict(TARGET, attention_bias=True)))
    model = drafter(9, num_layers=1, attention_bias=True)
    with pytest.raises(LayoutMismatch, match="o_proj bias"):
        write_in_layout(str(tmp_path / "refused"), "nemo", model.spec, model.canonical_state_dict(), str(directory))
    model = drafter(9, num_layers=1, attention_bias=True, o_proj_bias=True)
    written = write_in_layout(str(tmp_path / "nemo"), "nemo", model.spec, model.canonical_state_dict(), str(directory))
    biases = {name for name in tensor_names(written) if name.endswith("_proj.bias")}
    reference = code_layouts.build("nemo-llama-biases", str(tmp_path / "fixture"), seed=1)
    assert biases == {name for name in tensor_names(reference) if "self_attn" in name and name.endswith(".bias")}
    loaded = read_drafter(written, target=str(directory)).load_tensors(torch.float32)
    for name, tensor in model.canonical_state_dict().items():
        assert torch.equal(loaded[name], tensor), name
