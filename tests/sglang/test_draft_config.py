"""The config SGLang is given for a drafter: capture ids in SGLang's convention for every
dialect, the real drafter depth, the aux width; checked through SGLang's own ModelConfig."""

import json
import os
from types import SimpleNamespace

import pytest

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.errors import DrafterError
from sglang_eagle_ext.drafter.dialects import is_drafter_config
from sglang_eagle_ext.sglang.compat.config_loading import DraftConfigLoader, sglang_config_dict
from sglang_eagle_ext.drafter.target import read_target
from tests.kit import fixtures


def _target(model_type="llama", layers=fixtures.TARGET_LAYERS):
    config = fixtures.target_config(layers=layers)
    config["model_type"] = model_type
    return read_target(config)


# fixture -> SGLang layer-output ids for a 12-layer target (hand-derived from each config)
EXPECTED_IDS = {
    "F1-specforge": None,  # no ids, three aux, depth unknown: SGLang's default taps are the drafter's
    "F3-modelopt": [1, 5, 8],  # nested, layer-output convention: as written
    "F6-speculators": None,
    "F8-speculators-4-aux": [1, 4, 8, 10],  # top-level hidden-state indices 2, 5, 9, 11
}


@pytest.mark.parametrize("name", sorted(EXPECTED_IDS))
def test_capture_ids_without_target(name, tmp_path):
    spec = read_drafter(fixtures.build(name, str(tmp_path))).spec
    config = sglang_config_dict(spec)
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == EXPECTED_IDS[name]
    assert config["num_aux_hidden_states"] * config["target_hidden_size"] == spec.fc_in_features


def test_capture_ids_with_target(tmp_path):
    default = sglang_config_dict(read_drafter(fixtures.build("F6-speculators", str(tmp_path / "a"))).spec,
                                 _target())
    assert default["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 5, 8]  # h2, h6, h9
    boundary = read_drafter(fixtures.build("F5-gpt-oss-boundary", str(tmp_path / "b"))).spec
    ids = sglang_config_dict(boundary, _target("gpt_oss"))["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert ids == [7, 9, 11]  # [8, 10, 12] reaches N: already indices
    with pytest.raises(DrafterError, match="last layer's output"):
        sglang_config_dict(boundary, _target("llama"))


def test_colliding_taps_fail_with_a_clear_message(tmp_path):
    spec = read_drafter(fixtures.build("F1-specforge", str(tmp_path))).spec
    with pytest.raises(DrafterError) as error:
        sglang_config_dict(spec, _target(layers=6))  # default taps 2, 3, 3
    assert "repeat" in str(error.value) and "[2, 3, 3]" in str(error.value)


def test_declared_duplicate_ids_fail(tmp_path):
    directory = fixtures.build("F3-modelopt", str(tmp_path))
    path = os.path.join(directory, "config.json")
    config = json.load(open(path))
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 5, 5]
    json.dump(config, open(path, "w"))

    with pytest.raises(DrafterError, match="duplicate aux layer ids"):  # before any model is built
        DraftConfigLoader(original=None)(directory)


def test_drafter_configs_are_told_from_targets(tmp_path):
    for name in fixtures.FIXTURES:
        directory = fixtures.build(name, str(tmp_path / name))
        assert is_drafter_config(json.load(open(os.path.join(directory, "config.json")))), name
    assert not is_drafter_config(fixtures.target_config() | {"architectures": ["LlamaForCausalLM"]})


@pytest.fixture
def patched_model_config():
    """SGLang's ModelConfig with our get_config wrapper (idempotent; drafters only)."""
    from sglang.srt.configs import model_config

    from sglang_eagle_ext.sglang.compat import config_loading

    config_loading.PATCH.apply(model_config)
    return model_config


def test_sglang_model_config_sees_the_normalised_drafter(tmp_path, patched_model_config):
    """NeMo writes the target's depth; speculators nests geometry and counts ids differently."""
    from sglang.srt.speculative.eagle_utils import get_draft_input_from_target_hidden_dim
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    for name, layers, ids in (("F12-nemo", 1, None), ("F8-speculators-4-aux", 1, [1, 4, 8, 10]),
                              ("F7-speculators-2-layers", 2, None)):
        directory = fixtures.build(name, str(tmp_path / name))
        config = patched_model_config.ModelConfig(model_path=directory, is_draft_model=True)
        spec = read_drafter(directory).spec
        assert config.hf_config.architectures == ["LlamaForCausalLMEagle3"]
        assert config.num_hidden_layers == layers
        assert config.hf_config.eagle_config["eagle_aux_hidden_state_layer_ids"] == ids
        runner = SimpleNamespace(model_config=config, spec_algorithm=SpeculativeAlgorithm.EAGLE3)
        assert get_draft_input_from_target_hidden_dim(runner) == spec.fc_in_features


def test_target_config_passes_through(tmp_path, patched_model_config):
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(fixtures.target_config() | {
        "architectures": ["LlamaForCausalLM"], "torch_dtype": "float32"}))
    config = patched_model_config.ModelConfig(model_path=str(target))
    assert config.hf_config.architectures == ["LlamaForCausalLM"]
    assert config.num_hidden_layers == fixtures.TARGET_LAYERS
