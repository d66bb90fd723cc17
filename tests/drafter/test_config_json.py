"""Every dialect survives the round trip: read -> canonical config + canonical tensors -> read."""

from __future__ import annotations

import dataclasses
import random

import pytest

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.drafter.model_dir import membership_mask
from sglang_eagle_ext.drafter.spec import canonical_config
from tests.kit import fixtures

PROVENANCE = {"path", "dialect", "architecture", "files", "notes", "aux_layers"}


@pytest.mark.parametrize("name", sorted(fixtures.FIXTURES))
def test_canonical_config_reads_back_as_the_same_drafter(name, tmp_path):
    fixtures.build(name, str(tmp_path / "original"), seed=random.randrange(1 << 30))
    original = read_drafter(tmp_path / "original")
    spec = original.spec
    tensors = original.load_tensors()
    if spec.has_vocab_map:
        tensors["t2d"] = membership_mask(tensors["d2t"], spec.vocab_size)
    fixtures.write_checkpoint(str(tmp_path / "copy"), canonical_config(spec), tensors)
    copy = read_drafter(tmp_path / "copy").spec
    for field in dataclasses.fields(spec):
        if field.name not in PROVENANCE:
            assert getattr(copy, field.name) == getattr(spec, field.name), field.name
    n = fixtures.TARGET_LAYERS
    assert copy.aux_layers.hidden_state_indices(n) == spec.aux_layers.hidden_state_indices(n)


def test_embedding_tap_is_written_as_a_hidden_state_index(tmp_path):
    fixtures.build("F8-speculators-4-aux", str(tmp_path / "original"), seed=3)
    spec = read_drafter(tmp_path / "original").spec
    config = canonical_config(dataclasses.replace(
        spec, aux_layers=dataclasses.replace(spec.aux_layers, declared=(0, 5, 9, 11))))
    assert config["eagle_aux_hidden_state_layer_ids"] == [0, 5, 9, 11]
    assert "eagle_aux_hidden_state_layer_ids" not in config["eagle_config"]
