"""Real producers' layouts (``tests/kit/producer_layouts.py``), beyond the format catalogue.

Each served layout reads into the description its producer's semantics give, field by field; its
tensors come back under canonical names bit for bit; loaded through SGLang's path on CPU it
computes what the reference drafter computes. Each refused layout gets its one clear error. The
docs/producers.md's layout table is the one generated from the same declarations.
"""

import json
import re
import zlib
from pathlib import Path

import pytest
import torch

from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.drafter.target import read_target
from sglang_eagle_ext.errors import DrafterError
from sglang_eagle_ext.sglang.compat.config_loading import sglang_config_dict
from tests.kit.producer_layouts import LAYOUTS, build, config_sources

SERVED = sorted(name for name, layout in LAYOUTS.items() if layout.refusal is None)
REFUSED = sorted(name for name, layout in LAYOUTS.items() if layout.refusal is not None)
REPO = Path(__file__).resolve().parents[2]


def seed_of(name: str) -> int:
    """A fixed seed per layout (``hash`` of a string changes between processes)."""
    return zlib.crc32(name.encode()) % 100_000


def built(name: str, tmp_path) -> str:
    return build(LAYOUTS[name], str(tmp_path / "drafter"), seed_of(name))


def described(spec, layout) -> dict:
    """The spec's value for every field ``layout`` states an expectation for."""
    found = {}
    for field in layout.expected:
        if field == "aux_indices":
            found[field] = spec.aux_layers.hidden_state_indices(layout.target["num_hidden_layers"])
        elif field == "rope_scaling":
            found[field] = None if spec.rope_scaling is None else json.loads(spec.rope_scaling)
        else:
            found[field] = getattr(spec, field)
    return found


def test_the_layouts_cover_every_producer_named_in_the_issue():
    assert len(LAYOUTS) >= 12
    producers = {layout.producer for layout in LAYOUTS.values()}
    assert producers >= {"vLLM speculators", "NVIDIA ModelOpt", "SpecForge", "TorchSpec"}


@pytest.mark.parametrize("name", SERVED)
def test_layout_reads_as_its_producer_wrote_it(name, tmp_path):
    layout = LAYOUTS[name]
    target = read_target(layout.target)
    spec = read_drafter(built(name, tmp_path), target=target).spec
    assert described(spec, layout) == layout.expected
    # SGLang is told to capture the same states, in its layer-output convention
    sglang_ids = sglang_config_dict(spec, target)["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert sglang_ids == [i - 1 for i in layout.expected["aux_indices"]]


@pytest.mark.parametrize("name", SERVED)
def test_layout_tensors_come_back_canonical_and_bit_exact(name, tmp_path):
    layout = LAYOUTS[name]
    loaded = read_drafter(built(name, tmp_path)).load_tensors()
    originals = layout.tensors(seed_of(name))
    assert set(loaded) == set(originals) - {"t2d"}  # t2d is only checked against d2t
    for key, tensor in loaded.items():
        assert torch.equal(tensor, originals[key]), key


@pytest.mark.parametrize("name", SERVED)
def test_layout_through_sglang_matches_the_reference(name, tmp_path, sglang_dist, no_grad):
    from tests.kit.sglang_forward import assert_forward_matches_reference

    layout = LAYOUTS[name]
    assert_forward_matches_reference(built(name, tmp_path), read_target(layout.target), seed=seed_of(name))


@pytest.mark.parametrize("name", REFUSED)
def test_layout_is_refused_with_its_reason(name, tmp_path):
    refusal = LAYOUTS[name].refusal
    directory = built(name, tmp_path)
    with pytest.raises(DrafterError) as info:
        read_drafter(directory)
    problems = info.value.problems
    assert any(refusal.field in p.field and refusal.message in p.message for p in problems), \
        [str(p) for p in problems]
    for problem in problems:
        assert problem.file.startswith(directory) and problem.field and problem.fix, problem


def test_every_layout_cites_its_producer_code():
    configs = config_sources()
    for layout in LAYOUTS.values():
        assert layout.sources, layout.name
        for source in layout.sources:
            assert re.fullmatch(r"[0-9a-f]{40}", source.commit), source
            assert source.url.startswith(f"https://github.com/{source.repo}/blob/{source.commit}/")
        if layout.template is not None:
            assert layout.template in configs, f"{layout.template} has no row in SOURCES.md"
    # every upstream config copy has its row, and every row its file
    directory = REPO / "tests" / "kit" / "drafter_configs"
    assert set(configs) == {path.stem for path in directory.glob("*.json")}


def test_docs_table_names_every_layout():
    # the table itself is one of docs/producers.md's generated blocks (tests/test_readme_numbers.py)
    page = (REPO / "docs" / "producers.md").read_text(encoding="utf-8")
    for name, layout in LAYOUTS.items():
        assert f"`{name}`" in page
        if layout.refusal is not None:
            assert f"refused: {layout.refusal.reason}" in page
