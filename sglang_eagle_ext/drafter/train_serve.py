"""Where a producer's export says to serve a drafter otherwise than that producer's own module trained
it: each known difference, recognised from the description, with the producer's code cited.

The package serves a drafter as its ``config.json`` says (SGLang and vLLM do the same), so these are
warnings, not corrections: the config may have been edited to what training used, or the drafter
trained by a release that fixed the difference. Each was found by running the producer's own code
(``tests/producer_files``, ``scripts/producers/``), where the test asserts the warning appears
exactly for the files whose served forward differs from the producer's module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from sglang_eagle_ext.drafter.spec import Dialect, DrafterSpec

# The RoPE base HF's LlamaRotaryEmbedding falls back to when built without one.
HF_DEFAULT_ROPE_BASE = 10000.0
# What ModelOpt 0.47's HF export writes into every EAGLE config unless told otherwise.
MODELOPT_EXPORT_ROPE = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048}


def _scaling(spec: DrafterSpec) -> dict | None:
    return None if spec.rope_scaling is None else json.loads(spec.rope_scaling)


def _modelopt_injected_yarn(spec: DrafterSpec) -> bool:
    return spec.dialect is Dialect.MODELOPT and _scaling(spec) == MODELOPT_EXPORT_ROPE


def _angelslim_ignored_base(spec: DrafterSpec) -> bool:
    return (spec.dialect is Dialect.ANGELSLIM and spec.rope_scaling is None
            and spec.rope_theta != HF_DEFAULT_ROPE_BASE)


@dataclass(frozen=True)
class TrainServeDifference:
    applies: Callable[[DrafterSpec], bool]
    text: Callable[[DrafterSpec], str]


DIFFERENCES = (
    TrainServeDifference(_modelopt_injected_yarn, lambda spec: (
        f"config.json's rope_scaling {json.dumps(_scaling(spec))} is what ModelOpt 0.47's export writes by "
        "default (eagle_export_rope_scaling, nvidia-modelopt==0.47.0 modelopt/torch/speculative/config.py:380-387, "
        "written by modelopt/torch/export/plugins/hf_spec_export.py:213-218), while its EAGLE module trains with "
        "the draft config's plain RoPE (modelopt/torch/speculative/plugins/modeling_eagle.py:82-84; "
        "eagle/default_config.py:24): served as written, YaRN rescales every position and the drafts are not "
        "the ones trained. If the head was trained with ModelOpt's default draft RoPE, remove rope_scaling from "
        "config.json (or export with eagle_export_rope_scaling={}); keep it if training set this YaRN itself")),
    TrainServeDifference(_angelslim_ignored_base, lambda spec: (
        f"config.json's rope_theta {spec.rope_theta:g} is not the base AngelSlim 0.5.0 trained with: its draft "
        "attention builds LlamaRotaryEmbedding without a base for plain RoPE (angelslim==0.5.0 angelslim/"
        "compressor/speculative/train/models/draft/llama_eagle3.py:261,270), whose default is "
        f"{HF_DEFAULT_ROPE_BASE:g} (llama_eagle3.py:36): served as written, the drafts are not the ones trained. "
        f"If it was trained with AngelSlim 0.5.0, set rope_theta to {HF_DEFAULT_ROPE_BASE:g} in config.json "
        "(and rope_parameters.rope_theta where written); keep it if its trainer passed the base")),
)


def producer_warnings(spec: DrafterSpec) -> list[str]:
    """The train/serve differences that apply to ``spec``, one sentence each with its evidence."""
    return [difference.text(spec) for difference in DIFFERENCES if difference.applies(spec)]
