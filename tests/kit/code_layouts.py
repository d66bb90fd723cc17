"""Drafter checkpoints laid out the way a producer's own training or export code writes them.

The templates of :mod:`.fixtures` are published config files; the layouts here are what a
producer's *code* produces, where no published file shows it: the config a trainer serialises
from its target's config class, the tensors its model class registers and its exporter keeps.
Each builder follows the lines cited in ``drafter_configs/SOURCES.md`` ("Layouts built from
code"), shrunk to the tiny geometry of :class:`.fixtures.Geometry`. ``SERVED`` must be read and
served; ``REFUSED`` must be refused with one clear problem naming the field listed with it.
"""

from __future__ import annotations

import json
from typing import Callable

import torch

from tests.kit.fixtures import (NEMO_DEFAULT_RUN, TARGET_LAYERS, Geometry, canonical_tensors, rename, shrink,
                                template, write_checkpoint)

# Keys NeMo Automodel's TrainEagle3Recipe writes over the target's config dict
# (nemo_automodel/recipes/llm/train_eagle3.py:544-580).
def _nemo_draft_config(target: dict, g: Geometry, **recipe) -> dict:
    config = dict(target)
    config.update(draft_vocab_size=g.draft_vocab, target_hidden_size=target["hidden_size"],
                  architectures=["LlamaEagle3DraftModel"], tie_word_embeddings=False,
                  attn_implementation="eager", fc_norm=bool(recipe.get("fc_norm", False)),
                  norm_output=bool(recipe.get("norm_output", False)), parallel_drafting=False)
    return config


def _nemo_saved_config(target, g: Geometry, **recipe) -> dict:
    """The config.json NeMo saves for a drafter of ``target`` (a transformers config): the
    target's config class over the recipe's keys, every field written."""
    draft = type(target).from_dict(_nemo_draft_config(target.to_dict(), g, **recipe))
    return json.loads(draft.to_json_string(use_diff=False))


def _add_biases(tensors: dict[str, torch.Tensor], g: Geometry, seed: int, *, o_proj: bool,
                mlp: bool) -> dict[str, torch.Tensor]:
    """Canonical tensors plus the o_proj / MLP biases of HF Llama's ``attention_bias`` (all four
    projections) and ``mlp_bias`` (all three)."""
    gen = torch.Generator().manual_seed(seed + 7)
    out = dict(tensors)
    for i in range(g.layers):
        p = f"layers.{i}."
        if o_proj:
            out[p + "self_attn.o_proj.bias"] = torch.randn(g.hidden, generator=gen) * 0.05
        if mlp:
            for proj, size in (("gate_proj", g.inter), ("up_proj", g.inter), ("down_proj", g.hidden)):
                out[f"{p}mlp.{proj}.bias"] = torch.randn(size, generator=gen) * 0.05
    return out


def _tiny(g: Geometry) -> dict:
    return dict(hidden_size=g.hidden, intermediate_size=g.inter, num_attention_heads=g.heads,
                num_key_value_heads=g.kv_heads, head_dim=g.head_dim, vocab_size=g.vocab,
                num_hidden_layers=TARGET_LAYERS)


def nemo_gpt_oss(d: str, seed: int) -> str:
    """NeMo Automodel's GptOssEagle3DraftModel: the gpt-oss target's own config (GptOssConfig:
    attention_bias true, YaRN rope_parameters, the target's layer_types and MoE keys) with the
    recipe's keys; q/k/v *and* o_proj carry biases (Eagle3LlamaAttention builds all four with
    attention_bias), the MLP none (GptOssConfig has no mlp_bias)."""
    from transformers import GptOssConfig

    g = Geometry(embed=True, attention_bias=True)
    target = GptOssConfig(**_tiny(g), max_position_embeddings=256, sliding_window=16, rope_parameters={
        "rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
        "original_max_position_embeddings": 64, "rope_theta": 150000.0})
    target.architectures = ["GptOssForCausalLM"]
    config = _nemo_saved_config(target, g)
    tensors = _add_biases(canonical_tensors(g, seed), g, seed, o_proj=True, mlp=False)
    return write_checkpoint(d, config, rename(tensors, model_prefix=True), run_config=NEMO_DEFAULT_RUN)


def nemo_llama_biases(d: str, seed: int) -> str:
    """NeMo Automodel's LlamaEagle3DraftModel for a Llama target with ``attention_bias`` and
    ``mlp_bias`` (LlamaConfig's two bias switches, both read by the draft's layers)."""
    from transformers import LlamaConfig

    g = Geometry(embed=True, attention_bias=True)
    target = LlamaConfig(**_tiny(g), attention_bias=True, mlp_bias=True, max_position_embeddings=256)
    target.architectures = ["LlamaForCausalLM"]
    config = _nemo_saved_config(target, g)
    tensors = _add_biases(canonical_tensors(g, seed), g, seed, o_proj=True, mlp=True)
    return write_checkpoint(d, config, rename(tensors, model_prefix=True), run_config=NEMO_DEFAULT_RUN)


def nemo_gemma4_gelu(d: str, seed: int) -> str:
    """NeMo Automodel's Gemma4Eagle3DraftModel: the Gemma 4 text config normalised as its
    ``_normalize_gemma4_draft_config`` does (``hidden_act`` from ``hidden_activation``, i.e.
    ``gelu_pytorch_tanh``; the global RoPE base flattened to ``rope_theta``, ``rope_parameters``
    cleared, ``partial_rotary_factor`` 1), then the recipe's keys."""
    from transformers import Gemma4TextConfig

    g = Geometry(embed=True)
    target = Gemma4TextConfig(**_tiny(g), max_position_embeddings=256, sliding_window=16).to_dict()
    target["hidden_act"] = target["hidden_activation"]
    target["rope_theta"] = target["rope_parameters"]["full_attention"]["rope_theta"]
    target.update(rope_parameters=None, rope_scaling=None, partial_rotary_factor=1.0)
    config = _nemo_draft_config(target, g)
    return write_checkpoint(d, config, rename(canonical_tensors(g, seed), model_prefix=True),
                            run_config=NEMO_DEFAULT_RUN)


def _angelslim(d: str, seed: int, embed: bool) -> str:
    g = Geometry(embed=embed)
    config = shrink(template("Tencent__AngelSlim-configs-qwen3-4b-eagle3"), g)
    if config["tie_word_embeddings"] is not True:  # the layout imitated is the published tied one
        raise RuntimeError("the AngelSlim config template no longer says tie_word_embeddings: true; "
                           "refresh it from the published config or change this layout")
    return write_checkpoint(d, config, rename(canonical_tensors(g, seed), midlayer=True))


def angelslim_tied_config(d: str, seed: int) -> str:
    """AngelSlim's Eagle3LlamaForCausalLM saved by its ZeRO-3 path (``embed`` keys dropped) from
    a config that says ``tie_word_embeddings: true``; the model always builds its own
    ``lm_head`` of ``draft_vocab_size`` rows, which the checkpoint holds."""
    return _angelslim(d, seed, embed=False)


def angelslim_tied_config_with_embed(d: str, seed: int) -> str:
    """The same drafter saved by the HF Trainer path, which keeps ``embed_tokens``."""
    return _angelslim(d, seed, embed=True)


def modelopt_no_aux(d: str, seed: int) -> str:
    """A ModelOpt EAGLE head trained with ``use_aux_hidden_state: false`` (ModelOpt's default
    EAGLE config) and exported by its EagleExporter: vanilla decoder layers of width H (no fc,
    no hidden_norm, the first attention not widened to 2H), the base model's lm_head copied in,
    the llama template config with the eagle_config keys filled from the head's config."""
    g = Geometry(fc=False, draft_vocab=512)
    tensors = canonical_tensors(g, seed)
    gen = torch.Generator().manual_seed(seed + 11)
    q, kv = g.heads * g.head_dim, g.kv_heads * g.head_dim
    for proj, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
        tensors[f"layers.0.self_attn.{proj}.weight"] = torch.randn(rows, g.hidden, generator=gen) * 0.08
    del tensors["layers.0.hidden_norm.weight"]
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "hidden_size": g.hidden, "initializer_range": 0.01,
        "intermediate_size": g.inter, "max_position_embeddings": 256, "model_type": "llama",
        "num_attention_heads": g.heads, "num_key_value_heads": g.kv_heads, "num_hidden_layers": 1,
        "pad_token_id": None, "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.57.1", "use_cache": True,
        "vocab_size": g.vocab, "draft_vocab_size": g.vocab,
        "rope_scaling": {"rope_type": "default", "rope_theta": 10000}, "attention_bias": False,
        "attention_dropout": 0.0, "head_dim": g.head_dim, "mlp_bias": False, "pretraining_tp": None,
        "rope_theta": 10000,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [], "use_aux_hidden_state": False,
                         "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                         "use_mtp_layernorm": False, "next_layer_regular": True,
                         "parallel_draft_step": 1, "parallel_draft_heads_num_layers": 1},
    }
    return write_checkpoint(d, config, tensors)


def _specforge_eagle31(d: str, seed: int, norm_output: bool | None) -> str:
    g = Geometry(fc_norm=True)
    config = shrink(template("sgl-project__SpecForge-configs-qwen3-30B-A3B-eagle3.1"), g)
    if norm_output is None:
        del config["norm_output"]
    else:
        config["norm_output"] = norm_output
    return write_checkpoint(d, config, rename(canonical_tensors(g, seed), midlayer=True))


def specforge_eagle31(d: str, seed: int) -> str:
    """SpecForge's EAGLE 3.1 drafter (``fc_norm``, ``norm_output: true`` as its template says)
    as its SGLang exporter writes it: the draft's state dict without ``embed`` keys
    (``midlayer.*``, ``fc``, ``fc_norm.{0,1,2}``, ``norm``, ``lm_head``, ``d2t``, ``t2d``)."""
    return _specforge_eagle31(d, seed, True)


def specforge_no_norm_output_key(d: str, seed: int) -> str:
    """The same with no ``norm_output`` key: SpecForge's default (true)."""
    return _specforge_eagle31(d, seed, None)


def specforge_norm_output_false(d: str, seed: int) -> str:
    """The same trained with ``norm_output: false``: lm_head reads the un-normed state."""
    return _specforge_eagle31(d, seed, False)


def nemo_eagle31(d: str, seed: int) -> str:
    """NeMo Automodel's EAGLE 3.1 drafter (recipe ``fc_norm`` and ``norm_output``) with the same
    random weights as :func:`specforge_eagle31` for the same seed, under NeMo's names."""
    from transformers import LlamaConfig

    g = Geometry(fc_norm=True)
    target = LlamaConfig(**_tiny(g), max_position_embeddings=256, rope_theta=1000000.0)
    target.architectures = ["LlamaForCausalLM"]
    config = _nemo_saved_config(target, g, fc_norm=True, norm_output=True)
    return write_checkpoint(d, config, rename(canonical_tensors(g, seed), model_prefix=True),
                            run_config=NEMO_DEFAULT_RUN)


def longcat_flash_target(layers: int = TARGET_LAYERS, hidden: int = 64, vocab: int = 512) -> dict:
    """A LongCat-Flash target config as published: depth as ``num_layers`` and no
    ``num_hidden_layers`` (SGLang's LongcatFlashConfig derives it), FFN width as
    ``ffn_hidden_size``."""
    return {"architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash",
            "hidden_size": hidden, "num_layers": layers, "vocab_size": vocab, "ffn_hidden_size": 128,
            "expert_ffn_hidden_size": 32, "num_attention_heads": 4, "kv_lora_rank": 16, "q_lora_rank": 32,
            "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8,
            "zero_expert_num": 4, "moe_topk": 2, "rms_norm_eps": 1e-5, "max_position_embeddings": 1024,
            "rope_theta": 10000000.0}


SERVED: dict[str, Callable[[str, int], str]] = {
    "nemo-gpt-oss": nemo_gpt_oss,
    "nemo-llama-biases": nemo_llama_biases,
    "nemo-gemma4-gelu": nemo_gemma4_gelu,
    "angelslim-tied-config": angelslim_tied_config,
    "angelslim-tied-config-with-embed": angelslim_tied_config_with_embed,
    "specforge-eagle3.1": specforge_eagle31,
    "specforge-no-norm-output-key": specforge_no_norm_output_key,
    "nemo-eagle3.1": nemo_eagle31,
}

# name -> (builder, the config field its one problem names)
REFUSED: dict[str, tuple[Callable[[str, int], str], str]] = {
    "modelopt-no-aux": (modelopt_no_aux, "eagle_config.use_aux_hidden_state"),
    "specforge-norm-output-false": (specforge_norm_output_false, "norm_output"),
}


def build(name: str, directory: str, seed: int = 0) -> str:
    """Write layout ``name`` (a key of SERVED or REFUSED) into ``directory``."""
    builder = SERVED[name] if name in SERVED else REFUSED[name][0]
    return builder(directory, seed)
