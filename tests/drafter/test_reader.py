"""Reading every dialect into the canonical description, and rejecting every bad checkpoint."""

from __future__ import annotations

import json
import os
import random

import pytest
import torch
from safetensors.torch import save_file

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.errors import DrafterError
from sglang_eagle_ext.drafter.spec import Dialect, IdConvention, LaterLayerNorm, expected_shapes
from sglang_eagle_ext.drafter.target import read_target
from tests.kit import fixtures
from tests.kit.fixtures import Geometry, canonical_tensors, rename, shrink, template

TARGET = read_target(fixtures.target_config())

# What each fixture must read as: (dialect, layers, aux count, hidden-state indices for N=12,
# later-layer norm, extra flags). Written from the fixture recipe, not from the reader.
EXPECTED = {
    "F1-safeailab": (Dialect.FLAT, 1, 3, (2, 6, 9), {}),
    "F1-specforge": (Dialect.FLAT, 1, 3, (2, 6, 9), {}),
    "F2-angelslim": (Dialect.ANGELSLIM, 1, 3, (2, 6, 9), {}),
    "F3-modelopt": (Dialect.MODELOPT, 1, 3, (2, 6, 9), {}),
    "F4-modelopt-no-aux": (Dialect.MODELOPT, 1, 1, None, {"use_aux_hidden_state": False,
                                                           "has_vocab_map": False}),
    "F5-gpt-oss-boundary": (Dialect.FLAT, 1, 3, (8, 10, 12), {"norm_before_fc": True}),
    "F6-speculators": (Dialect.SPECULATORS, 1, 3, (2, 6, 9),
                       {"norm_before_residual": True, "embed_tokens_from_target": False}),
    "F7-speculators-2-layers": (Dialect.SPECULATORS, 2, 3, (2, 6, 9),
                                {"later_layer_norm": LaterLayerNorm.INPUT_LAYERNORM}),
    "F8-speculators-4-aux": (Dialect.SPECULATORS, 1, 4, (2, 5, 9, 11),
                             {"norm_before_fc": True, "norm_output": True, "sliding_window": 32,
                              "layer_types": ("sliding_attention",)}),
    "F9-speculators-qwen3": (Dialect.SPECULATORS, 1, 3, (2, 6, 9), {"layer_kind": "qwen3"}),
    # SpecForge's `norm_output: true` is its final norm before lm_head; the carried state stays pre-norm
    "F10-eagle3.1": (Dialect.FLAT, 1, 3, (2, 6, 9), {"fc_norm": True, "norm_output": False}),
    "F10-legacy-aux-norm": (Dialect.FLAT, 1, 3, (2, 6, 9), {"fc_norm": True}),
    "F11-cross-width": (Dialect.FLAT, 1, 3, (2, 6, 9), {"target_hidden_size": 96}),
    "F12-nemo": (Dialect.NEMO, 1, 3, (2, 6, 9), {"fc_norm": True, "norm_output": True}),
    "F14-full-vocab": (Dialect.FLAT, 1, 3, (2, 6, 9), {"has_vocab_map": False,
                                                       "draft_vocab_size": 512}),
    "F14-torchspec-no-draft-vocab": (Dialect.FLAT, 1, 3, (2, 6, 9), {"has_vocab_map": False}),
}


def test_every_fixture_has_an_expectation():
    assert set(EXPECTED) == set(fixtures.FIXTURES)


@pytest.mark.parametrize("name", sorted(fixtures.FIXTURES))
def test_fixture_reads_into_the_described_drafter(name, tmp_path):
    seed = random.randrange(1 << 30)
    fixtures.build(name, str(tmp_path), seed=seed)
    target = read_target(fixtures.target_config(hidden=96)) if "cross" in name else TARGET
    spec = read_drafter(tmp_path, target=target).spec
    dialect, layers, num_aux, indices, flags = EXPECTED[name]
    assert spec.dialect is dialect
    assert spec.num_layers == layers
    assert spec.num_aux_hidden_states == num_aux
    if indices is not None:
        assert spec.aux_layers.hidden_state_indices(fixtures.TARGET_LAYERS) == indices
    for key, value in flags.items():
        assert getattr(spec, key) == value, key


@pytest.mark.parametrize("name", sorted(fixtures.FIXTURES))
def test_tensors_come_back_under_canonical_names_bit_exact(name, tmp_path):
    """The writer renames canonical tensors into the dialect; the reader must undo it exactly."""
    seed = random.randrange(1 << 30)
    fixtures.build(name, str(tmp_path), seed=seed)
    checkpoint = read_drafter(tmp_path)
    loaded = checkpoint.load_tensors()
    assert set(loaded) == set(expected_shapes(checkpoint.spec))
    # Regenerate the canonical originals from the same seed and geometry the builder used.
    spec = checkpoint.spec
    originals = canonical_tensors(_geometry_of(spec), seed)
    for key, tensor in loaded.items():
        assert torch.equal(tensor, originals[key]), key


def _geometry_of(spec) -> Geometry:
    return Geometry(num_aux=spec.num_aux_hidden_states, target_hidden=spec.target_hidden_size,
                    layers=spec.num_layers, qwen3=spec.layer_kind == "qwen3",
                    attention_bias=spec.attention_bias, fc_norm=spec.fc_norm,
                    norm_before_fc=spec.norm_before_fc, embed=not spec.embed_tokens_from_target,
                    lm_head=not spec.lm_head_from_target, fc=spec.use_aux_hidden_state,
                    draft_vocab=spec.draft_vocab_size)


def test_load_tensors_casts_weights_but_keeps_the_vocab_map_integral(tmp_path):
    fixtures.build("F6-speculators", str(tmp_path), seed=3)
    loaded = read_drafter(tmp_path).load_tensors(torch.bfloat16)
    assert loaded["d2t"].dtype == torch.int64
    assert loaded["fc.weight"].dtype == torch.bfloat16


def test_fused_projections_are_split(tmp_path):
    g = Geometry(layers=2)
    tensors = canonical_tensors(g, seed=11)
    fused = dict(tensors)
    for i in range(2):
        p = f"layers.{i}."
        fused[p + "self_attn.qkv_proj.weight"] = torch.cat(
            [fused.pop(p + f"self_attn.{x}_proj.weight") for x in "qkv"])
        fused[p + "mlp.gate_up_proj.weight"] = torch.cat(
            [fused.pop(p + "mlp.gate_proj.weight"), fused.pop(p + "mlp.up_proj.weight")])
    config = shrink(template("sgl-project__SpecForge-configs-llama3-8B-eagle3"), g)
    fixtures.write_checkpoint(str(tmp_path), config, fused)
    loaded = read_drafter(tmp_path).load_tensors()
    for key in tensors:
        if key != "t2d":
            assert torch.equal(loaded[key], tensors[key]), key


def test_sharded_safetensors_with_index(tmp_path):
    g = Geometry()
    tensors = rename(canonical_tensors(g, seed=5), midlayer=True)
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, keys in shards.items():
        save_file({k: tensors[k].contiguous() for k in keys}, str(tmp_path / file))
    weight_map = {k: file for file, keys in shards.items() for k in keys}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    config = shrink(template("sgl-project__SpecForge-configs-llama3-8B-eagle3"), g)
    (tmp_path / "config.json").write_text(json.dumps(config))
    checkpoint = read_drafter(tmp_path)
    assert len(checkpoint.spec.files) == 3
    assert torch.equal(checkpoint.load_tensors()["layers.0.mlp.down_proj.weight"],
                       tensors["midlayer.mlp.down_proj.weight"])


def test_nemo_training_checkpoint_takes_the_vocab_map_from_eagle_meta(tmp_path):
    fixtures.build("F12-nemo", str(tmp_path / "model"), seed=7)
    weights = tmp_path / "model" / "model.safetensors"
    from safetensors.torch import load_file
    tensors = load_file(str(weights))
    d2t = tensors.pop("d2t")
    tensors.pop("t2d")
    save_file(tensors, str(weights))
    selected = d2t + torch.arange(d2t.numel())
    torch.save({"global_step": 10, "epoch": 1, "selected_token_ids": selected,
                "selected_token_mask": torch.zeros(512, dtype=torch.bool)},
               str(tmp_path / "eagle3_meta.pt"))
    checkpoint = read_drafter(tmp_path / "model")
    assert checkpoint.spec.has_vocab_map
    assert str(tmp_path / "eagle3_meta.pt") in checkpoint.spec.files
    assert torch.equal(checkpoint.load_tensors()["d2t"], d2t)


def test_legacy_draft_model_pt(tmp_path):
    g = Geometry(embed=True)
    tensors = rename(canonical_tensors(g, seed=9), model_prefix=True)
    config = shrink(template("sgl-project__SpecForge-configs-qwen3-8b-eagle3"), g)
    config.update(architectures=["LlamaEagle3DraftModel"], num_hidden_layers=fixtures.TARGET_LAYERS)
    fixtures.write_checkpoint(str(tmp_path), config, tensors, weights_file="draft_model.pt",
                              run_config=fixtures.NEMO_DEFAULT_RUN)
    spec = read_drafter(tmp_path).spec
    assert spec.dialect is Dialect.NEMO and spec.num_layers == 1
    assert any("target's depth" in note for note in spec.notes)


def test_sglang_style_later_layers_use_hidden_norm(tmp_path):
    g = Geometry(layers=3, later_norm="hidden_norm")
    config = shrink(template("sgl-project__SpecForge-configs-llama3-8B-eagle3"), g)
    fixtures.write_checkpoint(str(tmp_path), config, canonical_tensors(g, seed=2))
    assert read_drafter(tmp_path).spec.later_layer_norm is LaterLayerNorm.HIDDEN_NORM


def test_aux_layers_conventions():
    from sglang_eagle_ext.drafter.spec import AuxLayers

    nested = AuxLayers((1, 5, 8), IdConvention.LAYER_OUTPUT, "eagle_config.eagle_aux_hidden_state_layer_ids")
    assert nested.hidden_state_indices() == (2, 6, 9)
    assert nested.sglang_layer_ids() == (1, 5, 8)
    boundary = AuxLayers((8, 10, 12), IdConvention.LAYER_OUTPUT, "eagle_config")
    assert boundary.hidden_state_indices(12) == (8, 10, 12)
    assert boundary.hidden_state_indices(36) == (9, 11, 13)
    top = AuxLayers((2, 46, 91, 93), IdConvention.HIDDEN_STATE_INDEX, "eagle_aux_hidden_state_layer_ids")
    assert top.hidden_state_indices(94) == (2, 46, 91, 93)
    assert top.sglang_layer_ids(94) == (1, 45, 90, 92)
    default = AuxLayers(None, IdConvention.HIDDEN_STATE_INDEX, "default")
    assert default.hidden_state_indices() is None
    assert default.hidden_state_indices(32) == (2, 16, 29)


def test_hidden_state_indices_are_hf_output_hidden_states():
    """Index k is HF's output_hidden_states[k]: the input of layer k (0 = embeddings)."""
    from sglang_eagle_ext.sglang.compat import cpu as cpu_shims

    cpu_shims.install()
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(random.randrange(1 << 30))
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=64)
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 64, (1, 5))
    captured = {}
    hooks = [layer.register_forward_pre_hook(lambda mod, args, i=i: captured.__setitem__(i, args[0]))
             for i, layer in enumerate(model.model.layers)]
    with torch.no_grad():
        states = model(ids, output_hidden_states=True).hidden_states
    for hook in hooks:
        hook.remove()
    assert torch.equal(states[0], model.model.embed_tokens(ids))
    for k in range(1, 4):
        assert torch.equal(states[k], captured[k])


# ---------------------------------------------------------------- rejected checkpoints


def _flat(tmp_path, g=Geometry(), edit_config=None, edit_tensors=None, weights_file="model.safetensors"):
    config = shrink(template("sgl-project__SpecForge-configs-llama3-8B-eagle3"), g)
    tensors = rename(canonical_tensors(g, seed=random.randrange(1 << 30)), midlayer=True)
    if edit_config:
        edit_config(config)
    if edit_tensors:
        edit_tensors(tensors)
    fixtures.write_checkpoint(str(tmp_path), config, tensors, weights_file)
    return tmp_path


def _problems(path, target=None):
    with pytest.raises(DrafterError) as info:
        read_drafter(path, target=target)
    return info.value.problems


def _one(problems, field_part):
    hits = [p for p in problems if field_part in p.field]
    assert hits, [str(p) for p in problems]
    assert all(p.fix for p in hits)
    return hits[0]


def test_fc_width_not_a_multiple_of_target_hidden(tmp_path):
    def edit(t):
        t["fc.weight"] = torch.randn(64, 3 * 64 + 5)
    problem = _one(_problems(_flat(tmp_path, edit_tensors=edit)), "fc.weight")
    assert "multiple" in problem.message and problem.file.endswith("model.safetensors")


def test_aux_count_inconsistent_with_fc(tmp_path):
    def edit(c):
        c["num_aux_hidden_states"] = 4
    problem = _one(_problems(_flat(tmp_path, edit_config=edit)), "num_aux_hidden_states")
    assert "-> 4" in problem.found and "-> 3" in problem.found


def test_duplicate_aux_ids(tmp_path):
    def edit(c):
        c["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 5, 5]}
    problem = _one(_problems(_flat(tmp_path, edit_config=edit)), "eagle_aux_hidden_state_layer_ids")
    assert "duplicate" in problem.message and problem.file.endswith("config.json")


def test_aux_ids_out_of_range_for_the_target(tmp_path):
    def edit(c):
        c["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 20, 30]}
    path = _flat(tmp_path, edit_config=edit)
    read_drafter(path)  # fine without a target
    problem = _one(_problems(path, target=TARGET), "eagle_aux_hidden_state_layer_ids")
    assert "[0, 12]" in problem.expected


def test_default_taps_that_collide_in_a_shallow_target(tmp_path):
    problem = _one(_problems(_flat(tmp_path), target=read_target(fixtures.target_config(layers=6))),
                   "default taps")
    assert problem.found == "[2, 3, 3]"


def test_top_level_and_nested_ids_that_disagree(tmp_path):
    def edit(c):
        c["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 5, 8]}
        c["eagle_aux_hidden_state_layer_ids"] = [1, 5, 8]
    _one(_problems(_flat(tmp_path, edit_config=edit)), "eagle_aux_hidden_state_layer_ids")


def test_four_aux_without_ids(tmp_path):
    _one(_problems(_flat(tmp_path, g=Geometry(num_aux=4))), "eagle_aux_hidden_state_layer_ids")


def test_d2t_of_wrong_length(tmp_path):
    def edit(t):
        t["d2t"] = t["d2t"][:-1]
        del t["t2d"]
    problem = _one(_problems(_flat(tmp_path, edit_tensors=edit)), "d2t")
    assert problem.expected == "[128]" and problem.found == "[127]"


def test_d2t_mapping_outside_the_target_vocab(tmp_path):
    def edit(t):
        t["d2t"] = t["d2t"].clone()
        t["d2t"][-1] = 10_000
        del t["t2d"]
    problem = _one(_problems(_flat(tmp_path, edit_tensors=edit)), "d2t")
    assert "outside the target vocabulary" in problem.message


def test_t2d_that_disagrees_with_d2t(tmp_path):
    def edit(t):
        t["t2d"] = ~t["t2d"]
    _one(_problems(_flat(tmp_path, edit_tensors=edit)), "t2d")


def test_reduced_vocab_without_map(tmp_path):
    def edit(t):
        del t["d2t"], t["t2d"]
    problem = _one(_problems(_flat(tmp_path, edit_tensors=edit)), "d2t")
    assert "without a draft-to-target map" in problem.message


@pytest.mark.parametrize("name", sorted(fixtures.REJECTED_FIXTURES))
def test_parallel_drafting_heads_are_rejected(name, tmp_path):
    fixtures.build(name, str(tmp_path), seed=1)
    problem = _problems(tmp_path)[0]
    assert "P-EAGLE" in problem.message and "vLLM" in problem.fix


def test_parallel_drafting_recognised_by_its_tensor(tmp_path):
    def edit(t):
        t["mask_hidden"] = torch.randn(1, 1, 192)
    problem = _one(_problems(_flat(tmp_path, edit_tensors=edit)), "mask_hidden")
    assert "P-EAGLE" in problem.message


def test_truncated_safetensors(tmp_path):
    path = _flat(tmp_path)
    weights = path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    problem = _one(_problems(path), "safetensors")
    assert problem.file == str(weights)


def test_pickle_with_code_is_refused(tmp_path):
    path = _flat(tmp_path, weights_file="pytorch_model.bin")
    weights = path / "pytorch_model.bin"
    torch.save({"fc.weight": torch.randn(2, 2), "payload": os.system}, str(weights))
    problem = _one(_problems(path), "pickle")
    assert "weights_only" in problem.fix


def test_unexpected_tensor_is_an_error(tmp_path):
    def edit(t):
        t["fc.bias"] = torch.randn(64)
    problem = _one(_problems(_flat(tmp_path, edit_tensors=edit)), "fc.bias")
    assert "unexpected" in problem.message


def test_missing_tensor_is_an_error(tmp_path):
    def edit(t):
        del t["midlayer.mlp.up_proj.weight"]
    problem = _one(_problems(_flat(tmp_path, edit_tensors=edit)), "layers.0.mlp.up_proj.weight")
    assert problem.expected == "[128, 64]"


def test_shape_mismatch_names_the_raw_tensor(tmp_path):
    def edit(t):
        t["midlayer.self_attn.q_proj.weight"] = torch.randn(128, 64)
    problem = _one(_problems(_flat(tmp_path, edit_tensors=edit)), "midlayer.self_attn.q_proj.weight")
    assert problem.expected == "[128, 128]" and problem.found == "[128, 64]"


def test_ambiguous_later_layer_norm(tmp_path):
    def edit(t):
        t["layers.1.hidden_norm.weight"] = torch.ones(64) + 0.1 * torch.randn(64)
    _one(_problems(_flat(tmp_path, g=Geometry(layers=2), edit_tensors=edit)), "layers.1.")


def test_unknown_and_mla_architectures(tmp_path):
    def unknown(c):
        c["architectures"] = ["MistralForCausalLM"]
    problem = _one(_problems(_flat(tmp_path / "a", edit_config=unknown)), "architectures")
    assert "MistralForCausalLM" in problem.found
    config = template("lightseekorg__TorchSpec-configs-kimi_k25_eagle3_mla")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text(json.dumps(config))
    assert "MLA" in _one(_problems(tmp_path / "b"), "architectures").message


def test_target_width_and_vocab_mismatch(tmp_path):
    path = _flat(tmp_path)
    problems = _problems(path, target=read_target(fixtures.target_config(hidden=80, vocab=600)))
    assert {p.field for p in problems} >= {"target_hidden_size", "vocab_size"}


def test_every_problem_names_file_field_and_fix(tmp_path):
    def edit(t):
        t["fc.weight"] = torch.randn(64, 100)
        t["extra.weight"] = torch.randn(3)
    for problem in _problems(_flat(tmp_path, edit_tensors=edit)):
        assert problem.file and problem.field and problem.fix
        assert str(tmp_path) in problem.file
