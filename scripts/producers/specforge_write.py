"""Write tests/producer_files/specforge/ with SpecForge's own code (run inside its venv; see specforge.sh).

Every drafter here goes the way a SpecForge 0.2.0 EAGLE-3 run takes it:

1. the draft config (JSON shaped like SpecForge's shipped ``configs/*-eagle3*.json``, scaled to
   ``record.TINY``) read by SpecForge's ``AutoDraftModelConfig.from_file`` and built by
   ``AutoDraftModel.from_config`` in bfloat16 (``build_eagle3_draft``);
2. the vocabulary map made by ``generate_vocab_mapping_file`` from seeded token counts and
   loaded by ``load_vocab_mapping``; the frozen embedding loaded from a tiny target directory by
   ``load_embedding`` and frozen by ``freeze_embedding``;
3. seeded weights in place of training (norms perturbed so that a misread norm is visible);
4. the trainer's checkpoint: ``Eagle3TrainStrategy.checkpoint_state_filter`` on the
   ``draft_model.*`` state dict, saved by ``CheckpointManager.save`` with the payload
   ``TrainerController.save_checkpoint`` writes;
5. ``specforge export --to sglang`` (SpecForge's CLI) into ``<variant>/drafter/``.

The forward is the draft module's own methods called in the order of ``OnlineEagle3Model.forward``'s
first training-time-test step (its loss is a Triton kernel, so the trainer's forward itself
cannot run on a CPU), in float32, on the exported weights (bfloat16 values) and the same frozen
embedding. Every citation is looked up in the installed sources at run time (a moved line fails
the run instead of citing the wrong one).

Usage: specforge_write.py OUT_DIR   (OUT_DIR = tests/producer_files/specforge)
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # SpecForge decorates RMSNorm/RoPE with torch.compile

import torch
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("producer_record", os.path.join(HERE, "record.py"))
record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record)

import specforge  # noqa: E402
from specforge.data.preprocessing import generate_vocab_mapping_file  # noqa: E402
from specforge.modeling.auto import AutoDraftModel, AutoDraftModelConfig  # noqa: E402
from specforge.training.checkpoint import CheckpointManager  # noqa: E402
from specforge.training.strategies.base import Eagle3TrainStrategy  # noqa: E402

PACKAGE = "specforge==0.2.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(specforge.__file__)))
TINY = record.TINY
N = TINY["target_layers"]
SGLANG = "sglang==0.5.14"  # SpecForge 0.2.0's pinned serving engine and capture backend (not installed here)

# SGLang 0.5.14 lines SpecForge's capture and serving rely on (read from its wheel; SGLang itself
# is not installed in this venv, so these are fixed strings, not looked up).
SGLANG_CAPTURE_PLUS_ONE = f"{SGLANG} sglang/srt/models/llama.py:824"  # layers_to_capture = [val + 1 ...]
SGLANG_CAPTURE_LOOP = f"{SGLANG} sglang/srt/models/llama.py:407-409"  # before layer i, in layer order
SGLANG_NORM_OUTPUT = f"{SGLANG} sglang/srt/models/llama_eagle3.py:183,241-242"  # carries the normed state


def cite(path: str, snippet: str, nth: int = 1, span: int = 0) -> str:
    return record.cite(ROOT, PACKAGE, path, snippet, nth, span)


DRAFT = "specforge/modeling/draft/llama3_eagle.py"
BASE = "specforge/modeling/draft/base.py"
TRAIN = "specforge/algorithms/eagle3/model.py"
PROVIDERS = "specforge/algorithms/model_providers.py"
C = types.SimpleNamespace(
    fc_three=cite(DRAFT, "self.target_hidden_size * 3,"),
    fc_norm=cite(DRAFT, 'if getattr(config, "fc_norm", False):'),
    fc_norm_apply=cite(DRAFT, "[norm(chunk) for norm, chunk in zip(self.fc_norm, chunks)]"),
    norm_output=cite(DRAFT, 'self.norm_output = getattr(config, "norm_output", True)'),
    logits=cite(DRAFT, "def compute_logits(self, hidden_states: torch.Tensor)"),
    logits_norm=cite(DRAFT, "norm_hidden_states = self.norm(hidden_states)"),
    logits_raw=cite(DRAFT, "norm_hidden_states = hidden_states"),
    midlayer=cite(DRAFT, "self.midlayer = LlamaDecoderLayer(config, attention_backend=attention_backend)"),
    hidden_norm=cite(DRAFT, "hidden_states = self.hidden_norm(hidden_states)"),
    input_layernorm=cite(DRAFT, "input_emb = self.input_layernorm(input_emb)"),
    cat_order=cite(DRAFT, "hidden_states = torch.cat((input_emb, hidden_states), dim=-1)"),
    rope_config=cite(DRAFT, 'return rope_params["rope_theta"], rope_params'),
    rope_default=cite(DRAFT, 'if scaling_type == "default":'),
    rope_freqs=cite(DRAFT, "self.base ** (torch.arange(0, self.dim, 2).float().to(device) / self.dim)"),
    rope_half=cite(DRAFT, "return torch.cat((-x2, x1), dim=-1)"),
    rope_positions=cite(DRAFT, "query_states, key_states, cos, sin, position_ids + lck"),
    buffers=cite(DRAFT, 'self.register_buffer("d2t", d2t)'),
    d2t_use=cite(TRAIN, "pred_draft_token_ids + self.draft_model.d2t[pred_draft_token_ids]"),
    vocab_offsets=cite("specforge/data/preprocessing.py",
                       "d2t = [used_tokens[i] - i for i in range(len(used_tokens))]"),
    vocab_mask=cite("specforge/data/preprocessing.py", "t2d = [i in used_tokens for i in range(target_vocab_size)]"),
    load_vocab=cite(BASE, 'self.d2t.copy_(vocab_mapping["d2t"])'),
    step_fc=cite(TRAIN, "hidden_states = self.draft_model.project_hidden_states(hidden_states)"),
    step_embed=cite(TRAIN, "inputs_embeds = self.draft_model.embed_input_ids(state.input_ids)"),
    step_backbone=cite(TRAIN, "hidden_states_out = self.draft_model.backbone("),
    carried=cite(TRAIN, "hidden_states = hidden_states_out"),
    step_logits=cite(TRAIN, "logits = self.draft_model.compute_logits(hidden_states)"),
    capture_resolve=cite(PROVIDERS, 'layers = eagle_config.get("eagle_aux_hidden_state_layer_ids")'),
    capture_default=cite(PROVIDERS, "layers = [1, num_layers // 2 - 1, num_layers - 4]"),
    capture_three=cite(PROVIDERS, "if len(layers) != 3 or any("),
    capture_setter=cite("specforge/offline_capture/sglang_backend/capture.py",
                        '"eagle3": "set_eagle3_layers_to_capture",'),
    single_layer=cite("specforge/algorithms/eagle3/providers.py", 'fixed_override_values=(("num_hidden_layers", 1),),'),
    build=cite(PROVIDERS, "draft_model = AutoDraftModel.from_config("),
    build_dtype=cite(PROVIDERS, "return draft_model.to(device=_device(), dtype=_torch_dtype(cfg))"),
    load_embedding=cite(PROVIDERS, "draft_model.load_embedding("),
    filter=cite("specforge/training/strategies/base.py",
                'if "draft_model." in k and not (embed_frozen and "embed" in k.lower())'),
    save=cite("specforge/training/controller.py", '"draft_state_dict": self.core.strategy.checkpoint_state_filter('),
    export_dtype=cite("specforge/export/checkpoint_io.py",
                      "model = AutoDraftModel.from_config(draft_config, torch_dtype=torch.bfloat16)"),
    export_no_embed=cite("specforge/export/to_sglang.py",
                         'full = {k: v for k, v in model.state_dict().items() if "embed" not in k.lower()}'),
    export_save=cite("specforge/export/to_sglang.py",
                     "model.save_pretrained(output_dir, state_dict=_serving_state(full, weight_map))"),
    export_cli=cite("specforge/cli.py", "export_to_sglang("),
)


def draft_config(**extra) -> dict:
    """A draft config shaped like SpecForge's shipped configs/llama3-8B-eagle3.json (keys and their
    order), at the tiny geometry; ``extra`` adds what a variant's shipped config adds."""
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "hidden_size": TINY["hidden_size"], "initializer_range": 0.02,
        "intermediate_size": TINY["intermediate_size"],
        "max_position_embeddings": TINY["max_position_embeddings"], "model_type": "llama",
        "num_attention_heads": TINY["num_attention_heads"],
        "num_key_value_heads": TINY["num_key_value_heads"], "head_dim": TINY["head_dim"],
        "num_hidden_layers": 1, "pad_token_id": 0, "rms_norm_eps": TINY["rms_norm_eps"],
        "rope_theta": TINY["rope_theta"], "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "use_cache": True, "vocab_size": TINY["vocab_size"], "draft_vocab_size": TINY["draft_vocab_size"],
    }
    config.update(extra)
    return config


COMMON_NOTES = [
    f"EAGLE-3 drafters are single-layer only: {C.single_layer}, {C.midlayer}",
    f"fc always takes exactly three aux states ({C.fc_three}; the capture must resolve to three ids: "
    f"{C.capture_three})",
    f"saved and exported in bfloat16 ({C.build_dtype}: training.torch_dtype defaults to bfloat16; the exporter "
    f"rebuilds the draft in bfloat16: {C.export_dtype})",
    f"the export holds no embed_tokens (frozen target copy, filtered by the trainer: {C.filter}, and by the "
    f"exporter: {C.export_no_embed}); the draft takes the target's embedding ({C.load_embedding})",
    f"t2d (bool [V]) and d2t (int64 offsets [Vd], target = draft + d2t[draft]) are saved buffers ({C.buffers}) "
    f"made by generate_vocab_mapping_file ({C.vocab_offsets}, {C.vocab_mask}) and used as {C.d2t_use}",
    f"layer 0 takes cat(input_layernorm(embed), hidden_norm(fc(aux))) ({C.input_layernorm}, {C.hidden_norm}, "
    f"{C.cat_order}); residual is fc(aux), un-normed",
    f"RoPE: plain (rope_parameters type 'default' from transformers 5), base = config rope_theta, head_dim from "
    f"config, rotate_half halves, positions as given ({C.rope_config}, {C.rope_default}, {C.rope_freqs}, "
    f"{C.rope_half}, {C.rope_positions})",
    "the recorded forward runs the sdpa attention module (LlamaAttention's training-time-test branch, "
    "cache_hidden=[[], []]); training.attention_backend defaults to flex_attention, same weights and math",
]

# name -> (draft config extras, seed, aux ids as the trainer resolves them, expect extras, notes)
VARIANTS = {
    "eagle3": dict(extra={}, seed=11, notes=[
        f"no aux ids written (as in SpecForge's shipped llama3-8B-eagle3.json); its trainer taps the default "
        f"[1, N//2-1, N-4] = [1, 3, 4] ({C.capture_default})",
        f"no norm_output key: SpecForge's default is true, meaning lm_head reads norm(h) ({C.norm_output}, "
        f"{C.logits_norm})",
    ]),
    "eagle3.1": dict(extra={"fc_norm": True, "norm_output": True}, seed=12, notes=[
        f"EAGLE 3.1 as SpecForge's shipped qwen3-30B-A3B-eagle3.1.json writes it: fc_norm (one RMSNorm [T] per "
        f"aux chunk before fc: {C.fc_norm}, {C.fc_norm_apply}) and norm_output true",
        f"norm_output true in SpecForge: lm_head reads norm(h) ({C.norm_output}, {C.logits_norm}); the carried "
        f"state stays the pre-norm backbone output ({C.carried})",
        f"SGLang 0.5.14 (SpecForge's pinned engine, the one its export targets) reads norm_output true as 'carry "
        f"the normed state' ({SGLANG_NORM_OUTPUT}): served stock, this drafter's later draft steps get a state it "
        "was never trained on",
    ]),
    "aux_ids_unsorted": dict(extra={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [6, 0, 3]}}, seed=13, notes=[
        f"aux ids written as eagle_config.eagle_aux_hidden_state_layer_ids (as in SpecForge's shipped gpt-oss "
        f"configs) and read from there by the trainer ({C.capture_resolve}); written unsorted",
        f"SGLang captures in layer order whatever the id order ({SGLANG_CAPTURE_LOOP}), so fc's chunks are "
        "hidden_states [1, 4, 7] ascending",
    ]),
    "norm_output_false": dict(extra={"norm_output": False}, seed=14, notes=[
        f"norm_output false in SpecForge: lm_head reads the un-normed backbone output ({C.norm_output}, "
        f"{C.logits_raw}); the final norm is saved but unused",
        f"SGLang 0.5.14 always applies the final norm before lm_head ({SGLANG_NORM_OUTPUT}), so no stock engine "
        "serves this as trained",
        "no engine serves it as trained, so it must be refused (expect.refused)",
    ]),
}


def aux_ids(config: dict) -> list[int]:
    """The capture ids SpecForge's trainer resolves (resolve_eagle_capture_layers, with no run
    override): the draft config's eagle_config ids, else [1, N//2-1, N-4]."""
    ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return list(ids) if ids is not None else [1, N // 2 - 1, N - 4]


def seeded_weights(model: torch.nn.Module, seed: int) -> None:
    record.perturb(model, seed, keep=lambda name, param: not param.requires_grad)


def vocab_mapping(work: str, seed: int) -> str:
    """SpecForge's own generate_vocab_mapping_file over seeded token counts (Zipf-like over a
    seeded permutation, so the 128 kept ids are not simply 0..127)."""
    from datasets import Dataset

    gen = torch.Generator().manual_seed(1000 + seed)
    order = torch.randperm(TINY["vocab_size"], generator=gen)
    weights = 1.0 / torch.arange(1, TINY["vocab_size"] + 1, dtype=torch.float64)
    rows = [order[torch.multinomial(weights, 48, replacement=True, generator=gen)] for _ in range(64)]
    dataset = Dataset.from_dict({"input_ids": [r.tolist() for r in rows],
                                 "loss_mask": [[1] * len(r) for r in rows]}).with_format("torch")
    return generate_vocab_mapping_file(dataset, TINY["vocab_size"], TINY["draft_vocab_size"],
                                       cache_dir=os.path.join(work, "vocab_mapping"))


def tiny_target_dir(work: str, seed: int) -> str:
    """A target directory holding only what the draft loads from it: config.json and
    model.embed_tokens.weight (bfloat16, as the bf16 trainer holds it)."""
    target = os.path.join(work, "target")
    os.makedirs(target, exist_ok=True)
    json.dump(record.tiny_target_config(), open(os.path.join(target, "config.json"), "w"))
    gen = torch.Generator().manual_seed(2000 + seed)
    embed = torch.randn(TINY["vocab_size"], TINY["hidden_size"], generator=gen).to(torch.bfloat16)
    save_file({"model.embed_tokens.weight": embed}, os.path.join(target, "model.safetensors"))
    return target


def producer_forward(model, input_ids, positions, aux) -> tuple[torch.Tensor, torch.Tensor]:
    """OnlineEagle3Model.forward's first training-time-test step, with the draft module's own
    methods in its order: project_hidden_states, prepare_decoder_attention_mask, embed_input_ids,
    backbone, compute_logits. Returns (logits, carried)."""
    batch, length = input_ids.shape
    hidden = model.project_hidden_states(aux)
    mask = model.prepare_decoder_attention_mask(
        attention_mask=torch.ones((batch, length), dtype=torch.bool), hidden_states=hidden,
        batch_size=batch, seq_length=length, past_key_values_length=0)
    cache_hidden = [[], []]
    embeds = model.embed_input_ids(input_ids).to(hidden.dtype)
    out = model.backbone(input_embeds=embeds, hidden_states=hidden, cache_hidden=cache_hidden,
                         attention_mask=mask, position_ids=positions.reshape(-1, length),
                         past_key_values=None, use_cache=True)
    carried = out  # model.py: `hidden_states = hidden_states_out`, the next step's input
    return model.compute_logits(carried), carried


def write_variant(out_root: str, name: str, spec: dict) -> None:
    variant_dir = os.path.join(out_root, name)
    config = draft_config(**spec["extra"])
    seed = spec["seed"]
    with tempfile.TemporaryDirectory(prefix=f"specforge-{name}-") as work:
        config_path = os.path.join(work, "draft_config.json")
        json.dump(config, open(config_path, "w"), indent=2)
        target_dir = tiny_target_dir(work, seed)

        # build_eagle3_draft, as the trainer runs it
        draft_cfg = AutoDraftModelConfig.from_file(config_path)
        model = AutoDraftModel.from_config(draft_cfg, attention_backend="sdpa", torch_dtype=torch.bfloat16)
        model.load_vocab_mapping(vocab_mapping(work, seed))
        model.load_embedding(target_dir)
        model.freeze_embedding()
        model = model.to(dtype=torch.bfloat16)
        seeded_weights(model, seed)

        # TrainerController.save_checkpoint: the strategy's filter over the draft_model.* state dict
        wrapped = torch.nn.Module()
        wrapped.draft_model = model  # OnlineEagle3Model keeps the draft as self.draft_model
        strategy = Eagle3TrainStrategy(wrapped)
        shared = {"draft_state_dict": strategy.checkpoint_state_filter(wrapped.state_dict()),
                  "global_step": 1, "epoch": 0, "epoch_batch": 1, "epoch_samples": 1,
                  "strategy": strategy.name, "run_id": "tiny", "world_size": 1}
        manager = CheckpointManager(os.path.join(work, "run"), "tiny")
        checkpoint_dir = manager.save(shared, 1, rank_state={"optimizer": None, "rng": None})

        # specforge export --to sglang
        drafter_dir = os.path.join(variant_dir, "drafter")
        if os.path.isdir(drafter_dir):
            shutil.rmtree(drafter_dir)
        os.makedirs(variant_dir, exist_ok=True)
        subprocess.run([os.path.join(os.path.dirname(sys.executable), "specforge"), "export", "--to", "sglang",
                        "--checkpoint", checkpoint_dir, "--draft-config", config_path,
                        "--output-dir", drafter_dir], check=True, env={**os.environ, "TORCHDYNAMO_DISABLE": "1"})
        exported = load_file(os.path.join(drafter_dir, "model.safetensors"))
        for key, value in shared["draft_state_dict"].items():
            assert torch.equal(exported[key], value), f"export changed {key}"

        # the producer's module in float32 on the exported (bfloat16) values and the same embedding
        fp32 = AutoDraftModel.from_config(AutoDraftModelConfig.from_file(os.path.join(drafter_dir, "config.json")),
                                          attention_backend="sdpa", torch_dtype=torch.float32)
        missing, unexpected = fp32.load_state_dict({k: v.float() if v.is_floating_point() else v
                                                    for k, v in exported.items()}, strict=False)
        assert not unexpected and set(missing) == {"embed_tokens.weight"}, (missing, unexpected)
        fp32.load_embedding(target_dir)
        fp32.eval()
        inputs = record.seeded_inputs(seed, 3 * TINY["hidden_size"])
        with torch.no_grad():
            logits, carried = producer_forward(fp32, inputs["input_ids"], inputs["positions"], inputs["aux"])
        target_embed = fp32.embed_tokens.weight.detach().clone()

    ids = aux_ids(config)
    indices = sorted(i + 1 for i in ids)
    normed_logits = bool(config.get("norm_output", True))
    record.write_record(
        variant_dir, producer="specforge", package=PACKAGE, variant=name,
        written_by=("specforge.training.checkpoint.CheckpointManager.save (payload of "
                    "TrainerController.save_checkpoint, "
                    "draft_state_dict = Eagle3TrainStrategy.checkpoint_state_filter), then "
                    "`specforge export --to sglang` (specforge.export.to_sglang.export_to_sglang)"),
        sources=sorted({C.build, C.build_dtype, C.load_embedding, C.filter, C.save, C.export_dtype,
                        C.export_no_embed, C.export_save, C.export_cli, C.single_layer, C.midlayer,
                        C.fc_three, C.fc_norm, C.fc_norm_apply, C.norm_output, C.logits,
                        C.logits_norm, C.logits_raw, C.hidden_norm, C.input_layernorm, C.cat_order,
                        C.rope_config, C.rope_default, C.rope_freqs, C.rope_half, C.rope_positions,
                        C.buffers, C.d2t_use, C.vocab_offsets, C.vocab_mask, C.load_vocab,
                        C.step_fc, C.step_embed, C.step_backbone, C.carried, C.step_logits,
                        C.capture_resolve, C.capture_default, C.capture_three, C.capture_setter,
                        SGLANG_CAPTURE_PLUS_ONE, SGLANG_CAPTURE_LOOP, SGLANG_NORM_OUTPUT}),
        drafter="drafter", aux_hidden_state_indices=indices,
        tensors={"input_ids": inputs["input_ids"], "positions": inputs["positions"], "aux": inputs["aux"],
                 "target_embed": target_embed, "logits": logits, "carried": carried},
        forward={
            "module": ("specforge LlamaForCausalLMEagle3 via OnlineEagle3Model.forward step 0 "
                       f"(project_hidden_states {C.step_fc}, embed_input_ids {C.step_embed}, "
                       f"backbone {C.step_backbone}, compute_logits {C.step_logits})"),
            "dtype": "float32 (weights as saved in bfloat16)",
            "carried": ("the pre-norm output of the draft layer (backbone's hidden_states_out), fed back as "
                        f"hidden_states on the next training-time-test step: {C.carried}; "
                        f"the logits read {'norm(h)' if normed_logits else 'h itself (no final norm)'}: "
                        f"{C.norm_output}, {C.logits_norm if normed_logits else C.logits_raw}"),
            "aux_ids_trainer_resolves": ids,
            "aux_order": ("concatenated in target layer order (ascending), whatever the id order: "
                          f"{SGLANG_CAPTURE_LOOP}"),
            "aux_ids_meaning": (f"SGLang layer ids: id j taps the input of layer j+1 = hidden_states[j + 1] "
                                f"({C.capture_setter} -> {SGLANG_CAPTURE_PLUS_ONE}, {SGLANG_CAPTURE_LOOP})"),
            "lm_head_input": "norm(h)" if normed_logits else "h (un-normed)",
        },
        expect={"refused": REFUSED[name]} if name in REFUSED else {
                "dialect": "flat", "architecture": "LlamaForCausalLMEagle3", "num_layers": 1,
                "hidden_size": TINY["hidden_size"], "draft_vocab_size": TINY["draft_vocab_size"],
                "vocab_size": TINY["vocab_size"], "has_vocab_map": True, "tie_word_embeddings": False,
                "embed_tokens_from_target": True, "lm_head_from_target": False,
                "fc_norm": bool(config.get("fc_norm", False)), "norm_output": False,
                "num_aux_hidden_states": 3},
        notes=COMMON_NOTES + spec["notes"],
    )
    print(f"wrote {variant_dir}: aux ids {ids} -> hidden_states {indices}")


# Variants no engine serves as SpecForge trained them: the record's expect names the config field
# the package's refusal must name (record.py: expect["refused"]).
REFUSED = {"norm_output_false": "norm_output"}


def main() -> None:
    out_root = os.path.abspath(sys.argv[1])
    os.makedirs(out_root, exist_ok=True)
    for name, spec in VARIANTS.items():
        write_variant(out_root, name, spec)


if __name__ == "__main__":
    main()
