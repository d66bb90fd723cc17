"""Write a drafter the way another producer's export code writes it: its config keys, its tensor names.

The demo's distiller trains one drafter; written in the layout of a producer whose checkpoints
stock SGLang misreads (docs/stock-sglang.md), the same trained weights can be served by stock
SGLang and by this plugin side by side. Each writer follows the producer's code at the commit this
package's layout fixtures cite (``tests/kit/drafter_configs/SOURCES.md``):

* ``sglang``: this package's own flat config (:func:`.spec.canonical_config`), ``layers.{i}``;
* ``speculators``: ``Eagle3Speculator`` with a ``transformer_layer_config`` and hidden-state indices
  at the top level (vllm-project/speculators@c05b95b3 src/speculators/convert/eagle/eagle3_converter.py);
* ``specforge``: SpecForge's flat 1-layer export, ``midlayer.*``, EAGLE 3.1's ``fc_norm`` and its
  ``norm_output: true`` (final norm before lm_head; the carried state is the pre-norm one)
  (sgl-project/SpecForge@a6b6b023 specforge/export/to_sglang.py, specforge/modeling/draft/llama3_eagle.py);
* ``nemo``: NeMo Automodel's config, the target's own config with the recipe's keys over it (so
  ``num_hidden_layers`` is the target's depth), ``model.`` names
  (NVIDIA-NeMo/Automodel@36044ad3 nemo_automodel/recipes/llm/train_eagle3.py);
* ``modelopt-hf``: ModelOpt's HF export, ``eagle_config`` with layer-output ids, ``d2t`` without
  ``t2d``, later layers plain Llama decoder layers (NVIDIA/Model-Optimizer@a2fbac7b
  modelopt/torch/export/plugins/hf_spec_export.py); a drafter not trained with ModelOpt's layer-0
  double norm (``hidden_input_layernorm``) also gets that key, false;
* ``modelopt-megatron``: ModelOpt's Megatron export of a deep head, ``LlamaForCausalLMEagle3Deep``,
  ``midlayer.{i}.*``, later layers normalised by ``hidden_norm``
  (NVIDIA/Model-Optimizer@a2fbac7b modelopt/torch/export/unified_export_megatron.py).

A drafter a producer cannot express (SpecForge carrying the normed state, say) is refused with
the reason. The written directory is read back and must give the same description and tensors.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

import torch
from safetensors.torch import save_file

from sglang_eagle_ext.drafter.model_dir import membership_mask, staged_directory, write_json
from sglang_eagle_ext.drafter.reader import read_drafter
from sglang_eagle_ext.drafter.dialects import NEMO_RUN_CONFIG, nemo_run_config_text
from sglang_eagle_ext.drafter.spec import DrafterSpec, LaterLayerNorm, canonical_config

# Fields that say where a checkpoint came from, not what it computes.
_PROVENANCE = {"path", "dialect", "architecture", "files", "notes", "aux_layers", "torch_dtype"}
# ModelOpt's `eagle_config` switches of a plain EAGLE-3 head (hf_spec_export.py's defaults).
_MODELOPT_EAGLE = {"use_aux_hidden_state": True, "use_input_layernorm_in_first_layer": True,
                   "use_last_layernorm": True, "use_mtp_layernorm": False, "next_layer_regular": True,
                   "parallel_draft_step": 1, "parallel_draft_heads_num_layers": 1}


class LayoutMismatch(ValueError):
    """The drafter has a feature the producer's layout cannot express."""


def _require(layout: str, condition: bool, what: str) -> None:
    if not condition:
        raise LayoutMismatch(f"{layout} layout: {what}")


def _llama_keys(spec: DrafterSpec) -> dict[str, Any]:
    """The Hugging Face LlamaConfig keys of the draft decoder."""
    return {"model_type": "llama", "hidden_size": spec.hidden_size, "intermediate_size": spec.intermediate_size,
            "num_hidden_layers": spec.num_layers, "num_attention_heads": spec.num_attention_heads,
            "num_key_value_heads": spec.num_key_value_heads, "head_dim": spec.head_dim,
            "hidden_act": spec.hidden_act, "rms_norm_eps": spec.rms_norm_eps, "rope_theta": spec.rope_theta,
            "rope_scaling": None if spec.rope_scaling is None else json.loads(spec.rope_scaling),
            "max_position_embeddings": spec.max_position_embeddings, "vocab_size": spec.vocab_size,
            "attention_bias": spec.attention_bias, "mlp_bias": spec.mlp_bias, "tie_word_embeddings": False,
            "torch_dtype": "float32"}


def _layer_output_ids(spec: DrafterSpec) -> list[int]:
    """SGLang's and ModelOpt's convention: the output of layer j is hidden-state index j + 1."""
    return [i - 1 for i in spec.aux_layers.hidden_state_indices()]


def _renamed(tensors: dict[str, torch.Tensor], rename: Callable[[str], str]) -> dict[str, torch.Tensor]:
    return {rename(name): tensor for name, tensor in tensors.items()}


def _numbered_midlayer(name: str) -> str:
    return "midlayer." + name[len("layers."):] if name.startswith("layers.") else name


def _sglang(spec, tensors, target):
    config = dict(canonical_config(spec), torch_dtype="float32", bos_token_id=target.get("bos_token_id"),
                  eos_token_id=target.get("eos_token_id"))
    return config, tensors


def _speculators(spec, tensors, target):
    _require("speculators", spec.later_layer_norm in (None, LaterLayerNorm.INPUT_LAYERNORM),
             "layers after the first are plain Llama decoder layers (input_layernorm)")
    config = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
              "speculators_version": "0.8.0",
              "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                     "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                     "verifier": {"name_or_path": target["_name_or_path"],
                                                  "architectures": target.get("architectures")}},
              "transformer_layer_config": dict(_llama_keys(spec), use_cache=True),
              "draft_vocab_size": spec.draft_vocab_size, "target_hidden_size": spec.target_hidden_size,
              "norm_before_residual": spec.norm_before_residual, "norm_before_fc": spec.norm_before_fc,
              "fc_norm": spec.fc_norm, "norm_output": spec.norm_output,
              "eagle_aux_hidden_state_layer_ids": list(spec.aux_layers.hidden_state_indices()),
              "embed_requires_grad": False}
    return config, tensors


def _specforge(spec, tensors, target):
    _require("specforge", spec.num_layers == 1, "SpecForge's export holds one draft layer (`midlayer.*`)")
    _require("specforge", not spec.norm_output, "SpecForge always carries the pre-norm hidden state")
    config = dict(_llama_keys(spec), architectures=["LlamaForCausalLMEagle3"],
                  draft_vocab_size=spec.draft_vocab_size, target_hidden_size=spec.target_hidden_size,
                  # SpecForge's `norm_output`: the final norm feeds lm_head (the only servable value)
                  norm_output=True, use_cache=True, use_sliding_window=False,
                  eagle_config={"eagle_aux_hidden_state_layer_ids": _layer_output_ids(spec)})
    if spec.fc_norm:
        config["fc_norm"] = True
    return config, _renamed(tensors, lambda n: "midlayer." + n[len("layers.0."):] if n.startswith("layers.0.") else n)


def _nemo(spec, tensors, target):
    for key, value in (("hidden_size", spec.hidden_size), ("intermediate_size", spec.intermediate_size),
                       ("num_attention_heads", spec.num_attention_heads),
                       ("num_key_value_heads", spec.num_key_value_heads), ("rms_norm_eps", spec.rms_norm_eps),
                       ("attention_bias", spec.attention_bias), ("mlp_bias", spec.mlp_bias)):
        taken = target.get(key, False if key.endswith("_bias") else None)  # LlamaConfig's bias default
        _require("nemo", taken == value, f"the draft takes the target's {key} ({taken}, this drafter has {value})")
    # NeMo's Eagle3LlamaAttention builds o_proj with attention_bias too (NVIDIA-NeMo/Automodel@fb2f0e4e
    # nemo_automodel/components/speculative/eagle/draft_llama.py)
    _require("nemo", spec.o_proj_bias == spec.attention_bias,
             f"attention_bias {spec.attention_bias} means an o_proj bias in NeMo's draft "
             f"(this drafter: {spec.o_proj_bias})")
    config = {name: value for name, value in target.items() if not name.startswith("_")}
    config.update(draft_vocab_size=spec.draft_vocab_size, target_hidden_size=spec.target_hidden_size,
                  architectures=["LlamaEagle3DraftModel"], tie_word_embeddings=False, attn_implementation="eager",
                  fc_norm=spec.fc_norm, norm_output=spec.norm_output, parallel_drafting=False)
    unprefixed = ("lm_head.weight", "d2t", "t2d")
    return config, _renamed(tensors, lambda n: n if n in unprefixed else "model." + n)


def _modelopt(layout: str, spec: DrafterSpec, later: LaterLayerNorm) -> None:
    _require(layout, spec.later_layer_norm in (None, later), f"layers after the first read `{later.value}`")
    _require(layout, not (spec.fc_norm or spec.norm_output or spec.norm_before_fc or spec.norm_before_residual),
             "ModelOpt's EAGLE-3 head has no aux norms and carries the pre-norm state")


def _modelopt_hf(spec, tensors, target):
    _modelopt("modelopt-hf", spec, LaterLayerNorm.INPUT_LAYERNORM)
    config = dict(_llama_keys(spec), architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=spec.draft_vocab_size,
                  eagle_config=dict(_MODELOPT_EAGLE, eagle_aux_hidden_state_layer_ids=_layer_output_ids(spec)))
    if not spec.hidden_input_layernorm:
        # ModelOpt's module always trains layer 0 on hidden_norm(input_layernorm(h)); a drafter trained
        # without it says so in the one key this package reads for it (stock SGLang ignores the key)
        config["hidden_input_layernorm"] = False
    return config, {name: t for name, t in tensors.items() if name != "t2d"}


def _modelopt_megatron(spec, tensors, target):
    _modelopt("modelopt-megatron", spec, LaterLayerNorm.HIDDEN_NORM)
    config = dict(_llama_keys(spec), architectures=["LlamaForCausalLMEagle3Deep"],
                  draft_vocab_size=spec.draft_vocab_size,
                  eagle_config=dict(_MODELOPT_EAGLE, eagle_aux_hidden_state_layer_ids=_layer_output_ids(spec)))
    return config, _renamed({name: t for name, t in tensors.items() if name != "t2d"}, _numbered_midlayer)


# layout -> (spec, canonical tensors with t2d, target config with `_name_or_path`) -> (config, tensors)
WRITERS: dict[str, Callable[[DrafterSpec, dict, dict], tuple[dict, dict]]] = {
    "sglang": _sglang, "speculators": _speculators, "specforge": _specforge, "nemo": _nemo,
    "modelopt-hf": _modelopt_hf, "modelopt-megatron": _modelopt_megatron}
LAYOUTS = tuple(WRITERS)


def write_in_layout(directory: str, layout: str, spec: DrafterSpec, tensors: dict[str, torch.Tensor],
                    target_dir: str, extra_files: dict[str, Any] | None = None) -> str:
    """Write the drafter (``spec`` and its canonical tensors) into ``directory`` as ``layout``'s
    producer writes it, atomically, and check that it reads back as the same drafter.
    ``extra_files``: JSON files written next to it (name -> content)."""
    if layout not in WRITERS:
        raise LayoutMismatch(f"unknown layout {layout!r}; one of {', '.join(LAYOUTS)}")
    with open(os.path.join(target_dir, "config.json"), encoding="utf-8") as handle:
        target = dict(json.load(handle), _name_or_path=os.path.abspath(target_dir))
    canonical = {name: t.contiguous() for name, t in tensors.items()}
    if spec.has_vocab_map:
        canonical["t2d"] = membership_mask(canonical["d2t"], spec.vocab_size)
    config, written = WRITERS[layout](spec, dict(canonical), target)
    with staged_directory(directory) as staging:
        save_file(written, os.path.join(staging, "model.safetensors"))
        write_json(os.path.join(staging, "config.json"), config)
        for name, content in (extra_files or {}).items():
            write_json(os.path.join(staging, name), content)
        if layout == "nemo":  # NeMo keeps the trained taps only in its run config (layer-output ids)
            with open(os.path.join(staging, NEMO_RUN_CONFIG), "w", encoding="utf-8") as handle:
                handle.write(nemo_run_config_text(list(spec.aux_layers.sglang_layer_ids(target["num_hidden_layers"]))))
        checkpoint = read_drafter(staging, target=target_dir)
        read = checkpoint.spec
        differing = [f.name for f in dataclasses.fields(spec) if f.name not in _PROVENANCE
                     and getattr(spec, f.name) != getattr(read, f.name)]
        depth = target.get("num_hidden_layers")
        if spec.aux_layers.hidden_state_indices(depth) != read.aux_layers.hidden_state_indices(depth):
            differing.append("aux_layers")
        loaded = checkpoint.load_tensors(torch.float32)
        expected = {name: t for name, t in canonical.items() if name != "t2d"}
        if set(loaded) != set(expected) or any(not torch.equal(loaded[n], expected[n].to(loaded[n].dtype))
                                                for n in expected):
            differing.append("tensors")
        if differing:
            raise AssertionError(f"{layout} layout: the written drafter reads back with different "
                                 f"{', '.join(differing)}")
    return directory
