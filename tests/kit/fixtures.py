"""Tiny random drafter checkpoints in every dialect, made from real third-party configs.

Each fixture starts from a producer's published config template (``drafter_configs/``, sources
in ``SOURCES.md``), shrinks the geometry to a few kilobytes of weights and writes random tensors
under that producer's names and file format. ``FIXTURES`` maps the recipe ids (F1-F14 of the
project's drafter-format catalogue) to builders; ``NEGATIVE_FIXTURES`` are checkpoints that must
be rejected.

Small dims that still exercise every branch: ``H=64``, 4 heads of ``d=32`` (so ``nh*d != H``),
2 KV heads, ``I=128``, ``V=512``, ``Vd=128``, a 12-layer target.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from typing import Callable

import torch
from safetensors.torch import save_file

from sglang_eagle_ext.drafter.dialects import NEMO_RUN_CONFIG, nemo_run_config_text
from sglang_eagle_ext.drafter.model_dir import membership_mask, staged_directory, write_json

TARGET_LAYERS = 12


@dataclass(frozen=True)
class Geometry:
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32
    inter: int = 128
    vocab: int = 512
    draft_vocab: int = 128
    num_aux: int = 3
    target_hidden: int = 64
    layers: int = 1
    qwen3: bool = False
    attention_bias: bool = False
    fc_norm: bool = False
    norm_before_fc: bool = False
    later_norm: str = "input_layernorm"
    embed: bool = False
    lm_head: bool = True
    fc: bool = True


def template(name: str) -> dict:
    """A real producer config from ``drafter_configs/`` (file name without ``.json``)."""
    text = resources.files(__package__).joinpath("drafter_configs", name + ".json").read_text()
    return json.loads(text)


def shrink(config: dict, g: Geometry) -> dict:
    """The template's keys, with the geometry replaced by ``g``'s tiny one."""
    config = dict(config)
    config.update(hidden_size=g.hidden, intermediate_size=g.inter, num_attention_heads=g.heads,
                  num_key_value_heads=g.kv_heads, head_dim=g.head_dim, vocab_size=g.vocab,
                  max_position_embeddings=256, num_hidden_layers=g.layers)
    if "draft_vocab_size" in config:
        config["draft_vocab_size"] = g.draft_vocab
    return config


def random_vocab_map(g: Geometry, generator: torch.Generator) -> torch.Tensor:
    """A valid ``d2t`` offset table for ``g.draft_vocab`` sorted distinct target ids."""
    selected = torch.randperm(g.vocab, generator=generator)[: g.draft_vocab].sort().values
    return selected - torch.arange(g.draft_vocab)


def canonical_tensors(g: Geometry, seed: int) -> dict[str, torch.Tensor]:
    """Random fp32 tensors under canonical names (see ``sglang_eagle_ext.drafter.spec``); norms near 1."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.08):
        return torch.randn(*shape, generator=gen) * scale

    def norm(n):
        return 1.0 + rand(n, scale=0.1)

    h, t, a = g.hidden, g.target_hidden, g.num_aux
    q, kv = g.heads * g.head_dim, g.kv_heads * g.head_dim
    out = {"norm.weight": norm(h)}
    if g.embed:
        out["embed_tokens.weight"] = rand(g.vocab, h, scale=0.5)
    if g.lm_head:
        out["lm_head.weight"] = rand(g.draft_vocab, h, scale=0.3)
    if g.fc:
        out["fc.weight"] = rand(h, a * t)
        if g.norm_before_fc:
            out["input_norm.weight"] = norm(a * t)
        for j in range(a if g.fc_norm else 0):
            out[f"fc_norm.{j}.weight"] = norm(t)
    for i in range(g.layers):
        p = f"layers.{i}."
        width = 2 * h if i == 0 else h
        if i == 0 or g.later_norm == "input_layernorm":
            out[p + "input_layernorm.weight"] = norm(h)
        if i == 0 or g.later_norm == "hidden_norm":
            out[p + "hidden_norm.weight"] = norm(h)
        for proj, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            out[f"{p}self_attn.{proj}.weight"] = rand(rows, width)
            if g.attention_bias:
                out[f"{p}self_attn.{proj}.bias"] = rand(rows)
        out[p + "self_attn.o_proj.weight"] = rand(h, q)
        if g.qwen3:
            out[p + "self_attn.q_norm.weight"] = norm(g.head_dim)
            out[p + "self_attn.k_norm.weight"] = norm(g.head_dim)
        out[p + "post_attention_layernorm.weight"] = norm(h)
        out[p + "mlp.gate_proj.weight"] = rand(g.inter, h)
        out[p + "mlp.up_proj.weight"] = rand(g.inter, h)
        out[p + "mlp.down_proj.weight"] = rand(h, g.inter)
    if g.draft_vocab < g.vocab:
        out["d2t"] = random_vocab_map(g, gen)
        out["t2d"] = membership_mask(out["d2t"], g.vocab)
    return out


def rename(tensors: dict[str, torch.Tensor], *, midlayer=False, model_prefix=False,
           legacy_aux_norms=False) -> dict[str, torch.Tensor]:
    """Canonical names -> a dialect's spelling."""
    renamed = {}
    for name, tensor in tensors.items():
        if midlayer and name.startswith("layers.0."):
            name = "midlayer." + name[len("layers.0."):]
        if legacy_aux_norms and name.startswith("fc_norm."):
            j = int(name.split(".")[1])
            name = ("aux_norm_low", "aux_norm_mid", "aux_norm_high")[j] + ".weight"
        if model_prefix and name not in ("lm_head.weight", "d2t", "t2d", "mask_hidden"):
            name = "model." + name
        renamed[name] = tensor
    return renamed


def write_checkpoint(directory: str, config: dict, tensors: dict[str, torch.Tensor],
                     weights_file: str = "model.safetensors", run_config: str | None = None) -> str:
    """Write ``config.json`` and one weights file (safetensors, or a torch pickle for
    ``.bin``/``.pt``) as a fresh ``directory``; ``run_config``: the text of the trainer's run
    config written beside them (NeMo's ``config.yaml``)."""
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    with staged_directory(directory) as staging:
        weights = os.path.join(staging, weights_file)
        if weights_file.endswith(".safetensors"):
            save_file(tensors, weights)
        else:
            torch.save(tensors, weights)
        write_json(os.path.join(staging, "config.json"), config)
        if run_config is not None:
            with open(os.path.join(staging, NEMO_RUN_CONFIG), "w", encoding="utf-8") as handle:
                handle.write(run_config)
    return directory


# NeMo's run config of a run that kept its default aux ids (it writes none then)
NEMO_DEFAULT_RUN = nemo_run_config_text(None)


def speculators_config(layer_template: dict, g: Geometry, **top) -> dict:
    """A speculators ``Eagle3SpeculatorConfig``: ``layer_template`` shrunk to ``g`` as the
    ``transformer_layer_config``; ``top`` sets or overrides top-level keys."""
    layer = shrink(layer_template, g)
    layer.pop("draft_vocab_size", None)
    layer.pop("architectures", None)
    config = {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.8.0",
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": "tiny-target", "architectures": ["LlamaForCausalLM"]},
        },
        "transformer_layer_config": layer,
        "draft_vocab_size": g.draft_vocab,
        "target_hidden_size": None,
        "norm_before_residual": False,
    }
    config.update(top)
    return config


# Fixture builders: (directory, seed) -> directory. Recipe ids follow the drafter-format catalogue.
def f1_safeailab(d, seed):
    g = Geometry()
    return write_checkpoint(d, shrink(template("SafeAILab__EAGLE-traineagle3-config"), g),
                            rename(canonical_tensors(g, seed), midlayer=True), "pytorch_model.bin")


def f1_specforge(d, seed):
    g = Geometry()
    return write_checkpoint(d, shrink(template("sgl-project__SpecForge-configs-llama3-8B-eagle3"), g),
                            rename(canonical_tensors(g, seed), midlayer=True))


def f2_angelslim(d, seed):
    g = Geometry()
    return write_checkpoint(d, shrink(template("Tencent__AngelSlim-configs-qwen3-8b-eagle3"), g),
                            rename(canonical_tensors(g, seed), midlayer=True))


def modelopt_config(g: Geometry, **eagle) -> dict:
    """A flat config with ModelOpt's exported ``eagle_config`` keys; ``eagle`` overrides them."""
    config = shrink(template("sgl-project__SpecForge-configs-llama3-8B-eagle3"), g)
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": None, "use_aux_hidden_state": True,
                              "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                              "use_mtp_layernorm": False, "next_layer_regular": True,
                              "parallel_draft_step": 1, "parallel_draft_heads_num_layers": None}
    config["eagle_config"].update(eagle)
    return config


def f3_modelopt(d, seed):
    g = Geometry()
    tensors = canonical_tensors(g, seed)
    del tensors["t2d"]  # ModelOpt never writes t2d
    return write_checkpoint(d, modelopt_config(g, eagle_aux_hidden_state_layer_ids=[1, 5, 8]), tensors)


def f4_modelopt_no_aux(d, seed):
    g = Geometry(fc=False, draft_vocab=512)
    config = modelopt_config(g, use_aux_hidden_state=False)
    config["draft_vocab_size"] = None
    return write_checkpoint(d, config, canonical_tensors(g, seed))


def f5_gpt_oss_boundary(d, seed):
    g = Geometry(norm_before_fc=True)
    config = shrink(template("sgl-project__SpecForge-configs-gpt-oss-20B-eagle3"), g)
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [8, 10, TARGET_LAYERS]}
    config["norm_before_fc"] = True
    return write_checkpoint(d, config, canonical_tensors(g, seed))


def f6_speculators(d, seed):
    g = Geometry(embed=True)
    config = speculators_config(template("sgl-project__SpecForge-configs-llama3-8B-eagle3"), g,
                                norm_before_residual=True)
    return write_checkpoint(d, config, canonical_tensors(g, seed))


def f7_speculators_two_layers(d, seed):
    g = Geometry(embed=True, layers=2)
    config = speculators_config(template("sgl-project__SpecForge-configs-llama3-8B-eagle3"), g,
                                norm_before_residual=True)
    return write_checkpoint(d, config, canonical_tensors(g, seed))


def f8_speculators_four_aux(d, seed):
    g = Geometry(embed=True, num_aux=4, norm_before_fc=True)
    layer = dict(template("sgl-project__SpecForge-configs-qwen3-8b-eagle3"),
                 layer_types=["sliding_attention"], sliding_window=32, use_sliding_window=True)
    config = speculators_config(layer, g, norm_before_residual=True, norm_before_fc=True,
                                norm_output=True, eagle_aux_hidden_state_layer_ids=[2, 5, 9, 11])
    return write_checkpoint(d, config, canonical_tensors(g, seed))


def f9_speculators_qwen3(d, seed):
    g = Geometry(embed=True, qwen3=True)
    layer = dict(template("sgl-project__SpecForge-configs-qwen3-8b-eagle3"), model_type="qwen3")
    return write_checkpoint(d, speculators_config(layer, g), canonical_tensors(g, seed))


def f10_eagle31(d, seed):
    g = Geometry(fc_norm=True)
    config = shrink(template("sgl-project__SpecForge-configs-qwen3-30B-A3B-eagle3.1"), g)
    return write_checkpoint(d, config, rename(canonical_tensors(g, seed), midlayer=True))


def f10_legacy_aux_norm(d, seed):
    g = Geometry(fc_norm=True)
    config = shrink(template("sgl-project__SpecForge-configs-qwen3-30B-A3B-eagle3.1"), g)
    del config["fc_norm"]
    config["use_aux_norm"] = True
    tensors = rename(canonical_tensors(g, seed), midlayer=True, legacy_aux_norms=True)
    return write_checkpoint(d, config, tensors)


def f11_cross_width(d, seed):
    g = Geometry(target_hidden=96, embed=True)
    config = shrink(template("sgl-project__SpecForge-configs-llama3-8B-eagle3"), g)
    config["target_hidden_size"] = 96
    return write_checkpoint(d, config, rename(canonical_tensors(g, seed), midlayer=True))


def f12_nemo(d, seed):
    g = Geometry(embed=True, fc_norm=True)
    config = shrink(template("sgl-project__SpecForge-configs-qwen3-8b-eagle3"), g)
    config.update(architectures=["LlamaEagle3DraftModel"], model_type="qwen3",
                  num_hidden_layers=TARGET_LAYERS, target_hidden_size=g.target_hidden,
                  fc_norm=True, norm_output=True, parallel_drafting=False,
                  tie_word_embeddings=False)
    return write_checkpoint(d, config, rename(canonical_tensors(g, seed), model_prefix=True),
                            run_config=NEMO_DEFAULT_RUN)


def f13_peagle(d, seed):
    g = Geometry(embed=True, layers=4, attention_bias=True)
    config = speculators_config(template("sgl-project__SpecForge-configs-qwen3-8b-eagle3"), g,
                                speculators_model_type="peagle", mask_token_id=g.vocab - 1,
                                architectures=["PEagleSpeculator"])
    config["transformer_layer_config"]["attention_bias"] = True
    tensors = canonical_tensors(g, seed)
    tensors["mask_hidden"] = torch.randn(1, 1, 3 * g.target_hidden)
    return write_checkpoint(d, config, tensors)


def f13_specforge_peagle(d, seed):
    g = Geometry(layers=4)
    config = shrink(template("sgl-project__SpecForge-configs-qwen3-8b-peagle"), g)
    tensors = canonical_tensors(g, seed)
    tensors["mask_hidden"] = torch.randn(1, 1, 3 * g.target_hidden)
    return write_checkpoint(d, config, tensors)


def f14_full_vocab(d, seed):
    g = Geometry(draft_vocab=512)
    config = shrink(template("sgl-project__SpecForge-configs-llama3-8B-eagle3"), g)
    return write_checkpoint(d, config, rename(canonical_tensors(g, seed), midlayer=True))


def f14_torchspec_no_draft_vocab(d, seed):
    g = Geometry(draft_vocab=512)
    config = shrink(template("lightseekorg__TorchSpec-configs-kimi_k25_eagle3"), g)
    return write_checkpoint(d, config, rename(canonical_tensors(g, seed), midlayer=True))


FIXTURES: dict[str, Callable[[str, int], str]] = {
    "F1-safeailab": f1_safeailab,
    "F1-specforge": f1_specforge,
    "F2-angelslim": f2_angelslim,
    "F3-modelopt": f3_modelopt,
    "F4-modelopt-no-aux": f4_modelopt_no_aux,
    "F5-gpt-oss-boundary": f5_gpt_oss_boundary,
    "F6-speculators": f6_speculators,
    "F7-speculators-2-layers": f7_speculators_two_layers,
    "F8-speculators-4-aux": f8_speculators_four_aux,
    "F9-speculators-qwen3": f9_speculators_qwen3,
    "F10-eagle3.1": f10_eagle31,
    "F10-legacy-aux-norm": f10_legacy_aux_norm,
    "F11-cross-width": f11_cross_width,
    "F12-nemo": f12_nemo,
    "F14-full-vocab": f14_full_vocab,
    "F14-torchspec-no-draft-vocab": f14_torchspec_no_draft_vocab,
}

REJECTED_FIXTURES: dict[str, Callable[[str, int], str]] = {
    "F13-peagle-speculators": f13_peagle,
    "F13-peagle-specforge": f13_specforge_peagle,
}


def target_config(hidden: int = 64, layers: int = TARGET_LAYERS, vocab: int = 512) -> dict:
    """A tiny Llama target config matching the fixtures."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
            "num_hidden_layers": layers, "vocab_size": vocab, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2}


def build(name: str, directory: str, seed: int = 0) -> str:
    """Write fixture ``name`` (a key of FIXTURES or REJECTED_FIXTURES) into ``directory``."""
    builders = {**FIXTURES, **REJECTED_FIXTURES}
    return builders[name](directory, seed)


__all__ = ["FIXTURES", "REJECTED_FIXTURES", "Geometry", "build", "canonical_tensors", "modelopt_config",
           "rename", "shrink", "speculators_config", "target_config", "template", "write_checkpoint"]
