"""The reference drafter's RoPE (transformers' initialisation) against SGLang's rotary embedding,
which serves the drafter: the same cos and sin at every position for each scaling a drafter
config can name."""

import json

import pytest
import torch
from hypothesis import given, settings, strategies as st

from sglang_eagle_ext.reference.drafter import ReferenceDrafter
from tests.reference.test_drafter import make_spec
from tests.conftest import needs_sglang

POSITIONS = 64


def reference_cos_sin(spec):
    drafter = ReferenceDrafter(spec).double()
    positions = torch.arange(POSITIONS, dtype=torch.float64)
    angles = positions[:, None] * drafter._inv_freq[None, :]
    return angles.cos() * drafter._rope_scale, angles.sin() * drafter._rope_scale


def sglang_cos_sin(spec):
    from sglang.srt.layers.rotary_embedding import get_rope

    rope = get_rope(spec.head_dim, rotary_dim=spec.head_dim, max_position=spec.max_position_embeddings,
                    base=spec.rope_theta, is_neox_style=True,
                    rope_scaling=None if spec.rope_scaling is None else json.loads(spec.rope_scaling),
                    dtype=torch.float32)
    cache = rope.cos_sin_cache[:POSITIONS].double()
    return cache.chunk(2, dim=-1)


def assert_same_rotation(spec):
    for ours, sglang in zip(reference_cos_sin(spec), sglang_cos_sin(spec)):
        torch.testing.assert_close(ours, sglang, rtol=0, atol=2e-5)


yarn = st.fixed_dictionaries(
    {"factor": st.sampled_from([2.0, 4.0, 8.0, 32.0]),
     "original_max_position_embeddings": st.sampled_from([256, 2048, 4096])},
    optional={"beta_fast": st.sampled_from([16.0, 32.0]), "beta_slow": st.sampled_from([0.5, 1.0, 2.0])})


@needs_sglang
@settings(max_examples=25, deadline=None)
@given(head_dim=st.sampled_from([32, 64, 128]), theta=st.sampled_from([10_000.0, 150_000.0, 1_000_000.0]),
       parameters=yarn)
def test_yarn_matches_sglang(head_dim, theta, parameters):
    max_positions = int(parameters["factor"] * parameters["original_max_position_embeddings"])
    assert_same_rotation(make_spec(head_dim=head_dim, rope_theta=theta, max_position_embeddings=max_positions,
                                   rope_scaling=json.dumps({"rope_type": "yarn", **parameters})))


@needs_sglang
@pytest.mark.parametrize("scaling", [
    None,
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192},
])
def test_plain_linear_and_llama3_match_sglang(scaling):
    assert_same_rotation(make_spec(head_dim=64, rope_theta=500_000.0, max_position_embeddings=131_072,
                                   rope_scaling=None if scaling is None else json.dumps(scaling)))


def test_yarn_blends_between_kept_and_interpolated():
    plain = ReferenceDrafter(make_spec(head_dim=64, rope_theta=10_000.0))._inv_freq
    spec = make_spec(head_dim=64, rope_theta=10_000.0, max_position_embeddings=32_768,
                     rope_scaling=json.dumps({"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}))
    drafter = ReferenceDrafter(spec)
    torch.testing.assert_close(drafter._inv_freq[:4], plain[:4])  # fast dimensions: extrapolated (kept)
    torch.testing.assert_close(drafter._inv_freq[-4:], plain[-4:] / 8)  # slow ones: interpolated
    assert abs(drafter._rope_scale - (0.1 * torch.log(torch.tensor(8.0)).item() + 1)) < 1e-6
