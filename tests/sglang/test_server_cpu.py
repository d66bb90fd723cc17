"""Stock SGLang serving EAGLE3 with a 2-layer, 4-aux speculators drafter through the plugin (CPU).

The engine's greedy output must equal plain greedy decoding of the target (HF transformers,
fp32, the same weights): speculative decoding is lossless whatever the drafter proposes. The
acceptance counters must show that drafting actually ran.
"""

import pytest

from sglang_eagle_ext.demo.run import plain_greedy, serve_greedy
from sglang_eagle_ext.testing.matched_drafter import build_matched_drafter

NEW_TOKENS = 12


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from sglang_eagle_ext.demo.tiny_target import TinyTargetSettings, build_tiny_target

    root = tmp_path_factory.mktemp("server")
    target = build_tiny_target(str(root / "target"), TinyTargetSettings(num_layers=8))
    drafter = build_matched_drafter(str(root / "drafter"), target, layers=2, num_aux=4,
                                    fc_norm=True, dialect="speculators", seed=3)
    return target, drafter


def test_eagle3_greedy_equals_plain_greedy(models):
    target, drafter = models
    served = serve_greedy(target, drafter, "cpu", num_steps=3, new_tokens=NEW_TOKENS, timeout=420)
    assert served.activation and all("sglang_eagle_ext.sglang.model.LlamaForCausalLMEagle3" in line
                                     for line in served.activation if "drafts served" in line)
    assert [o["output_ids"] for o in served.outputs] == plain_greedy(target, NEW_TOKENS)
    for output in served.outputs:
        assert output["completion_tokens"] == NEW_TOKENS
        assert 0 < output["spec_verify_ct"] <= NEW_TOKENS
