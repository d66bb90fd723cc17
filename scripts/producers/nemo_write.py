"""Write tests/producer_files/nemo/ with NeMo Automodel's own code (nemo-automodel==0.7.0).

Runs inside the venv scripts/producers/nemo.sh builds; imports record.py by path. For each variant
(one subprocess each: NeMo's recipe initialises torch.distributed once per process):

1. a seeded tiny HF ``LlamaForCausalLM`` target (``record.tiny_target_config()``) saved to a temp dir
   with a tiny word-level tokenizer and chat template (NeMo's recipe loads both from the target
   path), and a handful of synthetic chat examples;
2. NeMo's own ``TrainEagle3Recipe`` (recipes/llm/train_eagle3.py) built from a run config
   (``recipe_args``) on the CPU with the co-located HF target: it builds the draft through its own
   draft class (``LlamaEagle3DraftModel``, via the eagle registry), its own vocab selection
   and its own target capture;
3. seeded perturbation of the draft's weights (norms at 1 + 0.3 * noise, so a misplaced norm shows)
   right after ``setup()``, then the recipe's own loop for 2 optimizer steps, which saves the final
   checkpoint through the recipe's own ``save_checkpoint`` -> its checkpointer (the real
   ``epoch_*_step_*/`` tree: model/consolidated/, eagle_meta.pt, config.yaml, ...);
4. the trained draft module (NeMo's own, float32) run on ``record.seeded_inputs``: the trainer's
   step-0 order (``project_hidden_states`` -> ``forward`` -> ``compute_logits``); the carried state
   is what ``forward`` returns, fed back as ``projected_hidden_states`` on the next TTT step;
5. NeMo's own capture (``HFEagle3TargetModel.generate_batch``) on the tiny target, compared with
   HF ``output_hidden_states`` to state which hidden-state indices its aux ids tap;
6. ``serve_sglang --print-only`` on the epoch folder, its printed command kept in the record.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("producer_record", os.path.join(HERE, "record.py"))
record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record)
TINY = record.TINY

PACKAGE = "nemo-automodel==0.7.0"
import nemo_automodel  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(nemo_automodel.__file__)))


def cite(path: str, snippet: str, nth: int = 1, span: int = 0) -> str:
    return record.cite(ROOT, PACKAGE, path, snippet, nth, span)


RECIPE = "nemo_automodel/recipes/llm/train_eagle3.py"
DRAFT = "nemo_automodel/components/speculative/eagle/draft_llama.py"
CORE = "nemo_automodel/components/speculative/eagle/core.py"
TARGET = "nemo_automodel/components/speculative/eagle/target.py"
REGISTRY = "nemo_automodel/components/speculative/eagle/registry.py"
DATA = "nemo_automodel/components/datasets/llm/eagle3.py"
CKPT = "nemo_automodel/components/checkpoint/checkpointing.py"
SERVE = "nemo_automodel/components/speculative/serve_sglang.py"


class C:
    """Citations, looked up in the installed package (see :func:`cite`)."""

    draft_config_copy = cite(RECIPE, "draft_config = draft_base_config.to_dict()")
    draft_arch = cite(RECIPE, 'draft_config["architectures"] = ["LlamaEagle3DraftModel"]')
    draft_vocab_cfg = cite(RECIPE, 'draft_config["draft_vocab_size"] = int(selected_token_ids.numel())')
    draft_fc_norm = cite(RECIPE, 'draft_config["fc_norm"] = bool(recipe_cfg.get("fc_norm", False))')
    draft_norm_output = cite(RECIPE, 'draft_config["norm_output"] = bool(recipe_cfg.get("norm_output", False))')
    draft_parallel = cite(RECIPE, 'draft_config["parallel_drafting"] = parallel_drafting')
    draft_build = cite(RECIPE, "self.draft_model = draft_spec.draft_cls(draft_config_obj)")
    draft_dtype = cite(RECIPE, "self.compute_dtype = torch.bfloat16 if self.device.type == \"cuda\" else torch.float32")
    copy_embed = cite(RECIPE, "self.draft_model.copy_embeddings_from_target(embed_source)")
    set_vocab = cite(RECIPE, "self.draft_model.set_vocab_mapping(selected_token_ids)")
    registry = cite(REGISTRY, "arch: DraftSpec(draft_cls=LlamaEagle3DraftModel) for arch in _DENSE_ARCHITECTURES")
    aux_ids_cfg = cite(RECIPE, 'aux_layer_ids=recipe_cfg.get("aux_layer_ids", None)')
    vocab_cfg = cite(RECIPE, 'draft_vocab_size=recipe_cfg.get("draft_vocab_size", None)')
    vocab_full = cite(DATA, "if draft_vocab_size is None or draft_vocab_size >= target_vocab_size:")
    save_model = cite(RECIPE, "self.checkpointer.save_model(")
    save_extra = cite(RECIPE, 'os.path.join(path, "eagle_meta.pt")')
    meta_ids = cite(RECIPE, '"selected_token_ids": self._module().selected_token_ids.cpu()')
    save_config_call = cite(RECIPE, "save_config(self.cfg.raw_config, path)")
    save_config_def = cite(CKPT, 'config_path = os.path.join(weights_path, "config.yaml")')
    save_config_dump = cite(CKPT, "yaml.dump(config, f, sort_keys=False, default_flow_style=False)", nth=2)
    epoch_dir = cite(RECIPE, 'path = os.path.join(str(ckpt_root), f"epoch_{epoch}_step_{step}")')
    consolidated = cite(RECIPE, "save_consolidated=not is_peft,")
    final_ckpt = cite(RECIPE, "is_final_checkpoint=True,")
    single_layer = cite(DRAFT, "layers: list[nn.Module] = [Eagle3LlamaDecoderLayer(config, layer_id=0)]")
    d2t_buffers = cite(DRAFT, 'self.register_buffer("d2t", torch.zeros(self.draft_vocab_size, dtype=torch.long), '
                              'persistent=True)')
    d2t_offsets = cite(DRAFT, "self.d2t.copy_(selected - base)")
    layer_norms = cite(DRAFT, "norm_input_embeds = self.input_layernorm(input_embeds)")
    hidden_norm = cite(DRAFT, "norm_hidden_states = self.hidden_norm(hidden_states)")
    cat_order = cite(DRAFT, "combined_states = torch.cat((norm_input_embeds, norm_hidden_states), dim=-1)")
    residual = cite(DRAFT, "residual = hidden_states", nth=1)
    rope = cite(DRAFT, "cos, sin = self.rotary_emb(combined_states, position_ids + step_idx)")
    rope_module = cite(DRAFT, "self.rotary_emb = LlamaRotaryEmbedding(config)")
    logits_norm = cite(DRAFT, "return self.lm_head(self.model.norm(hidden_states))")
    logits_raw = cite(DRAFT, "return self.lm_head(hidden_states)", nth=1)
    forward_norm_output = cite(DRAFT, 'if getattr(self.config, "norm_output", False):', nth=2)
    step_fc = cite(CORE, "hidden_states = self.draft_model.project_hidden_states(aux_hidden_states)")
    step_forward = cite(CORE, "cur_hidden_states = self.draft_model(")
    step_logits = cite(CORE, "logits = self.draft_model.compute_logits(cur_hidden_states)")
    shift_ids = cite(TARGET, "shifted_input_ids = _shift_left_with_zero(input_ids)")
    capture_default = cite(TARGET, "candidates = [1, num_layers // 2 - 1, num_layers - 4]")
    capture_hook = cite(TARGET, "handles.append(layers[layer_id].register_forward_hook(_make_hook(layer_id)))")
    capture_output = cite(TARGET, "captured[layer_id] = outputs[0] if isinstance(outputs, tuple) else outputs")
    capture_order = cite(TARGET, "aux_hidden_states = torch.cat([captured[layer_id] "
                                 "for layer_id in self.aux_layer_ids], dim=-1)")
    capture_validate = cite(TARGET, "return aux_layer_ids", nth=1)
    serve_resolve = cite(SERVE, "candidate_dirs.insert(0, p / \"model\")")
    serve_requires = cite(SERVE, "if not ((candidate / \"config.json\").exists() and _has_hf_weight_file(candidate)):")
    serve_fallback = cite(SERVE, "return str(p), None")
    serve_arch = cite(SERVE, '"EAGLE3": "LlamaForCausalLMEagle3",')


# name -> recipe_args overrides, seed, notes. Every other recipe key is the recipe's default.
VARIANTS = {
    "eagle3": dict(seed=31, recipe={}, notes=[
        "recipe defaults: no aux_layer_ids in the run config -> NeMo taps its default [1, N//2-1, N-4] = [1, 3, 4] "
        f"({C.capture_default}); config.yaml then holds no aux_layer_ids at all",
        f"no draft_vocab_size in the run config -> the full target vocabulary ({C.vocab_full}): no d2t/t2d, "
        "eagle_meta.pt selected_token_ids = arange(256)",
    ]),
    "aux_ids": dict(seed=32, recipe={"aux_layer_ids": [1, 3, 5]}, notes=[
        "recipe_args.aux_layer_ids: [1, 3, 5] in the run config (layer-output ids: the hook sits on layer j's output), "
        "i.e. HF hidden_states [2, 4, 6]; the NeMo default for this target is [1, 3, 4] = hidden_states [2, 4, 5], "
        "so a reader that falls back to the default misreads the last tap",
        "the ids live only in config.yaml (recipe_args.aux_layer_ids); the drafter's config.json is the target's "
        "config with the recipe's draft keys over it and names no aux layers",
    ]),
    "aux_ids_unsorted": dict(seed=33, recipe={"aux_layer_ids": [6, 0, 3]}, notes=[
        "recipe_args.aux_layer_ids: [6, 0, 3] (NeMo validates only count, distinctness and range: "
        f"{C.capture_validate}) -> fc trained on cat(hidden_states[7], hidden_states[1], hidden_states[4]) in that "
        f"order ({C.capture_order}); SGLang's target captures in layer order, so no engine feeds this as trained",
    ]),
    "draft_vocab": dict(seed=34, recipe={"draft_vocab_size": TINY["draft_vocab_size"]}, notes=[
        f"recipe_args.draft_vocab_size: {TINY['draft_vocab_size']} -> NeMo's frequency selection over the training "
        f"data ({DATA}) picks 128 target ids; the draft saves d2t (offsets) and t2d (bool) buffers ({C.d2t_buffers}, "
        f"{C.d2t_offsets}) and eagle_meta.pt keeps selected_token_ids ({C.meta_ids})",
    ]),
}

COMMON_NOTES = [
    f"written by NeMo's own TrainEagle3Recipe on the CPU (co-located HF target, float32 compute: {C.draft_dtype}), "
    "run for 2 optimizer steps (4 synthetic chat examples, micro_batch_size 2, ttt_steps 2); the final checkpoint "
    f"is the recipe's end-of-run save ({C.final_ckpt}) through save_checkpoint -> checkpointer.save_model "
    f"({C.save_model}), consolidated HF safetensors ({C.consolidated}) under epoch_1_step_2/model/consolidated/",
    "one stand-in: the frozen target is loaded by transformers' AutoModelForCausalLM (HF LlamaForCausalLM, "
    "float32) in place of NeMoAutoModelForCausalLM.from_pretrained, which is CUDA-only (it builds its "
    "infrastructure on torch.device('cuda', torch.cuda.current_device()) and moves the model there: "
    f"{PACKAGE} nemo_automodel/_transformers/auto_model.py:770, nemo_automodel/_transformers/infrastructure.py:825); "
    "the target only supplies supervision, nothing of it is written into the drafter; NeMo's own "
    "HFEagle3TargetModel wraps it and captures the aux states",
    "the drafter's config.json is the TARGET's config with the recipe's draft keys over it "
    f"({C.draft_config_copy}, {C.draft_arch}, {C.draft_vocab_cfg}, {C.draft_fc_norm}, {C.draft_norm_output}, "
    f"{C.draft_parallel}): num_hidden_layers is the target's depth (8), the draft has one layer ({C.single_layer})",
    f"NeMo's aux ids are layer-output ids: a forward hook on decoder layer j's output ({C.capture_hook}, "
    f"{C.capture_output}) = HF hidden_states[j + 1]; checked here against output_hidden_states with NeMo's own "
    "HFEagle3TargetModel.generate_batch on the tiny target",
    f"the trained aux ids live only in the checkpoint's config.yaml (recipe_args.aux_layer_ids, the run config "
    f"dumped by {C.save_config_call} -> {C.save_config_def}), never in config.json; absent from both when the "
    "run used the default",
    f"eagle_meta.pt (beside model/, {C.save_extra}) holds global_step, epoch, selected_token_ids [Vd] and "
    "selected_token_mask [V]",
    f"embed_tokens is the target's embedding copied and frozen ({C.copy_embed}), saved in the checkpoint; "
    "lm_head is the draft's own (draft vocabulary rows)",
    f"layer 0: cat(input_layernorm(embed), hidden_norm(fc(aux))) ({C.layer_norms}, {C.hidden_norm}, "
    f"{C.cat_order}); the residual is fc(aux), un-normed; RoPE: transformers' LlamaRotaryEmbedding on the "
    f"target config ({C.rope_module}), positions + TTT step ({C.rope}); logits = lm_head(norm(h)) "
    f"({C.logits_norm}, norm_output false)",
    f"training feeds the draft input ids shifted left by one against the aux states ({C.shift_ids}): position t "
    "pairs the target state at t with token t+1, the EAGLE-3 / SGLang pairing; the recorded forward takes "
    "input_ids as the module does",
    "dropped from the copied tree: optim/ only (the optimizer state NeMo's checkpointer writes, ~0.9 MB of "
    "torch.distributed.checkpoint shards per variant); everything else is kept as NeMo wrote it, including the "
    "sharded training weights in model/ (model/.hf_metadata/ holds the same config.json) and rng/",
    "NeMo ran in a fixed temp folder (/tmp/nemo-producer-work/<variant>): its paths appear in config.yaml "
    "(recipe_args) and config.json (_name_or_path); they are NeMo's own bookkeeping and point nowhere now",
]


# --------------------------------------------------------------------------------------------
# the tiny target, its tokenizer and the synthetic data
# --------------------------------------------------------------------------------------------

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} "
    "{{ eos_token }} {% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def tiny_target_dir(work: str, seed: int) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = os.path.join(work, "target")
    config = dict(record.tiny_target_config())
    config.update(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**config)).float().eval()
    model.save_pretrained(path)
    words = [f"w{i}" for i in range(TINY["vocab_size"] - len(SPECIALS))]
    vocab = {token: i for i, token in enumerate(SPECIALS + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", additional_special_tokens=SPECIALS[4:])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    assert len(fast) == TINY["vocab_size"], len(fast)
    return path


def synthetic_data(work: str, seed: int, rows: int = 4) -> str:
    gen = torch.Generator().manual_seed(seed)
    path = os.path.join(work, "train.jsonl")
    with open(path, "w") as handle:
        for _ in range(rows):
            def text(n):
                return " ".join(f"w{int(i)}" for i in torch.randint(0, 160, (n,), generator=gen))
            handle.write(json.dumps({"messages": [{"role": "user", "content": text(3)},
                                                  {"role": "assistant", "content": text(6)}]}) + "\n")
    return path


def perturb(model: torch.nn.Module, seed: int) -> None:
    record.perturb(model, seed, keep=lambda name, param: name == "model.embed_tokens.weight")


def cpu_target_loader() -> None:
    """The one stand-in: NeMo's target loader is CUDA-only (NeMoAutoModelForCausalLM.from_pretrained
    builds its infrastructure on ``torch.device("cuda", torch.cuda.current_device())`` and moves the
    model there, nemo_automodel/_transformers/auto_model.py:770 and infrastructure.py:825, whatever
    the recipe's device). The recipe's name for it is pointed at transformers' own
    AutoModelForCausalLM for the frozen target, the HF LlamaForCausalLM NeMo loads with
    ``target_force_hf`` (float32, as the recipe asks on the CPU). The target is only the supervision
    source: nothing of it is written into the drafter checkpoint; the draft, the capture, the
    training step and the checkpointer stay NeMo's."""
    from transformers import AutoModelForCausalLM

    from nemo_automodel.recipes.llm import train_eagle3

    class HFTargetLoader:
        @staticmethod
        def from_pretrained(path, *, torch_dtype=None, force_hf=True, trust_remote_code=False, **kwargs):
            assert force_hf and not kwargs.get("distributed_setup"), kwargs
            return AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **kwargs)

    train_eagle3.NeMoAutoModelForCausalLM = HFTargetLoader


# --------------------------------------------------------------------------------------------
# one variant (run in its own process)
# --------------------------------------------------------------------------------------------

def run_variant(out_root: str, name: str) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from nemo_automodel.components.config.loader import ConfigNode
    from nemo_automodel.components.speculative.eagle.target import HFEagle3TargetModel
    from nemo_automodel.recipes.llm.train_eagle3 import TrainEagle3Recipe

    spec = VARIANTS[name]
    seed = spec["seed"]
    variant_dir = os.path.join(out_root, name)
    # a fixed work folder: NeMo writes it into config.yaml and config.json (_name_or_path, paths of
    # the run config), so a fixed one keeps regenerated files byte-stable
    work = os.path.join(tempfile.gettempdir(), "nemo-producer-work", name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        target_path = tiny_target_dir(work, seed)
        recipe_args = {
            "target_model_name_or_path": target_path,
            "train_data_path": synthetic_data(work, seed),
            "seq_length": 16, "micro_batch_size": 2, "ttt_steps": 2, "num_epochs": 1,
            "output_dir": os.path.join(work, "run"), "log_every_steps": 1, "shuffle_seed": seed,
            "target_force_hf": True,
        }
        recipe_args.update(spec["recipe"])
        cfg = ConfigNode({"recipe_args": recipe_args, "optimizer": {"lr": 1e-4},
                          "dist_env": {"backend": "gloo"}})
        torch.manual_seed(seed)
        cpu_target_loader()
        recipe = TrainEagle3Recipe(cfg)
        recipe.setup()
        perturb(recipe.draft_model, seed)
        recipe.run_train_validation_loop()

        epochs = sorted(glob.glob(os.path.join(recipe.checkpoint_config.checkpoint_dir, "epoch_*_step_*")))
        assert len(epochs) == 1, epochs
        epoch_name = os.path.basename(epochs[0])
        drafter_dir = os.path.join(variant_dir, "drafter")
        shutil.rmtree(variant_dir, ignore_errors=True)
        os.makedirs(variant_dir)
        # the optimizer state (optim/, ~0.9 MB of distcp shards) is the one thing left out
        shutil.copytree(epochs[0], os.path.join(drafter_dir, epoch_name), ignore=shutil.ignore_patterns("optim"))

        # the trained module is what NeMo saved
        draft = recipe.draft_model.float().eval()
        saved = {}
        for f in sorted(glob.glob(os.path.join(epochs[0], "model", "consolidated", "*.safetensors"))):
            saved.update(load_file(f))
        own = draft.state_dict()
        assert set(saved) == set(own), (sorted(saved), sorted(own))
        for key, value in own.items():
            assert torch.equal(saved[key].to(value.dtype), value), key

        # NeMo's capture vs HF output_hidden_states
        aux_ids = list(recipe.target_wrapper.aux_layer_ids)
        taps = [j + 1 for j in aux_ids]
        hf = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.float32).eval()
        wrapper = HFEagle3TargetModel(hf, aux_layer_ids=aux_ids)
        ids = torch.randint(6, TINY["vocab_size"], (1, record.TOKENS), generator=torch.Generator().manual_seed(seed))
        ones = torch.ones_like(ids)
        with torch.no_grad():
            batch = wrapper.generate_batch(input_ids=ids, attention_mask=ones, loss_mask=ones)
            states = hf(input_ids=ids, attention_mask=ones, output_hidden_states=True).hidden_states
        expected = torch.cat([states[i] for i in taps], dim=-1)
        assert torch.allclose(batch.aux_hidden_states, expected, atol=1e-6), "capture != hidden_states[j + 1]"
        assert len(states) == TINY["target_layers"] + 1

        # NeMo's draft module, the trainer's step-0 order (core.py)
        inputs = record.seeded_inputs(seed, 3 * TINY["hidden_size"])
        with torch.no_grad():
            projected = draft.project_hidden_states(inputs["aux"])
            carried = draft(input_ids=inputs["input_ids"], projected_hidden_states=projected,
                            attention_mask=torch.ones_like(inputs["input_ids"]),
                            position_ids=inputs["positions"].unsqueeze(0), cache_hidden=[[], []])
            logits = draft.compute_logits(carried)

        # serve_sglang --print-only on the epoch folder a user gives
        printed = subprocess.run(
            [sys.executable, "-m", "nemo_automodel.components.speculative.serve_sglang", "--target", "target",
             "--draft", os.path.join("drafter", epoch_name), "--print-only"],
            cwd=variant_dir, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        printed = printed.replace(sys.executable, "python")

        config_yaml = open(os.path.join(drafter_dir, epoch_name, "config.yaml")).read()
        in_yaml = "aux_layer_ids" in config_yaml
        meta = torch.load(os.path.join(drafter_dir, epoch_name, "eagle_meta.pt"), weights_only=True)
        draft_vocab = int(meta["selected_token_ids"].numel())
        in_order = taps == sorted(taps)
        record.write_record(
            variant_dir, producer="nemo", package=PACKAGE, variant=name,
            written_by=("nemo_automodel.recipes.llm.train_eagle3.TrainEagle3Recipe: setup() + "
                        "run_train_validation_loop() (2 steps), whose end-of-run save_checkpoint writes "
                        "epoch_1_step_2/ through its checkpointer (save_model: model/consolidated/), "
                        "_save_extra_state (eagle_meta.pt) and save_config (config.yaml)"),
            sources=sorted({value for key, value in vars(C).items() if not key.startswith("_")}),
            drafter=os.path.join("drafter", epoch_name),
            aux_hidden_state_indices=taps,
            tensors={"input_ids": inputs["input_ids"], "positions": inputs["positions"], "aux": inputs["aux"],
                     "logits": logits, "carried": carried},
            forward={
                "module": (f"NeMo LlamaEagle3DraftModel ({C.registry}, {C.draft_build}), the trainer's step-0 "
                           f"order: project_hidden_states ({C.step_fc}), forward ({C.step_forward}), "
                           f"compute_logits ({C.step_logits})"),
                "dtype": "float32 (trained and saved in float32 on the CPU)",
                "carried": ("what LlamaEagle3DraftModel.forward returns, the pre-norm output of the draft layer "
                            f"(norm_output false: {C.forward_norm_output}), fed back as projected_hidden_states "
                            f"on the next TTT step ({C.step_forward}); logits read lm_head(norm(h)) "
                            f"({C.logits_norm})"),
                "aux_ids_trainer_resolves": aux_ids,
                "aux_ids_in_config_yaml": spec["recipe"].get("aux_layer_ids"),
                "aux_order": f"concatenated in the configured id order ({C.capture_order})",
                "aux_ids_meaning": (f"layer-output ids: hook on layer j's output = hidden_states[j + 1] "
                                    f"({C.capture_hook}, {C.capture_output}); checked against HF "
                                    "output_hidden_states on the tiny target"),
                "lm_head_input": "norm(h)",
                "serve_sglang_print_only": printed,
            },
            expect={"dialect": "nemo", "architecture": "LlamaEagle3DraftModel", "num_layers": 1,
                    "hidden_size": TINY["hidden_size"], "draft_vocab_size": draft_vocab,
                    "vocab_size": TINY["vocab_size"], "has_vocab_map": draft_vocab < TINY["vocab_size"],
                    "tie_word_embeddings": False, "embed_tokens_from_target": False,
                    "lm_head_from_target": False, "fc_norm": False, "norm_output": False,
                    "num_aux_hidden_states": 3},
            notes=COMMON_NOTES + spec["notes"] + [
                f"config.yaml {'holds' if in_yaml else 'has no'} aux_layer_ids"
                + (f": recipe_args.aux_layer_ids = {spec['recipe']['aux_layer_ids']}" if in_yaml else ""),
                f"serve_sglang --print-only on the epoch folder prints the epoch folder itself as "
                f"--speculative-draft-model-path, with no --speculative-token-map: it looks for config.json + "
                f"weights in <epoch>/model/ and <epoch>/ only ({C.serve_resolve}, {C.serve_requires}), NeMo's "
                f"consolidated export sits one level deeper, so it falls through ({C.serve_fallback}); that "
                f"folder has no config.json: `{printed}`",
            ] + ([] if in_order else [
                "fed out of layer order: SGLang's target concatenates its captures in layer order, so served "
                "as written fc would see permuted inputs"]),
        )
        print(f"wrote {variant_dir}: aux ids {aux_ids} -> hidden_states {taps}, draft vocab {draft_vocab}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    out_root = os.path.abspath(sys.argv[1])
    if len(sys.argv) > 2:
        run_variant(out_root, sys.argv[2])
        return
    os.makedirs(out_root, exist_ok=True)
    for name in VARIANTS:
        subprocess.run([sys.executable, os.path.abspath(__file__), out_root, name], check=True)


if __name__ == "__main__":
    main()
