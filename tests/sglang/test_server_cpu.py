"""Stock SGLang serving EAGLE3 with a 2-layer, 4-aux speculators drafter through the plugin (CPU).

The engine's greedy output must equal plain greedy decoding of the target (HF transformers,
fp32, the same weights): speculative decoding is lossless whatever the drafter proposes. The
acceptance counters must show that drafting actually ran.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from sglang_eagle_ext.sglang.compat import cpu as cpu_shims

from sglang_eagle_ext.testing.matched_drafter import build_matched_drafter

HERE = os.path.dirname(os.path.abspath(__file__))
SITE = cpu_shims.SITE_DIR


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from sglang_eagle_ext.demo.tiny_target import TinyTargetSettings, build_tiny_target

    root = tmp_path_factory.mktemp("server")
    target = build_tiny_target(str(root / "target"), TinyTargetSettings(num_layers=8))
    drafter = build_matched_drafter(str(root / "drafter"), target, layers=2, num_aux=4,
                                    fc_norm=True, dialect="speculators", seed=3)
    return target, drafter


def hf_greedy(target: str, prompts: list[str], new_tokens: int) -> list[list[int]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    outputs = []
    for prompt in prompts:
        ids = torch.tensor([tokenizer.encode(prompt)])
        prompt_length = ids.shape[1]
        with torch.no_grad():
            for _ in range(new_tokens):  # argmax every step, EOS included (ignore_eos above)
                next_id = model(ids).logits[0, -1].argmax()
                ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
        outputs.append(ids[0, prompt_length:].tolist())
    return outputs


def test_eagle3_greedy_equals_plain_greedy(models):
    from tests.sglang import cpu_engine_run

    target, drafter = models
    env = dict(os.environ, PYTHONPATH=os.path.abspath(SITE), TRITON_INTERPRET="1")
    env.pop("SGLANG_EAGLE_EXT", None)
    run = subprocess.run([sys.executable, os.path.join(HERE, "cpu_engine_run.py"), target, drafter],
                         capture_output=True, text=True, env=env, timeout=420)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-5000:]
    served = [line for line in run.stderr.splitlines() if line.startswith("sglang-eagle-ext:")]
    assert served and all("sglang_eagle_ext.sglang.model.LlamaForCausalLMEagle3" in l for l in served)
    results = json.loads(lines[0][len("RESULT "):])

    expected = hf_greedy(target, cpu_engine_run.PROMPTS, cpu_engine_run.NEW_TOKENS)
    assert [r["output_ids"] for r in results] == expected
    for result in results:
        assert result["meta_info"]["completion_tokens"] == cpu_engine_run.NEW_TOKENS
        assert 0 < result["meta_info"]["spec_verify_ct"] <= cpu_engine_run.NEW_TOKENS
