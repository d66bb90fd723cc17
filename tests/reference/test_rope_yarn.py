"""YaRN rope scaling of the reference drafter against transformers' own rope initialisation."""

import json

import torch
from hypothesis import given, settings, strategies as st

from sglang_eagle_ext.reference.drafter import inverse_frequencies, rope_attention_scaling
from tests.reference.test_drafter import make_spec


def hf_yarn(head_dim, theta, max_positions, parameters):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                         max_position_embeddings=max_positions,
                         rope_parameters={"rope_type": "yarn", "rope_theta": theta, **parameters})
    inv_freq, attention_scaling = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    return inv_freq.double(), attention_scaling


yarn_parameters = st.fixed_dictionaries(
    {"factor": st.sampled_from([2.0, 4.0, 8.0, 40.0, 64.0]),
     "original_max_position_embeddings": st.sampled_from([256, 2048, 4096, 32768])},
    optional={"beta_fast": st.sampled_from([16.0, 32.0, 64.0]),
              "beta_slow": st.sampled_from([0.5, 1.0, 2.0]),
              "truncate": st.booleans(),
              "mscale": st.sampled_from([0.707, 1.0]),
              "attention_factor": st.floats(0.5, 2.0)})


@settings(max_examples=60, deadline=None)
@given(head_dim=st.sampled_from([8, 32, 64, 128]),
       theta=st.sampled_from([10_000.0, 50_000.0, 1_000_000.0]),
       parameters=yarn_parameters, all_dim=st.booleans())
def test_yarn_matches_transformers(head_dim, theta, parameters, all_dim):
    if all_dim and "mscale" in parameters:  # DeepSeek style: temperature ratio
        parameters = {**parameters, "mscale_all_dim": 1.0}
    max_positions = int(parameters["factor"] * parameters["original_max_position_embeddings"])
    spec = make_spec(head_dim=head_dim, rope_theta=theta, max_position_embeddings=max_positions,
                     rope_scaling=json.dumps({"rope_type": "yarn", **parameters}))
    expected_inv, expected_scaling = hf_yarn(head_dim, theta, max_positions, parameters)
    # HF computes the frequencies in float32; ours are float64
    torch.testing.assert_close(inverse_frequencies(spec), expected_inv, rtol=2e-6, atol=0)
    assert abs(rope_attention_scaling(spec) - expected_scaling) < 1e-9


def test_yarn_blends_between_kept_and_interpolated():
    plain = inverse_frequencies(make_spec(head_dim=64, rope_theta=10_000.0))
    spec = make_spec(head_dim=64, rope_theta=10_000.0, max_position_embeddings=32_768,
                     rope_scaling=json.dumps({"type": "yarn", "factor": 8.0,
                                              "original_max_position_embeddings": 4096}))
    scaled = inverse_frequencies(spec)
    assert torch.equal(scaled[:4], plain[:4])  # fast dimensions: extrapolated (kept)
    torch.testing.assert_close(scaled[-4:], plain[-4:] / 8)  # slow ones: interpolated
    assert abs(rope_attention_scaling(spec) - (0.1 * torch.log(torch.tensor(8.0)).item() + 1)) < 1e-7
