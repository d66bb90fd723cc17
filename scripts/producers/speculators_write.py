"""Write tests/producer_files/speculators/ with speculators' own code (run inside its venv; see speculators.sh).

Every drafter here is built, saved and run by speculators 0.9.0 (vLLM / RedHat) itself:

* ``1layer-model-defaults``: the model API with every ``Eagle3SpeculatorConfig`` default (one
  layer, no norm flags, no aux ids written), ``Eagle3DraftModel(config)``, the vocabulary map and
  the verifier's embedding / lm_head loaded the model's own way, then ``save_pretrained`` (float32);
* ``3layer-trainer-defaults``: ``speculators train``'s own build path with every trainer default
  (``TrainConfig`` -> ``parse_vocab_mappings`` over a token-frequency file written by
  ``save_token_frequency_distribution`` -> ``build_draft_model`` -> ``from_training_args``), three
  layers (``--num-layers 3``), saved by the trainer's ``SingleGPUCheckpointer.save_checkpoint``
  (bfloat16); the trainer's defaults are norm_before_residual, norm_before_fc and norm_output all
  true, every draft layer a sliding-window layer (window 2048) and explicit aux ids [2, N//2, N-3];
* ``3layer-trainer-window4``: the same with ``--sliding-window 4 --full-attention-indices 1``, so
  the window bites within the recorded 7 tokens (layers 0 and 2 sliding, layer 1 full);
* ``converted-specforge``: ``speculators convert --algorithm eagle3`` (its CLI, offline) on the
  SpecForge 0.2.0 export ``tests/producer_files/specforge/eagle3/drafter`` (a SafeAILab-layout
  EAGLE-3 written by SpecForge's own code), no algorithm kwargs: aux ids written as null.

Seeded weights stand in for training (norms at 1 + 0.3 * noise, so that a misread norm shows).
The forward is the producer's ``Eagle3DraftModel.forward`` itself, loaded back from the written
files by ``Eagle3DraftModel.from_pretrained`` in float32 (so the weights are the saved ones),
run for two training-time-test steps with hooks that record step 0's ``lm_head`` output (the
draft-vocabulary logits) and the hidden half of layer 0's input on step 1 (the carried state).
Every citation is looked up in the installed sources at run time (a moved line fails the run).

Usage: speculators_write.py OUT_DIR   (OUT_DIR = tests/producer_files/speculators)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types
import warnings

import torch
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
_spec = importlib.util.spec_from_file_location("producer_record", os.path.join(HERE, "record.py"))
record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record)

import speculators  # noqa: E402
from speculators.config import SpeculatorsConfig, VerifierConfig  # noqa: E402
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig  # noqa: E402
from speculators.proposals.greedy import GreedyTokenProposalConfig  # noqa: E402
from speculators.train.checkpointer import SingleGPUCheckpointer  # noqa: E402
from speculators.train.cli import build_draft_model, parse_vocab_mappings  # noqa: E402
from speculators.train.config.schema import TrainConfig  # noqa: E402
from speculators.train.vocab_mapping import (  # noqa: E402
    build_vocab_mappings_from_distribution,
    save_token_frequency_distribution,
)
from transformers import LlamaConfig  # noqa: E402

PACKAGE = "speculators==0.9.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(speculators.__file__)))
REPO = os.path.dirname(os.path.dirname(HERE))
TINY = record.TINY
N = TINY["target_layers"]
H = TINY["hidden_size"]
SPECFORGE_INPUT = os.path.join(REPO, "tests", "producer_files", "specforge", "eagle3")


def cite(path: str, snippet: str, nth: int = 1, span: int = 0) -> str:
    return record.cite(ROOT, PACKAGE, path, snippet, nth, span)


CORE = "speculators/models/eagle3/core.py"
CFG = "speculators/models/eagle3/config.py"
DEFS = "speculators/models/eagle3/model_definitions.py"
UTILS = "speculators/models/utils.py"
MODEL = "speculators/model.py"
SCHEMA = "speculators/train/config/schema.py"
CLI = "speculators/train/cli.py"
DATA = "speculators/train/data.py"
CKPT = "speculators/train/checkpointer.py"
VOCAB = "speculators/train/vocab_mapping.py"
CONV = "speculators/convert/eagle/eagle3_converter.py"
LEGACY = "speculators/convert/eagle/eagle3_legacy_model.py"
C = types.SimpleNamespace(
    # aux taps: which target hidden states, in which order, with which ids
    default_ids=cite(UTILS, "target_layer_ids = [2, num_layers // 2, num_layers - 3]"),
    ids_range=cite(UTILS, "# Layer id ``num_layers`` (the final hidden state) is valid, matching the", span=1),
    ids_resolve_train=cite(CORE, "target_layer_ids = resolve_target_layer_ids(", nth=1),
    ids_resolve_load=cite(CORE, "model.config.eagle_aux_hidden_state_layer_ids = resolve_target_layer_ids("),
    ids_schema=cite(SCHEMA, "auxiliary hidden states. Defaults to [2, n//2, n-3]."),
    ids_meaning=cite("speculators/convert/dflash/converter.py",
                     "# z-lab reads hidden_states[layer_id + 1] (index 0 is the embedding", span=1),
    ids_last=cite("speculators/convert/dflash/converter.py", "# Exclude the last verifier layer", span=2),
    hs_layout=cite(DATA, '"hidden_states": loaded_hs["hidden_states"][:, :-1].flatten(', span=6),
    fc=cite(CORE, "num_aux * self.hidden_size, self.hidden_size, bias=False"),
    num_aux=cite(CORE, "len(config.eagle_aux_hidden_state_layer_ids)", span=3),
    # norms before fc
    input_norm=cite(CORE, "self.input_norm = self._model_definitions.norm_class(", span=3),
    input_norm_apply=cite(CORE, "hidden_states = self.input_norm(hidden_states)"),
    fc_norm_apply=cite(CORE, "[norm(chunk) for norm, chunk in zip(self.fc_norm, chunks, strict=True)],"),
    fc_apply=cite(CORE, "hidden_states = self.fc(hidden_states)"),
    # layer 0
    cat_order=cite(CORE, "hidden_states = torch.cat([input_embeds, hidden_states], dim=-1)"),
    split=cite(DEFS, "embeds, hidden = hidden_states.split(mid, dim=-1)", span=1),
    l0_norms=cite(DEFS, "embeds = self.input_layernorm(embeds)", span=3),
    l0_residual=cite(DEFS, "residual = hidden  # set residual to normalized hidden"),
    l0_qkv=cite(DEFS, "2 * config.hidden_size,  # previous: config.hidden_size"),
    later_layers=cite(CORE, "[dl_class(tl_config, layer_idx) for layer_idx in range(1, num_layers)]"),
    llama_classes=cite(DEFS, '"llama": base_components.override_components('),
    # output, carried state
    norm_output=cite(CORE, "if self.config.norm_output:", span=4),
    carried_loop=cite(CORE, "hidden_states = torch.cat([input_embeds, hidden_states], dim=-1)"),
    lm_head=cite(MODEL, "self.lm_head = nn.Linear(self.hidden_size, self.draft_vocab_size, bias=False)"),
    lm_head_frozen=cite(MODEL, "self.lm_head.weight.requires_grad = False"),
    lm_head_from_verifier=cite(MODEL, "lm_head_weight = lm_head_weight[", span=2),
    embed_from_verifier=cite(MODEL, 'self.embed_tokens.load_state_dict({"weight": embed_tokens_weight})'),
    # rope
    rope=cite(CORE, "modified_tl_config = flatten_rope_parameters(config.transformer_layer_config)", span=3),
    rope_apply=cite(CORE, "position_embeddings = self.rotary_emb(hidden_states, position_ids)"),
    rope_from_verifier=cite(CLI, "rope_params = deepcopy(verifier_config.rope_parameters)"),
    positions_shift=cite("speculators/models/eagle3/data.py",
                         "position_ids = position_ids[1:]  # Note: position_ids now start at 1"),
    positions_step=cite(CORE, "position_ids = position_ids + 1"),
    # sliding window
    sw_layers=cite(CORE, "self.sliding_window_indices = [", span=4),
    sw_mask=cite("speculators/models/eagle3/attention.py", "causal = causal & (kv_idx > q_idx - sliding_window)"),
    sw_select=cite(CORE, "if layer_idx in self.sliding_window_indices"),
    sw_trainer=cite(CLI, '"full_attention" if i in full_attention_indices else "sliding_attention"'),
    sw_trainer_cfg=cite(CLI, "sliding_window=sliding_window,", nth=1),
    sw_default=cite(SCHEMA, "default=2048,"),
    # vocab map
    vocab_offsets=cite(VOCAB, "# Store offset: target_token_id = draft_idx + draft_to_target[draft_idx]", span=3),
    vocab_mask=cite(VOCAB, "target_to_draft[selected_token_ids] = True"),
    vocab_buffers=cite(MODEL, 'self.register_buffer("t2d", t2d)', span=1),
    vocab_load=cite(CLI, "d2t, t2d, draft_vocab_size = parse_vocab_mappings(args)"),
    # trainer defaults
    d_nbr=cite(SCHEMA, "norm_before_residual: bool = Field(", span=2),
    d_nbf=cite(SCHEMA, "self.draft.norm_before_fc = is_eagle3"),
    d_no=cite(SCHEMA, "self.draft.norm_output = is_eagle3"),
    d_layers=cite(SCHEMA, "self.draft.num_layers = 5 if is_dflash_family else 1"),
    d_arch=cite(SCHEMA, 'self.draft.draft_arch = "llama" if is_eagle3 else "qwen3"'),
    d_cfg_nbr=cite(CFG, "norm_before_residual: bool = Field(", span=2),
    d_cfg_nbf=cite(CFG, "norm_before_fc: bool = Field(", span=2),
    d_cfg_no=cite(CFG, "norm_output: bool = Field(", span=2),
    build=cite(CLI, "return model_class.from_training_args("),
    from_args=cite(CORE, "config = Eagle3SpeculatorConfig("),
    # saving
    save_ckpt=cite(CKPT, "raw_model.save_pretrained(self.path / str(epoch), state_dict=model_state_dict)"),
    save_dtype=cite(CKPT, "float_dtype: torch.dtype = torch.bfloat16,", nth=2),
    save_patch=cite(CKPT, 'patch_config_dtype(self.path / str(epoch) / "config.json", float_dtype)', nth=1),
    ignore_save=cite(CORE, "_keys_to_ignore_on_save: ClassVar[list[str]] = ["),
    # converter
    conv_ids=cite(CONV, "eagle_aux_hidden_state_layer_ids=eagle_aux_hidden_state_layer_ids,", nth=1),
    conv_norm_output=cite(CONV, 'norm_output=norm_output or eagle_config.get("norm_output", False),'),
    conv_nbr=cite(CONV, "norm_before_residual=norm_before_residual,"),
    conv_remap=cite(CONV, 'new_key = key.replace("midlayer.", "layers.0.")'),
    conv_save=cite(CONV, "model.save_pretrained(str(output_dir))"),
    conv_embed=cite(LEGACY, "if has_drafter_embedding:"),
    conv_vocab=cite(CONV, 'if "t2d" in weights:'),
    conv_dtype=cite(CONV, "model.to(dtype=weights_dtype)"),
    conv_forward=cite(LEGACY, 'raise NotImplementedError("Eagle3Speculator.forward is not implemented yet.")'),
    # forward / load
    load=cite(CORE, "model = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)"),
    load_verifier=cite(MODEL, "model.load_verifier_weights()  # type: ignore[operator,attr-defined]"),
    embed_nan=cite(MODEL, "torch.nn.init.constant_(self.embed_tokens.weight, torch.nan)"),
    embed_if_nan=cite(MODEL, "if overwrite_embed_tokens or self.embed_tokens.weight.isnan().any():"),
    embed_hf_init=cite(MODEL, "self.embed_tokens._is_hf_initialized = True"),
    attn_default=cite(CORE, '"simple_flex_attention"', nth=1),
    attn_eager=cite(SCHEMA, 'draft_attn_impl: Literal["simple_flex_attention", "sdpa", "eager"] = Field('),
    attn_mask_fn=cite(CORE, "else create_float_mask", span=1),
)

EMBED_NOTE = (
    "speculators' own loader misses the verifier embedding of a checkpoint without embed_tokens (what "
    "speculators convert writes from a SpecForge/SafeAILab export): Eagle3DraftModel.from_pretrained under "
    f"transformers 5.19 leaves embed_tokens as uninitialised memory, not the NaN its __init__ sets "
    f"({C.embed_nan}, {C.embed_hf_init}), so load_verifier_weights keeps it ({C.embed_if_nan}); the recorded "
    "forward loads the verifier's embedding with the same loader's overwrite_embed_tokens=True (vLLM serves such "
    "a drafter with the target's embedding)")

SPECFORGE_NORM_OUTPUT = ("specforge==0.2.0 specforge/modeling/draft/llama3_eagle.py "
                         "(self.norm_output = getattr(config, \"norm_output\", True))")

COMMON_NOTES = [
    (f"aux ids are HF output_hidden_states indices (id k = the residual stream entering target layer k, "
     f"id N = the last layer's output): vLLM's capture appends hidden_states + residual before layer k; "
     f"speculators converts z-lab's layer-output ids with +1 ({C.ids_meaning}) and allows id N ({C.ids_range}); "
     f"the capture returns the aux layers then the last layer, split into fc's input (aux, in capture order) and "
     f"verifier_last_hidden_states ({C.hs_layout})"),
    (f"no aux ids given: the trainer writes [2, N//2, N-3] = [2, 4, 5] for the 8-layer target ({C.default_ids}, "
     f"resolved at build {C.ids_resolve_train}); a config whose ids are null is resolved the same way when "
     f"speculators loads it ({C.ids_resolve_load})"),
    (f"fc takes len(ids) (3 when null) aux states of width H ({C.num_aux}, {C.fc}); optional norms before it: "
     f"norm_before_fc = one RMSNorm over the whole concatenation [A*H] ({C.input_norm}, {C.input_norm_apply}), "
     f"fc_norm = one per chunk ({C.fc_norm_apply})"),
    (f"layer 0 takes cat(embed, fc(aux)) ({C.cat_order}), splits it ({C.split}), normalises embed with "
     f"input_layernorm and the hidden half with hidden_norm ({C.l0_norms}); residual = fc(aux), or "
     f"hidden_norm(fc(aux)) with norm_before_residual ({C.l0_residual}); q/k/v take 2H ({C.l0_qkv}); later "
     f"layers are transformers' plain LlamaDecoderLayer ({C.later_layers}, {C.llama_classes}): input_layernorm "
     "then attention"),
    (f"lm_head reads norm(h) whatever norm_output says; norm_output decides the carried state: true carries "
     f"norm(h), false carries h ({C.norm_output}); the carried state is concatenated with the next step's embed "
     f"({C.carried_loop})"),
    (f"lm_head [Vd, H] is the verifier's lm_head rows selected by t2d and frozen ({C.lm_head_from_verifier}, "
     f"{C.lm_head_frozen}); embed_tokens is the verifier's, frozen ({C.embed_from_verifier}); both are saved"),
    (f"vocab map: d2t int64 [Vd] offsets (target = draft + d2t[draft]) and t2d bool [V] ({C.vocab_offsets}, "
     f"{C.vocab_mask}), saved buffers ({C.vocab_buffers})"),
    (f"RoPE: transformers' LlamaRotaryEmbedding of transformer_layer_config.rope_parameters (the verifier's, "
     f"{C.rope_from_verifier}; {C.rope}), applied to the given position ids ({C.rope_apply}); the trainer's data "
     f"starts them at 1 ({C.positions_shift}) and adds 1 per TTT step ({C.positions_step}): a uniform offset, "
     f"which RoPE's relative attention does not see (checked: the forward with positions + 1 is recorded in notes)"),
    (f"sliding window: layers whose layer_types entry is sliding_attention mask keys with kv > q - window "
     f"({C.sw_layers}, {C.sw_select}, {C.sw_mask}), i.e. each query sees itself and window - 1 earlier tokens"),
    ("the recorded forward is Eagle3DraftModel.forward itself (two TTT steps, no loss), its lm_head output on "
     "step 0 and the hidden half of layer 0's input on step 1 taken with hooks, float32; attention: the trainer's "
     f"--draft-attn-impl eager ({C.attn_eager}: a float mask from the same mask_mod, {C.attn_mask_fn}) instead of "
     f"the default simple_flex_attention ({C.attn_default}), whose block mask needs sequences padded to its "
     "128-token blocks on the second TTT step"),
]


def seeded_weights(model: torch.nn.Module, seed: int) -> None:
    record.perturb(model, seed, keep=lambda name, param: not param.requires_grad)


def write_target(work: str, seed: int, embed: torch.Tensor | None = None) -> str:
    """``work/target``: the tiny target's config.json and the weights speculators loads from a
    verifier (embed_tokens, lm_head, final norm), seeded. Returns the relative name ``target``."""
    target = os.path.join(work, "target")
    os.makedirs(target, exist_ok=True)
    json.dump(record.tiny_target_config(), open(os.path.join(target, "config.json"), "w"), indent=2)
    gen = torch.Generator().manual_seed(2000 + seed)
    if embed is None:
        embed = torch.randn(TINY["vocab_size"], H, generator=gen)
    save_file({"model.embed_tokens.weight": embed.float().contiguous(),
               "lm_head.weight": torch.randn(TINY["vocab_size"], H, generator=gen) / H ** 0.5,
               "model.norm.weight": 1.0 + 0.3 * torch.randn(H, generator=gen)},
              os.path.join(target, "model.safetensors"))
    return "target"


def token_freq_file(work: str, seed: int) -> str:
    """The trainer's token-frequency file, written by speculators' own
    save_token_frequency_distribution over seeded token rows (Zipf-like over a seeded
    permutation, so that the 128 kept ids are not simply 0..127)."""
    from datasets import Dataset

    gen = torch.Generator().manual_seed(1000 + seed)
    order = torch.randperm(TINY["vocab_size"], generator=gen)
    weights = 1.0 / torch.arange(1, TINY["vocab_size"] + 1, dtype=torch.float64)
    rows = [order[torch.multinomial(weights, 48, replacement=True, generator=gen)] for _ in range(64)]
    dataset = Dataset.from_dict({"input_ids": [r.tolist() for r in rows],
                                 "loss_mask": [[1] * len(r) for r in rows]}).with_format("torch")
    path = os.path.join(work, "data", "token_freq.pt")
    save_token_frequency_distribution(dataset, path)
    return path


@contextlib.contextmanager
def cwd(path: str):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def producer_forward(drafter_dir: str, verifier: str, inputs: dict, attn: str = "eager"):
    """Eagle3DraftModel.from_pretrained (float32) on the written files, then its own forward for
    two TTT steps. Returns (logits of step 0, carried state fed to step 1, the model)."""
    config = Eagle3SpeculatorConfig.from_pretrained(drafter_dir)
    config.transformer_layer_config._attn_implementation = attn  # as build_draft_model re-applies it
    model = Eagle3DraftModel.from_pretrained(drafter_dir, config=config, verifier=verifier, dtype=torch.float32)
    model.eval()
    if "embed_tokens.weight" not in load_file(os.path.join(drafter_dir, "model.safetensors")):
        # from_pretrained leaves a missing embed_tokens as uninitialised memory, not the NaN sentinel
        # load_verifier_weights tests for (see EMBED_NOTE): load the verifier's embedding explicitly,
        # with the producer's own loader and its overwrite switch
        model._load_verifier_weights(overwrite_embed_tokens=True)
    seen: dict[str, list[torch.Tensor]] = {"logits": [], "layer0_in": [], "last_out": []}
    hooks = [
        model.lm_head.register_forward_hook(lambda m, a, out: seen["logits"].append(out.detach().clone())),
        model.layers[0].register_forward_pre_hook(lambda m, a: seen["layer0_in"].append(a[0].detach().clone())),
        model.layers[-1].register_forward_hook(lambda m, a, out: seen["last_out"].append(
            (out[0] if isinstance(out, tuple) else out).detach().clone())),
    ]
    length = inputs["input_ids"].shape[1]
    with torch.no_grad():
        model(hidden_states=inputs["aux"], input_ids=inputs["input_ids"],
              document_ids=torch.zeros(1, length, dtype=torch.long),
              position_ids=inputs["positions"].reshape(1, -1), ttt_steps=2)
    for hook in hooks:
        hook.remove()
    logits = seen["logits"][0]
    carried = seen["layer0_in"][1][..., H:]
    # cross-check the carried state against what core.py says it is
    expected = model.norm(seen["last_out"][0]) if model.config.norm_output else seen["last_out"][0]
    assert torch.equal(carried, expected), "carried state is not what core.py's norm_output branch says"
    assert logits.shape == (1, length, model.config.draft_vocab_size), logits.shape
    # positions as the trainer's data feeds them (starting at 1): RoPE is relative, so the same
    shifted = []
    hook = model.lm_head.register_forward_hook(lambda m, a, out: shifted.append(out.detach().clone()))
    with torch.no_grad():
        model(hidden_states=inputs["aux"], input_ids=inputs["input_ids"],
              document_ids=torch.zeros(1, length, dtype=torch.long),
              position_ids=inputs["positions"].reshape(1, -1) + 1, ttt_steps=1)
    hook.remove()
    offset_diff = float((shifted[0] - logits).abs().max())
    return logits, carried, model, offset_diff


def trainer_args(verifier: str, data_path: str, save_path: str, **flags) -> argparse.Namespace:
    """`speculators train`'s namespace: TrainConfig (its defaults resolved by its own validator)
    flattened the way train/cli.py:main does it."""
    flat = {"speculator_type": "eagle3", "verifier_name_or_path": verifier, "data_path": data_path,
            "save_path": save_path, "draft_vocab_size": TINY["draft_vocab_size"],
            # only dflash uses a mask token; explicit so that no tokenizer is needed to resolve one
            "mask_token_id": 0}
    flat.update(flags)
    return argparse.Namespace(**TrainConfig.from_flat(flat).flatten())


def expect_for(model, *, embed_from_target: bool) -> dict:
    cfg = model.config
    tl = cfg.transformer_layer_config
    layer_types = list(getattr(tl, "layer_types", None) or [])
    expect = {
        "dialect": "speculators", "num_layers": tl.num_hidden_layers, "hidden_size": H,
        "draft_vocab_size": cfg.draft_vocab_size, "vocab_size": tl.vocab_size, "has_vocab_map": True,
        "tie_word_embeddings": False, "embed_tokens_from_target": embed_from_target,
        "lm_head_from_target": False, "num_aux_hidden_states": 3,
        "norm_before_fc": cfg.norm_before_fc, "fc_norm": cfg.fc_norm,
        "norm_before_residual": cfg.norm_before_residual, "norm_output": cfg.norm_output,
        "rope_theta": TINY["rope_theta"],
    }
    if tl.num_hidden_layers > 1:  # transformers' LlamaDecoderLayer: input_layernorm first
        expect["later_layer_norm"] = "input_layernorm"
    if "sliding_attention" in layer_types:
        expect["sliding_window"] = tl.sliding_window
        expect["layer_types"] = layer_types
    return expect


def build_model_defaults(work: str, seed: int) -> tuple[str, str]:
    """Variant a: the model API with Eagle3SpeculatorConfig's defaults, save_pretrained."""
    verifier = write_target(work, seed)
    freq = torch.load(token_freq_file(work, seed), weights_only=True)
    d2t, t2d = build_vocab_mappings_from_distribution(freq, TINY["draft_vocab_size"], TINY["vocab_size"])
    layer = LlamaConfig(
        vocab_size=TINY["vocab_size"], hidden_size=H, intermediate_size=TINY["intermediate_size"],
        num_hidden_layers=1, num_attention_heads=TINY["num_attention_heads"],
        num_key_value_heads=TINY["num_key_value_heads"], head_dim=TINY["head_dim"],
        max_position_embeddings=TINY["max_position_embeddings"], rms_norm_eps=TINY["rms_norm_eps"],
        rope_parameters={"rope_type": "default", "rope_theta": TINY["rope_theta"]}, tie_word_embeddings=False)
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer, draft_vocab_size=TINY["draft_vocab_size"],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy", verifier=VerifierConfig.from_pretrained(verifier)))
    model = Eagle3DraftModel(config)
    model.load_vocab_mappings(t2d, d2t)
    model.load_verifier_weights()
    seeded_weights(model, seed)
    out = os.path.join(work, "saved")
    model.save_pretrained(out)
    return out, verifier


def build_trainer(work: str, seed: int, **flags) -> tuple[str, str]:
    """Variants b/d: speculators train's build path, saved by its SingleGPUCheckpointer."""
    verifier = write_target(work, seed)
    token_freq_file(work, seed)
    args = trainer_args(verifier, "data", "run", num_layers=3, **flags)
    d2t, t2d, draft_vocab_size = parse_vocab_mappings(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the trainer's "--target-layer-ids is not explicitly set" warning
        model = build_draft_model(args, Eagle3DraftModel, t2d, d2t, draft_vocab_size)
    seeded_weights(model, seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    SingleGPUCheckpointer(args.save_path).save_checkpoint(model, optimizer, 0)
    return os.path.join(work, "run", "0"), verifier


def build_converted(work: str, seed: int) -> tuple[str, str]:
    """Variant c: `speculators convert --algorithm eagle3` on SpecForge's own export."""
    source = os.path.join(SPECFORGE_INPUT, "drafter")
    # the verifier speculators loads embed_tokens from: the target embedding SpecForge trained with
    forward = load_file(os.path.join(SPECFORGE_INPUT, "forward.safetensors"))
    verifier = write_target(work, seed, embed=forward["target_embed"])
    local = os.path.join(work, "specforge-export")
    shutil.copytree(source, local)
    out = os.path.join(work, "converted")
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "speculators"), "convert", local,
                    "--algorithm", "eagle3", "--verifier", verifier, "--output-path", out], check=True)
    return out, verifier


VARIANTS = {
    "1layer-model-defaults": dict(build=build_model_defaults, seed=21, written_by=(
        "speculators.models.eagle3.Eagle3DraftModel(Eagle3SpeculatorConfig(...defaults...)) with "
        "load_vocab_mappings / load_verifier_weights, then save_pretrained (float32)")),
    "3layer-trainer-defaults": dict(build=build_trainer, seed=22, written_by=(
        "speculators train's build path (TrainConfig defaults, --num-layers 3: parse_vocab_mappings, "
        "build_draft_model -> Eagle3DraftModel.from_training_args), saved by "
        "speculators.train.checkpointer.SingleGPUCheckpointer.save_checkpoint (bfloat16)")),
    "3layer-trainer-window4": dict(build=build_trainer, seed=23,
                                   flags={"sliding_window": 4, "full_attention_indices": [1]},
                                   written_by=(
        "speculators train's build path with --num-layers 3 --sliding-window 4 --full-attention-indices 1 "
        "(other flags at their defaults), saved by SingleGPUCheckpointer.save_checkpoint (bfloat16)")),
    "converted-specforge": dict(build=build_converted, seed=11, written_by=(
        "`speculators convert <specforge export> --algorithm eagle3 --verifier target` "
        "(speculators.convert.eagle.Eagle3Converter: Eagle3Speculator.save_pretrained)")),
}


def write_variant(out_root: str, name: str, spec: dict) -> None:
    variant_dir = os.path.join(out_root, name)
    seed = spec["seed"]
    with tempfile.TemporaryDirectory(prefix=f"speculators-{name}-") as work, cwd(work):
        if spec["build"] is build_trainer:
            saved, verifier = build_trainer(work, seed, **spec.get("flags", {}))
        else:
            saved, verifier = spec["build"](work, seed)
        drafter_dir = os.path.join(variant_dir, "drafter")
        if os.path.isdir(drafter_dir):
            shutil.rmtree(drafter_dir)
        os.makedirs(variant_dir, exist_ok=True)
        shutil.copytree(saved, drafter_dir)
        written = load_file(os.path.join(drafter_dir, "model.safetensors"))
        config = json.load(open(os.path.join(drafter_dir, "config.json")))

        ids_written = config.get("eagle_aux_hidden_state_layer_ids")
        ids = list(ids_written) if ids_written is not None else [2, N // 2, N - 3]
        inputs = record.seeded_inputs(seed, len(ids) * H)
        logits, carried, model, offset_diff = producer_forward(saved, verifier, inputs)
        assert model.config.eagle_aux_hidden_state_layer_ids == ids, model.config.eagle_aux_hidden_state_layer_ids
        has_embed = "embed_tokens.weight" in written
        target_embed = model.embed_tokens.weight.detach().clone()
        saved_dtype = str(written["fc.weight"].dtype).removeprefix("torch.")

    tensors = {"input_ids": inputs["input_ids"], "positions": inputs["positions"], "aux": inputs["aux"],
               "logits": logits, "carried": carried}
    if not has_embed:
        tensors["target_embed"] = target_embed
    notes = list(COMMON_NOTES) + [
        f"aux ids as written: {ids_written}; the producer's module tapped hidden_states {ids}",
        f"the same forward with the trainer's positions (starting at 1) differs by {offset_diff:.2e} "
        "(RoPE is relative)",
    ]
    sources = {C.default_ids, C.ids_range, C.ids_resolve_train, C.ids_resolve_load, C.ids_meaning, C.ids_last,
               C.hs_layout, C.fc, C.num_aux, C.input_norm, C.input_norm_apply, C.fc_norm_apply, C.fc_apply,
               C.cat_order, C.split, C.l0_norms, C.l0_residual, C.l0_qkv, C.later_layers, C.llama_classes,
               C.norm_output, C.carried_loop, C.lm_head, C.lm_head_frozen, C.lm_head_from_verifier,
               C.embed_from_verifier, C.rope, C.rope_apply, C.positions_shift, C.positions_step,
               C.sw_layers, C.sw_mask, C.sw_select, C.vocab_offsets, C.vocab_mask, C.vocab_buffers,
               C.load, C.load_verifier, C.embed_nan, C.embed_if_nan, C.attn_default, C.attn_eager, C.attn_mask_fn}
    if spec["build"] is build_model_defaults:
        sources |= {C.d_cfg_nbr, C.d_cfg_nbf, C.d_cfg_no}
        notes.append(f"Eagle3SpeculatorConfig defaults: norm_before_residual, norm_before_fc, fc_norm, norm_output all "
                     f"false ({C.d_cfg_nbr}, {C.d_cfg_nbf}, {C.d_cfg_no}); aux ids not written (null)")
    elif spec["build"] is build_trainer:
        sources |= {C.d_nbr, C.d_nbf, C.d_no, C.d_layers, C.d_arch, C.build, C.from_args, C.sw_trainer,
                    C.sw_trainer_cfg, C.sw_default, C.vocab_load, C.save_ckpt, C.save_dtype, C.save_patch,
                    C.ids_schema, C.rope_from_verifier, C.ignore_save}
        notes.append(f"trainer defaults for eagle3: norm_before_residual true ({C.d_nbr}), norm_before_fc true "
                     f"({C.d_nbf}), norm_output true ({C.d_no}), llama layers ({C.d_arch}), one layer unless "
                     f"--num-layers ({C.d_layers}); every draft layer sliding_attention unless named in "
                     f"--full-attention-indices ({C.sw_trainer}), window --sliding-window, "
                     f"default 2048 ({C.sw_default})")
        notes.append(f"saved by the checkpointer in bfloat16 ({C.save_dtype}, {C.save_ckpt}, {C.save_patch}); the "
                     f"checkpoint directory also holds the (empty, step-0) optimizer state and config.py (auto_map)")
    else:
        sources |= {C.conv_ids, C.conv_norm_output, C.conv_nbr, C.conv_remap, C.conv_save, C.conv_embed,
                    C.conv_vocab, C.conv_dtype, C.conv_forward}
        notes.append("input: SpecForge 0.2.0's own export tests/producer_files/specforge/eagle3/drafter "
                     "(no embed_tokens, d2t/t2d); converted with no --algorithm-kwargs: aux ids written null "
                     f"({C.conv_ids}), norm_before_residual false ({C.conv_nbr}), midlayer.* -> layers.0.* "
                     f"({C.conv_remap}), no embed_tokens written ({C.conv_embed}), bfloat16 ({C.conv_dtype})")
        notes.append(EMBED_NOTE)
        notes.append(f"the converter's own model class has no forward ({C.conv_forward}); the recorded forward is "
                     f"Eagle3DraftModel loading the converted files, with embed_tokens from the verifier "
                     f"({C.embed_from_verifier}) = the target embedding SpecForge trained with")
        specforge = load_file(os.path.join(SPECFORGE_INPUT, "forward.safetensors"))
        if torch.equal(specforge["aux"], inputs["aux"]) and torch.equal(specforge["input_ids"], inputs["input_ids"]):
            notes.append("conversion check: on SpecForge's recorded inputs this forward differs from SpecForge's own "
                         f"recorded logits by {float((specforge['logits'] - logits).abs().max()):.2e} and carried "
                         f"state by {float((specforge['carried'] - carried).abs().max()):.2e}")
        notes.append("speculators convert reads a SafeAILab/SpecForge config's norm_output as its own "
                     f"({C.conv_norm_output}): in speculators true means 'carry norm(h)'; in SpecForge true (its "
                     "default) means 'lm_head reads norm(h)' and the carried state stays pre-norm "
                     f"({SPECFORGE_NORM_OUTPUT}), so converting a SpecForge config that writes norm_output: true "
                     "(its eagle3.1 configs) turns on a post-norm carried state the drafter never trained with; this "
                     "input writes no norm_output, so it converts as trained")

    carried_why = (f"{'norm(h)' if model.config.norm_output else 'h (pre-norm)'} of the last draft layer, "
                   f"fed back as the hidden half of layer 0's input on the next TTT step: {C.norm_output}, "
                   f"{C.carried_loop}")
    record.write_record(
        variant_dir, producer="speculators", package=PACKAGE, variant=name, written_by=spec["written_by"],
        sources=sorted(sources), drafter="drafter", aux_hidden_state_indices=sorted(ids),
        tensors=tensors,
        forward={
            "module": f"speculators Eagle3DraftModel.forward (from_pretrained: {C.load}), TTT step 0",
            "dtype": f"float32 (weights as saved in {saved_dtype})",
            "carried": carried_why,
            "aux_ids_written": ids_written,
            "aux_ids_producer_taps": ids,
            "aux_ids_meaning": "HF output_hidden_states indices (vLLM's: the input of layer k): " + C.ids_meaning,
            "lm_head_input": f"norm(h) ({C.norm_output})",
            "attention": (f"eager (--draft-attn-impl eager, {C.attn_eager}; same mask_mod as the default "
                          "flex attention)"),
        },
        expect=expect_for(model, embed_from_target=not has_embed),
        notes=notes,
    )
    print(f"wrote {variant_dir}: aux ids {ids_written} -> hidden_states {ids}, saved {saved_dtype}")


def main() -> None:
    out_root = os.path.abspath(sys.argv[1])
    os.makedirs(out_root, exist_ok=True)
    only = sys.argv[2:]
    for name, spec in VARIANTS.items():
        if not only or name in only:
            write_variant(out_root, name, spec)


if __name__ == "__main__":
    main()
