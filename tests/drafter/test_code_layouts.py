"""Layouts built from producers' own code (tests/kit/code_layouts.py, sources in
drafter_configs/SOURCES.md "Layouts built from code") read field by field, or refused with one
problem that names the flag and what to do."""

from __future__ import annotations

import json
import os
import random

import pytest
import torch

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.drafter.spec import Dialect, canonical_config
from sglang_eagle_ext.errors import DrafterError
from tests.kit import code_layouts, fixtures

# What the producer's code makes of each layout, written from that code (not from the reader).
COMMON = {"num_layers": 1, "num_aux_hidden_states": 3, "lm_head_from_target": False,
          "tie_word_embeddings": False}
EXPECTED = {
    # Eagle3LlamaAttention: q/k/v/o all take `attention_bias`; Eagle3LlamaMLP: `mlp_bias` (absent)
    "nemo-gpt-oss": dict(dialect=Dialect.NEMO, attention_bias=True, o_proj_bias=True, mlp_bias=False,
                         hidden_act="silu", rope_theta=150000.0, embed_tokens_from_target=False,
                         has_vocab_map=True, norm_output=False, sliding_window=None,
                         layer_types=("full_attention",)),
    "nemo-llama-biases": dict(dialect=Dialect.NEMO, attention_bias=True, o_proj_bias=True, mlp_bias=True,
                              hidden_act="silu", rope_scaling=None, embed_tokens_from_target=False),
    # _normalize_gemma4_draft_config: hidden_act <- hidden_activation, the global rope base flattened
    "nemo-gemma4-gelu": dict(dialect=Dialect.NEMO, hidden_act="gelu_pytorch_tanh", rope_theta=1000000.0,
                             rope_scaling=None, attention_bias=False, o_proj_bias=False, mlp_bias=False),
    # Eagle3LlamaForCausalLM builds lm_head [draft_vocab_size, H] whatever tie_word_embeddings says
    "angelslim-tied-config": dict(dialect=Dialect.ANGELSLIM, embed_tokens_from_target=True,
                                  draft_vocab_size=128, has_vocab_map=True),
    "angelslim-tied-config-with-embed": dict(dialect=Dialect.ANGELSLIM, embed_tokens_from_target=False),
    # SpecForge's norm_output only puts the final norm in front of lm_head; the carried state is pre-norm
    "specforge-eagle3.1": dict(dialect=Dialect.FLAT, fc_norm=True, norm_output=False,
                               embed_tokens_from_target=True),
    "specforge-no-norm-output-key": dict(dialect=Dialect.FLAT, fc_norm=True, norm_output=False),
    "nemo-eagle3.1": dict(dialect=Dialect.NEMO, fc_norm=True, norm_output=True),
}
NOTES = {
    "angelslim-tied-config": "tie_word_embeddings = true ignored",
    "angelslim-tied-config-with-embed": "tie_word_embeddings = true ignored",
    "specforge-eagle3.1": "norm_output = true read as SpecForge's",
    "nemo-gpt-oss": "target's depth",
}


def test_every_layout_has_an_expectation():
    assert set(EXPECTED) == set(code_layouts.SERVED)


@pytest.mark.parametrize("name", sorted(code_layouts.SERVED))
def test_layout_reads_field_by_field(name, tmp_path):
    seed = random.randrange(1 << 30)
    directory = code_layouts.build(name, str(tmp_path / "d"), seed=seed)
    spec = read_drafter(directory, target=fixtures.target_config()).spec
    for field, value in {**COMMON, **EXPECTED[name]}.items():
        assert getattr(spec, field) == value, field
    if name in NOTES:
        assert any(NOTES[name] in note for note in spec.notes), spec.notes


def test_gpt_oss_drafter_reads_the_targets_yarn_rope(tmp_path):
    spec = read_drafter(code_layouts.build("nemo-gpt-oss", str(tmp_path / "d"), seed=1)).spec
    assert json.loads(spec.rope_scaling) == {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0,
                                             "beta_slow": 1.0, "truncate": False,
                                             "original_max_position_embeddings": 64}


@pytest.mark.parametrize("name", sorted(code_layouts.SERVED))
def test_tensors_come_back_bit_exact(name, tmp_path):
    """Every tensor the producer saved is served, under its canonical name, unchanged."""
    from safetensors.torch import load_file
    from sglang_eagle_ext.drafter.tensors import canonical_name

    directory = code_layouts.build(name, str(tmp_path / "d"), seed=3)
    saved = {canonical_name(k): v
             for k, v in load_file(os.path.join(directory, "model.safetensors")).items()}
    loaded = read_drafter(directory).load_tensors()
    assert set(loaded) == set(saved) - {"t2d"}
    for key, tensor in loaded.items():
        assert torch.equal(tensor, saved[key]), key


@pytest.mark.parametrize("name", sorted(code_layouts.REFUSED))
def test_refused_layouts_get_one_diagnosis(name, tmp_path):
    directory = code_layouts.build(name, str(tmp_path / "d"), seed=2)
    with pytest.raises(DrafterError) as error:
        read_drafter(directory)
    (problem,) = error.value.problems
    assert problem.file == os.path.join(directory, "config.json")
    assert problem.field == code_layouts.REFUSED[name][1]
    assert problem.fix and "Traceback" not in str(error.value)


def test_modelopt_head_without_aux_states_is_diagnosed_not_shape_checked(tmp_path):
    directory = code_layouts.build("modelopt-no-aux", str(tmp_path / "d"), seed=2)
    with pytest.raises(DrafterError) as error:
        read_drafter(directory)
    (problem,) = error.value.problems
    assert "without aux hidden states" in problem.message
    assert "ModelOpt / TensorRT-LLM" in problem.fix and "use_aux_hidden_state: true" in problem.fix


def test_bias_flags_left_out_of_the_config_are_read_from_the_weights(tmp_path):
    """A config serialised as a diff against its class's defaults leaves out gpt-oss's
    attention_bias (true by default); the weights' biases state it."""
    directory = code_layouts.build("nemo-llama-biases", str(tmp_path / "d"), seed=4)
    config_file = os.path.join(directory, "config.json")
    with open(config_file) as handle:
        config = json.load(handle)
    del config["attention_bias"], config["mlp_bias"]
    with open(config_file, "w") as handle:
        json.dump(config, handle)
    spec = read_drafter(directory).spec
    assert spec.attention_bias and spec.o_proj_bias and spec.mlp_bias
    assert sum("not in the config: true, as the weights hold" in note for note in spec.notes) == 2


def test_stated_false_bias_flag_with_bias_tensors_stays_an_error(tmp_path):
    directory = code_layouts.build("nemo-llama-biases", str(tmp_path / "d"), seed=4)
    config_file = os.path.join(directory, "config.json")
    with open(config_file) as handle:
        config = json.load(handle)
    config["mlp_bias"] = False
    with open(config_file, "w") as handle:
        json.dump(config, handle)
    with pytest.raises(DrafterError) as error:
        read_drafter(directory)
    assert {p.field for p in error.value.problems} == {"model.layers.0.mlp.gate_proj.bias",
                                                       "model.layers.0.mlp.up_proj.bias",
                                                       "model.layers.0.mlp.down_proj.bias"}


@pytest.mark.parametrize("name", ["specforge-eagle3.1", "nemo-eagle3.1"])
def test_carried_state_survives_the_canonical_config(name, tmp_path):
    """The package's config states the carried state as `carry_normed_state` (read alike in every
    layout) and writes SGLang's `norm_output` beside it, in SGLang's (not SpecForge's) meaning."""
    from sglang_eagle_ext.drafter.model_dir import membership_mask

    original = read_drafter(code_layouts.build(name, str(tmp_path / "original"), seed=6))
    config = canonical_config(original.spec)
    assert config["carry_normed_state"] is config["norm_output"] is original.spec.norm_output
    tensors = original.load_tensors()
    tensors["t2d"] = membership_mask(tensors["d2t"], original.spec.vocab_size)
    fixtures.write_checkpoint(str(tmp_path / "copy"), config, tensors)
    assert read_drafter(tmp_path / "copy").spec.norm_output is original.spec.norm_output
