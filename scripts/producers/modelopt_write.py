"""Write ModelOpt's own EAGLE-3 exports into ``tests/producer_files/modelopt/`` (run in its venv).

Run by ``scripts/producers/modelopt.sh`` inside a venv holding ``nvidia-modelopt==0.47.0``: a tiny
HF ``LlamaForCausalLM`` target (``record.tiny_target_config()``, seeded) is converted with
ModelOpt's own EAGLE mode (``mtsp.convert(model, [("eagle", config)])``), its draft is perturbed
(seeded) so a misread is visible, ``d2t`` is loaded through ModelOpt's own
``HFEagleModel.load_draft_vocab_cache``, and ``export_speculative_decoding`` (unified HF export,
``EagleExporter``) writes ``drafter/``. The forward recorded is ModelOpt's own
``HFEagleModel._eagle_forward`` (the draft module plus its ``lm_head``) in float32 on
``record.seeded_inputs``, fed the way ModelOpt's ``pseudo_speculative_generate`` feeds it.

Format: ``scripts/producers/record.py`` (imported by path: this venv does not have the package).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import tempfile

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # CPU only; ModelOpt's compile is turned off anyway

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("producer_record", os.path.join(HERE, "record.py"))
record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record)

import modelopt  # noqa: E402
import modelopt.torch.speculative as mtsp  # noqa: E402
import transformers  # noqa: E402
from modelopt.torch.export import export_speculative_decoding  # noqa: E402
from modelopt.torch.speculative.plugins.hf_eagle import HFEagleModel, default_eagle_aux_layer_ids  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

PIN = "nvidia-modelopt==0.47.0"
assert modelopt.__version__ == "0.47.0", modelopt.__version__
OUT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "producer_files", "modelopt")
TINY = record.TINY
N = TINY["target_layers"]


def src(path: str, lines: str, what: str) -> str:
    return f"{PIN} modelopt/{path}:{lines} ({what})"


TF = f"transformers=={transformers.__version__}"
SOURCES_COMMON = [
    src("torch/speculative/speculative_decoding.py", "30", "mtsp.convert: the EAGLE mode used here"),
    src("torch/speculative/eagle/conversion.py", "42-51",
        "eagle_architecture_config merged over eagle3_default_config"),
    src("torch/speculative/config.py", "44", "EAGLE-3 defaults: use_aux_hidden_state=True, use_last_layernorm=True"),
    src("torch/speculative/eagle/default_config.py", "20-25",
        "training RoPE default: rope_scaling {rope_type: default, rope_theta: 10000}, rope_theta 10000; "
        "torch_dtype 'bfloat16' (written to config.json whatever the weights' dtype)"),
    src("torch/speculative/plugins/hf_eagle.py", "357-375",
        "draft config = target's config class from eagle_architecture_config; only hidden_size, vocab_size, "
        "max_position_embeddings come from the target"),
    src("torch/speculative/plugins/hf_eagle.py", "58-63",
        "default_eagle_aux_layer_ids(n) = sorted({1, max(0, n//2-1), max(0, n-4)}) (a set: collapses for n <= 6)"),
    src("torch/speculative/plugins/hf_eagle.py", "380-385",
        "defaults used only when eagle_aux_hidden_state_layer_ids is empty"),
    src("torch/speculative/plugins/hf_eagle.py", "402-406",
        "forward hook on base_model.layers[i] for every i in the ids: id i taps the OUTPUT of decoder layer i "
        "= HF hidden_states[i + 1] (pre final-norm for the last layer)"),
    src("torch/speculative/plugins/hf_eagle.py", "208-216", "the hook stores the layer output"),
    src("torch/speculative/plugins/hf_eagle.py", "218-234",
        "aux states concatenated in hook-firing order, i.e. ascending layer order, whatever order the ids are "
        "written in"),
    src("torch/speculative/plugins/hf_eagle.py", "491", "eagle_input_hiddens = eagle_module.fc(aux_hiddens)"),
    src("torch/speculative/plugins/modeling_eagle.py", "36-40", "layers.{i} (LlamaDecoderLayer) and final norm"),
    src("torch/speculative/plugins/modeling_eagle.py", "43-56",
        "draft_vocab_size < vocab_size: own lm_head [Vd, H] and d2t buffer (no t2d)"),
    src("torch/speculative/plugins/modeling_eagle.py", "58-80",
        "fc [H, A*H]; layer 0's q/k/v take 2H; only layer 0 gets a fresh input_layernorm and hidden_norm; "
        "layers >= 1 are plain LlamaDecoderLayer (input_layernorm, no hidden_norm)"),
    src("torch/speculative/plugins/modeling_eagle.py", "114-127",
        "layer 0 attention pre-hook: cat(input_layernorm(embeds), hidden_norm(x)) where x is what the decoder "
        "layer passes to self_attn"),
    f"{TF} transformers/models/llama/modeling_llama.py:313-316 (LlamaDecoderLayer: residual = h; "
    "x = input_layernorm(h); self_attn(x): so ModelOpt's layer 0 attends over "
    "cat(input_layernorm(embeds), hidden_norm(input_layernorm(fc_out))), residual fc_out)",
    src("torch/speculative/plugins/modeling_eagle.py", "82-84",
        "the RoPE the module runs: LlamaRotaryEmbedding(draft config), i.e. the training rope_scaling (default)"),
    src("torch/speculative/plugins/modeling_eagle.py", "172-196",
        "forward: rope, decoder layers, returns (norm(h), pre-norm h)"),
    src("torch/speculative/plugins/hf_eagle.py", "647-670",
        "_eagle_forward: logits = eagle_module.lm_head(post-norm h)"),
    src("torch/speculative/plugins/hf_eagle.py", "929-943",
        "pseudo_speculative_generate: drafter input = embeddings of the ids, next step carries eagle_prenorm_h "
        "(the last layer's output before the final norm)"),
    src("torch/speculative/plugins/hf_eagle.py", "784-809", "training (TTT) carries the same pre-norm state"),
    src("torch/speculative/plugins/hf_eagle.py", "318-337", "load_draft_vocab_cache: the d2t buffer, int64 [Vd]"),
    src("torch/speculative/plugins/hf_eagle.py", "639-645", "target id = draft id + d2t[draft id]"),
    src("torch/speculative/plugins/hf_eagle.py", "936-938", "draft_token += d2t[draft_token]"),
    src("torch/export/unified_export_hf.py", "1452-1461", "export_speculative_decoding -> model.get_exporter().export"),
    src("torch/export/plugins/hf_spec_export.py", "167-180",
        "export tensors: eagle_module.* with the prefix stripped, no embed_tokens; lm_head from the base model "
        "only when the draft has none"),
    src("torch/export/plugins/hf_spec_export.py", "263-283",
        "tensors saved as the module holds them (dtype argument unused without quantization)"),
    src("torch/export/plugins/hf_spec_configs.py", "18-56",
        "config.json template: LlamaForCausalLMEagle3, eagle_config with layer-output ids"),
    src("torch/export/plugins/hf_spec_export.py", "198-211",
        "template fields filled from the draft config, else the base"),
    src("torch/speculative/config.py", "380-387",
        "eagle_export_rope_scaling default {rope_type: yarn, factor: 32.0, original_max_position_embeddings: 2048}"),
    src("torch/export/plugins/hf_spec_export.py", "213-218",
        "rope_scaling replaced by eagle_export_rope_scaling whenever it is non-empty and training rope_type is "
        "'default'"),
    src("torch/export/plugins/hf_spec_export.py", "220-223", "rope_theta from the training rope config"),
    src("torch/speculative/config.py", "449-461", "export injection allowed only over a 'default' training RoPE"),
]

# The drafter's own shape (ModelOpt's defaults are 8B-sized and do not follow the target:
# default_config.py:26-44; only hidden/vocab/max positions are taken from it, hf_eagle.py:361-363).
ARCH = {"intermediate_size": TINY["intermediate_size"], "num_attention_heads": TINY["num_attention_heads"],
        "num_key_value_heads": TINY["num_key_value_heads"], "head_dim": TINY["head_dim"],
        "rms_norm_eps": TINY["rms_norm_eps"], "draft_vocab_size": TINY["draft_vocab_size"]}

VARIANTS = [
    # name, draft layers, aux ids (None: ModelOpt's default), eagle_export_rope_scaling override, seed
    ("hf-1layer-default", 1, None, None, 11),
    ("hf-2layer-default", 2, None, None, 22),
    ("hf-2layer-no-rope-injection", 2, None, {}, 22),
    ("hf-1layer-aux-explicit-unsorted", 1, [6, 0, 3], None, 33),
]


def build(layers: int, aux_ids, export_rope, seed: int):
    """Target + ModelOpt's EAGLE conversion, perturbed and with a d2t, all from ``seed``."""
    torch.manual_seed(seed)
    target = LlamaForCausalLM(LlamaConfig(**record.tiny_target_config())).float().eval()
    arch = dict(ARCH, num_hidden_layers=layers)
    if aux_ids is not None:
        arch["eagle_aux_hidden_state_layer_ids"] = list(aux_ids)
    config = {"eagle_architecture_config": arch, "eagle_use_torch_compile": False}
    if export_rope is not None:
        config["eagle_export_rope_scaling"] = export_rope
    mtsp.convert(target, [("eagle", config)])
    model = target
    model.eval()
    gen = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for _, param in sorted(model.eagle_module.named_parameters()):
            noise = torch.randn(param.shape, generator=gen)
            if param.dim() == 1:  # RMSNorm weights: far from ones so every norm shows
                param.copy_(1.0 + 0.3 * noise)
            else:
                param.add_(0.05 * noise)
    # A seeded draft vocabulary, loaded through ModelOpt's own loader (a torch.save'd int64 tensor).
    ids = torch.randperm(TINY["vocab_size"], generator=gen)[:TINY["draft_vocab_size"]].sort().values
    d2t = ids - torch.arange(TINY["draft_vocab_size"])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "d2t.pt")
        torch.save(d2t, path)
        HFEagleModel.load_draft_vocab_cache(model, path)
    return model


def producer_forward(model, inputs, *, rotary=None, single_norm=False):
    """ModelOpt's own draft forward as ``pseudo_speculative_generate`` runs it (hf_eagle.py:906-934):
    ``_eagle_forward(fc(aux), embed(ids), causal mask, positions)``. ``rotary`` swaps the RoPE module
    and ``single_norm`` feeds layer 0's hidden path un-normalised (both only for the notes'
    ablations, never for the recorded tensors)."""
    module = model.eagle_module
    module._maybe_init_rope(device=torch.device("cpu"))
    saved_rope, saved_norm = module.rotary_emb, module.layers[0].input_layernorm
    try:
        if rotary is not None:
            module.rotary_emb = rotary
        with torch.no_grad():
            embeds = model._base_model_embeddings(inputs["input_ids"])
            if single_norm:  # input_layernorm on the embeddings only, as SGLang/vLLM serve it
                embeds = saved_norm(embeds)
                module.layers[0].input_layernorm = torch.nn.Identity()
            hidden = module.fc(inputs["aux"])
            t = inputs["input_ids"].shape[1]
            mask = model._prepare_decoder_attention_mask(None, (1, t), 0, hidden.device, hidden.dtype)
            _, prenorm, logits, _ = model._eagle_forward(hidden, embeds, mask, inputs["positions"][None])
    finally:
        module.rotary_emb, module.layers[0].input_layernorm = saved_rope, saved_norm
    return logits, prenorm


def write_variant(name: str, layers: int, aux_ids, export_rope, seed: int) -> dict:
    model = build(layers, aux_ids, export_rope, seed)
    taps = list(model.eagle_config.eagle_aux_hidden_state_layer_ids)
    base = os.path.join(OUT, name)
    drafter = os.path.join(base, "drafter")
    if os.path.isdir(drafter):
        shutil.rmtree(drafter)
    export_speculative_decoding(model, export_dir=drafter)

    exported = load_file(os.path.join(drafter, "model.safetensors"))
    own = {k.removeprefix("eagle_module."): v for k, v in model.state_dict().items() if k.startswith("eagle_module.")}
    for key, value in own.items():  # the recorded module holds exactly the exported weights
        assert torch.equal(exported[key], value), key
    with open(os.path.join(drafter, "config.json")) as handle:
        config = json.load(handle)
    written = copy.deepcopy(config)  # transformers' config classes edit rope dicts in place

    # hook-firing order = ascending layer order (hf_eagle.py:218-234, 402-406)
    indices = [i + 1 for i in sorted(set(taps))]
    inputs = record.seeded_inputs(seed, aux_width=len(indices) * TINY["hidden_size"])
    logits, carried = producer_forward(model, inputs)

    trained = dict(model.eagle_module.rotary_emb.config.rope_parameters)
    trained_rope = {"rope_type": model.eagle_module.rotary_emb.rope_type, "rope_theta": float(trained["rope_theta"])}
    assert trained_rope["rope_type"] == "default"
    notes = []
    forward = {"module": "modelopt.torch.speculative.plugins.hf_eagle.HFEagleModel._eagle_forward "
                         "(EagleModule + its lm_head), fed as pseudo_speculative_generate feeds it "
                         "(hf_eagle.py:906-934)",
               "dtype": "float32",
               "carried": "eagle_prenorm_h: the last draft layer's output before the final norm "
                          f"({PIN} modelopt/torch/speculative/plugins/hf_eagle.py:929,943; "
                          "modelopt/torch/speculative/plugins/modeling_eagle.py:192-196)",
               "layer0_hidden_path": "hidden_norm(input_layernorm(fc(aux))) with residual fc(aux) (ModelOpt HF "
                                     "training, modeling_eagle.py:114-127 + LlamaDecoderLayer); SGLang's "
                                     "LlamaForCausalLMEagle3 computes hidden_norm(fc(aux))",
               "trained_layer0_hidden": "hidden_norm(input_layernorm(fc_out))",
               "exported_rope_scaling": written.get("rope_scaling"),
               "exported_rope_scaling_source": (
                   f"{PIN} modelopt/torch/export/plugins/hf_spec_export.py:213-218 with "
                   f"eagle_export_rope_scaling={model.eagle_export_rope_scaling!r} "
                   "(default: modelopt/torch/speculative/config.py:380-387)")}
    rope = config.get("rope_scaling") or {}
    if (rope.get("rope_type") or rope.get("type") or "default") != "default":
        forward["trained_rope"] = trained_rope
        forward["trained_rope_source"] = (
            f"{PIN} modelopt/torch/speculative/plugins/modeling_eagle.py:82-84 (LlamaRotaryEmbedding of the draft "
            "config, whose rope_scaling is default_config.py:24's {rope_type: default, rope_theta: 10000})")
        # ModelOpt's module with the RoPE the export declares (HF's yarn on the exported config)
        served = LlamaConfig(**{k: v for k, v in copy.deepcopy(config).items() if k != "eagle_config"})
        yarn_logits, _ = producer_forward(model, inputs, rotary=LlamaRotaryEmbedding(served))
        notes.append("ModelOpt's own module with the exported rope_scaling (HF LlamaRotaryEmbedding on the "
                     f"exported config) differs from the recorded (trained) logits by max abs "
                     f"{float((yarn_logits - logits).abs().max()):.4g}: the export declares a RoPE the draft "
                     "never trained with")
    single_logits, _ = producer_forward(model, inputs, single_norm=True)
    notes.append("layer 0's hidden path: ModelOpt HF training normalises fc(aux) twice (input_layernorm inside "
                 "LlamaDecoderLayer, then hidden_norm in the attention pre-hook: modeling_eagle.py:114-127); with "
                 "input_layernorm applied to the embeddings only (SGLang/vLLM's EAGLE-3 layer) the same module's "
                 f"logits differ by max abs {float((single_logits - logits).abs().max()):.4g} (trained "
                 "input_layernorm weights here are seeded, far from ones)")
    if config.get("torch_dtype") != "float32":
        notes.append(f"config.json says torch_dtype {config.get('torch_dtype')!r} (default_config.py:20) while "
                     "model.safetensors holds float32 (hf_spec_export.py:279-283 saves the module's dtype)")
    collapse = {n: default_eagle_aux_layer_ids(n) for n in range(1, 9)}
    if aux_ids is None:
        notes.append(f"aux ids are ModelOpt's defaults for a {N}-layer target: {taps} (layer outputs) = "
                     f"hidden_states {indices}; default_eagle_aux_layer_ids(n) for n = 1..8: {collapse} "
                     "(a set: 3 distinct ids only from n = 7; fc is sized len(ids)*H, modeling_eagle.py:60-64)")
    else:
        notes.append(f"explicit ids written as {aux_ids} (config.json keeps that order); the hooks fire in layer "
                     f"order so fc sees hidden_states {indices}")
        notes.append(f"id {N - 1} (not written here: SGLang's Llama target cannot capture it) would tap the last "
                     "target layer's output before the final norm, which is NOT HF output_hidden_states"
                     f"[{N}] (post-norm in {TF}) although the index convention names it {N}")

    tensors = {"input_ids": inputs["input_ids"], "positions": inputs["positions"], "aux": inputs["aux"],
               "target_embed": model._base_model_embeddings.weight.detach().float(),
               "logits": logits, "carried": carried}
    expect = {"dialect": "modelopt", "num_layers": layers, "draft_vocab_size": TINY["draft_vocab_size"],
              "has_vocab_map": True, "embed_tokens_from_target": True, "lm_head_from_target": False,
              "num_aux_hidden_states": len(indices), "rope_theta": float(config["rope_theta"])}
    if layers > 1:  # layers >= 1 are plain LlamaDecoderLayers (modeling_eagle.py:36-38, 77-80)
        expect["later_layer_norm"] = "input_layernorm"
    record.write_record(
        base, producer="modelopt", package=PIN, variant=name,
        written_by="modelopt.torch.export.export_speculative_decoding (unified_export_hf.py -> "
                   "plugins/hf_spec_export.py EagleExporter.export) after mtsp.convert(model, [('eagle', cfg)])",
        sources=SOURCES_COMMON, drafter="drafter", aux_hidden_state_indices=indices, tensors=tensors,
        forward=forward, expect=expect, notes=notes)
    return {"variant": name, "taps": taps, "indices": indices, "rope_scaling": written.get("rope_scaling"),
            "notes": notes}


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    for variant in VARIANTS:
        print(json.dumps(write_variant(*variant)))


if __name__ == "__main__":
    main()
