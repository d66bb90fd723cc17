"""Target configs are read as SGLang's config classes read them: depth, width and vocabulary in
any spelling those classes accept (LongCat-Flash's `num_layers` among them), the language model's
part of multimodal configs, and every bad value an error that names its key."""

from __future__ import annotations

import json
import os

import pytest

from sglang_eagle_ext.cli import main
from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.drafter.target import TARGET_KEYS, read_target
from sglang_eagle_ext.errors import DrafterError
from sglang_eagle_ext.sglang.compat.config_loading import capture_layer_ids
from tests.kit import code_layouts, fixtures
from tests.conftest import needs_sglang

LONGCAT_LAYERS = 20  # not the fixtures' 12, so that a depth read from elsewhere shows


def _config_classes():
    """Decoder config classes (SGLang's own and transformers') that spell a fact differently."""
    from sglang.srt.configs.chatglm import ChatGLMConfig
    from sglang.srt.configs.dbrx import DbrxConfig
    from sglang.srt.configs.exaone import ExaoneConfig
    from sglang.srt.configs.longcat_flash import LongcatFlashConfig
    from transformers import (BloomConfig, CodeGenConfig, GPT2Config, GPTBigCodeConfig, GPTJConfig,
                              GPTNeoConfig, MptConfig)

    return [LongcatFlashConfig, ChatGLMConfig, ExaoneConfig, DbrxConfig, GPT2Config, GPTJConfig,
            BloomConfig, MptConfig, GPTNeoConfig, CodeGenConfig, GPTBigCodeConfig]


CLASS_NAMES = ["LongcatFlashConfig", "ChatGLMConfig", "ExaoneConfig", "DbrxConfig", "GPT2Config",
               "GPTJConfig", "BloomConfig", "MptConfig", "GPTNeoConfig", "CodeGenConfig", "GPTBigCodeConfig"]


@needs_sglang
@pytest.mark.parametrize("index", range(len(CLASS_NAMES)), ids=CLASS_NAMES)
def test_every_spelling_a_config_class_accepts(index):
    cls = _config_classes()[index]
    instance = cls()
    expected = (instance.num_hidden_layers, instance.hidden_size, instance.vocab_size)
    written = instance.to_dict()
    # as published: the canonical key is absent where the class takes another spelling
    for keys in TARGET_KEYS.values():
        if any(k in written for k in keys[1:]):
            written.pop(keys[0], None)
    info = read_target(written)
    assert (info.num_layers, info.hidden_size, info.vocab_size) == expected
    info = read_target(instance)  # SGLang hands the loaded config object over
    assert (info.num_layers, info.hidden_size, info.vocab_size) == expected


def test_bloom_published_n_embed():
    from transformers import BloomConfig

    config = {"model_type": "bloom", "n_embed": 96, "n_layer": 5, "vocab_size": 1000}
    info = read_target(config)
    assert (info.num_layers, info.hidden_size) == (5, 96) == (BloomConfig(**config).num_hidden_layers,
                                                             BloomConfig(**config).hidden_size)


def _longcat(tmp_path):
    config = code_layouts.longcat_flash_target(layers=LONGCAT_LAYERS)
    path = tmp_path / "longcat" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return config, str(path.parent)


@needs_sglang
def test_longcat_flash_depth_is_num_layers_as_in_sglangs_config_class(tmp_path):
    from sglang.srt.configs.longcat_flash import LongcatFlashConfig

    config, directory = _longcat(tmp_path)
    assert "num_hidden_layers" not in config
    info = read_target(directory)
    assert info.num_layers == LONGCAT_LAYERS == LongcatFlashConfig(**config).num_hidden_layers
    assert (info.model_type, info.hidden_size, info.vocab_size) == ("longcat_flash", 64, 512)


@needs_sglang
def test_default_taps_come_from_the_longcat_depth(tmp_path):
    """No ids in the drafter: the taps are [2, N//2, N-3] of the LongCat target's N, as SGLang's
    LongcatFlash model computes them (set_eagle3_layers_to_capture)."""
    _, target = _longcat(tmp_path)
    drafter = fixtures.build("F1-specforge", str(tmp_path / "drafter"), seed=2)
    spec = read_drafter(drafter, target=target).spec
    n = LONGCAT_LAYERS
    assert spec.aux_layers.hidden_state_indices(n) == (2, n // 2, n - 3)
    assert capture_layer_ids(spec, read_target(target)) == (1, n // 2 - 1, n - 4)


@needs_sglang
def test_inspect_resolves_taps_against_a_longcat_target(tmp_path, capsys):
    _, target = _longcat(tmp_path)
    drafter = fixtures.build("F1-specforge", str(tmp_path / "drafter"), seed=2)
    assert main(["inspect", "--no-stock-check", drafter, "--target", target]) == 0
    out = capsys.readouterr().out
    assert f"(longcat_flash, {LONGCAT_LAYERS} layers" in out
    assert "hidden-state indices (input of target layer k): [2, 10, 17]" in out


@pytest.mark.parametrize("wrap", ["text_config", "llm_config", "language_config", "thinker_config"])
def test_the_language_models_part_of_multimodal_configs(wrap):
    inner = {"model_type": "qwen3", "num_hidden_layers": 7, "hidden_size": 96, "vocab_size": 300}
    outer = {"model_type": "some_vl", "vision_config": {"num_hidden_layers": 40, "hidden_size": 1152},
             wrap: {"text_config": inner} if wrap == "thinker_config" else inner}
    info = read_target(outer)
    assert (info.num_layers, info.hidden_size, info.vocab_size, info.model_type) == (7, 96, 300, "qwen3")


@pytest.mark.parametrize("config, field", [
    ({"num_layers": "28", "hidden_size": 64, "vocab_size": 512}, "num_layers"),
    ({"num_hidden_layers": 0, "hidden_size": 64, "vocab_size": 512}, "num_hidden_layers"),
    ({"num_hidden_layers": 4, "d_model": True, "vocab_size": 512}, "d_model"),
    ({"num_hidden_layers": 4, "hidden_size": 64}, "vocab_size / padded_vocab_size"),
    ({"hidden_size": 64, "vocab_size": 512, "num_layers": None}, "num_hidden_layers / num_layers / n_layers / n_layer"),
])
def test_bad_target_values_name_their_key(config, field):
    with pytest.raises(DrafterError) as error:
        read_target(config)
    (problem,) = error.value.problems
    assert problem.field == field and problem.fix


@pytest.mark.parametrize("text", ["[1, 2]", "{not json", "\"config\""])
def test_target_file_that_is_not_a_config(tmp_path, text):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(DrafterError) as error:
        read_target(str(path))
    (problem,) = error.value.problems
    assert problem.file == str(path) and problem.fix


def test_huge_target_config_is_not_parsed(tmp_path):
    path = tmp_path / "config.json"
    with open(path, "wb") as handle:
        handle.write(b"{")
        handle.truncate(5 << 30)  # sparse: claims 5 GB
    with pytest.raises(DrafterError) as error:
        read_target(str(path))
    assert "far larger than a model config" in error.value.problems[0].message
    os.remove(path)
