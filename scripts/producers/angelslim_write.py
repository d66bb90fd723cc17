"""Write AngelSlim (``angelslim==0.5.0``) EAGLE-3 drafters with AngelSlim's own code.

Run inside the venv ``scripts/producers/angelslim.sh`` builds (torch 2.13 CPU, transformers 5.18,
angelslim 0.5.0 installed ``--no-deps``); not inside this package's venv. Every variant goes the
way ``tools/train_eagle3_online.py`` of the AngelSlim repository goes:
``DraftModelConfig.from_file`` -> ``create_draft_model`` -> ``build_vocab_mapping`` -> an
``Eagle3Trainer`` -> ``Eagle3Trainer.save_model``; only the training steps are replaced by a
seeded perturbation of every parameter.

Importing: ``import angelslim`` fails as published (``angelslim/__init__.py`` imports the
engine, which imports ``angelslim.compressor``, whose ``__init__`` imports
``compressor/qad/qad.py``, which imports the ``compressor/qat`` package the wheel does not ship).
So, before any AngelSlim import, the *package* modules on the way to the EAGLE-3 code
(``angelslim``, ``angelslim.compressor``, ``...speculative``, ``...speculative.train`` and its
``data``, ``models``, ``models.draft`` and ``trainer`` sub-packages) are put into ``sys.modules``
as bare packages whose ``__path__`` is the installed folder, without running their
``__init__.py`` (:func:`_import_angelslim`). Every *module* used below (``llama_eagle3.py``,
``draft_model_factory.py``, ``eagle3_trainer.py``, ``offline_eagle3_trainer.py``,
``data_utils.py``, ``model_utils.py``, ``angelslim.utils`` ...) then runs unmodified from the
installed wheel.

Usage: ``python angelslim_write.py OUT_DIR`` (``tests/producer_files/angelslim``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("producer_record", os.path.join(HERE, "record.py"))
record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record)

PACKAGE = "angelslim==0.5.0"
T = record.TINY

# The package modules whose __init__.py is skipped (see the module docstring), with their folders.
_BARE_PACKAGES = (
    ("angelslim", ""),
    ("angelslim.compressor", "compressor"),
    ("angelslim.compressor.speculative", "compressor/speculative"),
    ("angelslim.compressor.speculative.train", "compressor/speculative/train"),
    ("angelslim.compressor.speculative.train.data", "compressor/speculative/train/data"),
    ("angelslim.compressor.speculative.train.models", "compressor/speculative/train/models"),
    ("angelslim.compressor.speculative.train.models.draft", "compressor/speculative/train/models/draft"),
    ("angelslim.compressor.speculative.train.models.target", "compressor/speculative/train/models/target"),
    ("angelslim.compressor.speculative.train.trainer", "compressor/speculative/train/trainer"),
)


def _import_angelslim():
    found = importlib.util.find_spec("angelslim")
    if found is None or not found.submodule_search_locations:
        raise SystemExit("angelslim is not installed in this interpreter: run scripts/producers/angelslim.sh")
    root = list(found.submodule_search_locations)[0]
    for name, folder in _BARE_PACKAGES:
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(root, folder)]  # submodules import from the wheel as usual
        module.__package__ = name
        sys.modules[name] = module
    import angelslim.compressor.speculative.train.models.draft.draft_model_factory as factory
    import angelslim.compressor.speculative.train.models.draft.llama_eagle3 as llama_eagle3
    import angelslim.compressor.speculative.train.models.target.target_model_wrapper as wrapper
    import angelslim.compressor.speculative.train.trainer.offline_eagle3_trainer as offline
    return root, factory, llama_eagle3, offline, wrapper


ROOT, FACTORY, LLAMA_EAGLE3, OFFLINE, WRAPPER_MOD = _import_angelslim()


def cite(relative: str, needle: str, occurrence: int = 1) -> str:
    """``angelslim==0.5.0 angelslim/<relative>:<line>`` of the installed file (record.cite)."""
    return record.cite(os.path.dirname(ROOT), PACKAGE, "angelslim/" + relative, needle, occurrence)


DRAFT = "compressor/speculative/train/models/draft/llama_eagle3.py"
FACTORY_PY = "compressor/speculative/train/models/draft/draft_model_factory.py"
BASE_PY = "compressor/speculative/train/models/draft/base_model.py"
TRAINER = "compressor/speculative/train/trainer/eagle3_trainer.py"
ONLINE = "compressor/speculative/train/trainer/online_eagle3_trainer.py"
WRAPPER = "compressor/speculative/train/models/target/target_model_wrapper.py"
DATA_UTILS = "compressor/speculative/train/data/data_utils.py"


def sources() -> dict[str, str]:
    return {
        "config": cite(FACTORY_PY, "config = config_class(**config_dict)"),
        "bf16": cite(FACTORY_PY, "model_dtype = dtype_mapping.get(config.torch_dtype, torch.bfloat16)"),
        "one_layer": cite(DRAFT, "self.midlayer = LlamaDecoderLayeremb(config)"),
        "own_embed": cite(DRAFT, "self.embed_tokens = nn.Embedding(config.vocab_size"),
        "own_lm_head": cite(DRAFT, "self.lm_head = nn.Linear(config.hidden_size, config.draft_vocab_size"),
        "fc_3h": cite(DRAFT, "self.fc = nn.Linear(self.hidden_size * 3, self.hidden_size, bias=False)"),
        "vocab_buffers": cite(DRAFT, 'self.register_buffer("d2t", d2t)'),
        "d2t_offsets": cite(DATA_UTILS, "[used_tokens[i] - i for i in range(len(used_tokens))]"),
        "aux_key_read": cite(ONLINE, '"aux_hidden_states_layer_ids", None'),
        "aux_default": cite(WRAPPER, "total_layers // 2 - 1,  # Middle layer"),
        "aux_offset": cite(WRAPPER, "embed_offset = 1"),
        "aux_tap": cite(WRAPPER, "selected_hiddens = [hidden_states[layer_id + embed_offset] for layer_id"),
        "rope_default_branch": cite(DRAFT, 'elif scaling_type == "default":'),
        "rope_no_base": cite(DRAFT, "self.head_dim, max_position_embeddings=self.max_position_embeddings", 1),
        "rope_base_10000": cite(DRAFT, "def __init__(self, dim, max_position_embeddings=2048, base=10000"),
        "layer_norms": cite(DRAFT, "hidden_states = self.hidden_norm(hidden_states)"),
        "carried": cite(TRAINER, "hidden_states, cache_hidden = self.draft_model.encode_layers("),
        "carried_is_prenorm": cite(DRAFT, "hidden_states_out = layer_outputs[0]"),
        "logits": cite(TRAINER, "logits = self.draft_model.compute_logits(hidden_states)"),
        "save": cite(TRAINER, "super().save_model(output_dir, _internal_call)"),
        "save_zero3_drops_embed": cite(TRAINER, 'if "embed" not in k'),
    }


def draft_config(*, aux_ids: list[int] | None, draft_vocab: int, rope_theta: float) -> dict:
    """An AngelSlim draft config as its shipped ones are laid out
    (``angelslim/compressor/speculative/train/configs/qwen3-8b-eagle3.json`` of the repository:
    the target's geometry, ``num_hidden_layers: 1``, ``draft_vocab_size``, ``rope_scaling: null``),
    for the tiny target."""
    config = {
        "architectures": ["Eagle3LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
        "head_dim": T["head_dim"], "hidden_act": "silu", "hidden_size": T["hidden_size"],
        "initializer_range": 0.02, "intermediate_size": T["intermediate_size"],
        "max_position_embeddings": T["max_position_embeddings"],
        "num_attention_heads": T["num_attention_heads"], "num_hidden_layers": 1,
        "num_key_value_heads": T["num_key_value_heads"], "rms_norm_eps": T["rms_norm_eps"],
        "rope_scaling": None, "rope_theta": rope_theta, "tie_word_embeddings": False,
        "use_cache": True, "vocab_size": T["vocab_size"], "draft_vocab_size": draft_vocab,
    }
    if aux_ids is not None:
        config["aux_hidden_states_layer_ids"] = aux_ids
    return config


def perturb(model: torch.nn.Module, seed: int) -> None:
    """Seeded values for every parameter (norms around 1), in the model's own dtype."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                value = 1.0 + 0.2 * torch.randn(param.shape, generator=gen)
            elif param.dim() == 2 and "embed" not in name:
                value = torch.randn(param.shape, generator=gen) / param.shape[1] ** 0.5
            else:
                value = torch.randn(param.shape, generator=gen)
            param.copy_(value.to(param.dtype))


def token_dataset(seed: int) -> list[dict]:
    """What ``build_vocab_mapping`` counts: ``input_ids`` / ``loss_mask`` rows, seeded, with a
    skewed token frequency so that the draft vocabulary is a scattered subset."""
    gen = torch.Generator().manual_seed(seed)
    weights = torch.rand(T["vocab_size"], generator=gen) ** 2
    rows = []
    for _ in range(16):
        ids = torch.multinomial(weights, 64, replacement=True, generator=gen)
        rows.append({"input_ids": ids, "loss_mask": (torch.rand(64, generator=gen) < 0.8).long()})
    return rows


VARIANTS = {
    # (a) one layer (the only depth AngelSlim builds), explicit non-default ids, full vocabulary.
    "aux_ids_135": dict(aux_ids=[1, 3, 5], draft_vocab=T["vocab_size"], rope_theta=T["rope_theta"], seed=11),
    # (c) reduced draft vocabulary (d2t/t2d from build_vocab_mapping); no ids written, as in every
    # config AngelSlim ships: its trainer then taps its default [1, N//2-1, N-4].
    "draft_vocab_128": dict(aux_ids=None, draft_vocab=T["draft_vocab_size"], rope_theta=T["rope_theta"], seed=12),
    # Ids not in ascending order: AngelSlim concatenates them in the order written.
    "aux_ids_unsorted": dict(aux_ids=[5, 1, 3], draft_vocab=T["vocab_size"], rope_theta=T["rope_theta"], seed=13),
    # rope_theta copied from a target with base 1e6 (as AngelSlim's shipped Qwen3 configs do,
    # with rope_scaling null); AngelSlim's draft attention still rotates with base 10000.
    "rope_theta_1e6": dict(aux_ids=[1, 3, 5], draft_vocab=T["draft_vocab_size"], rope_theta=1e6, seed=14),
}


def write_variant(out_dir: str, variant: str, aux_ids, draft_vocab: int, rope_theta: float, seed: int) -> None:
    from safetensors.torch import load_file
    from transformers import TrainingArguments

    variant_dir = os.path.join(out_dir, variant)
    drafter_dir = os.path.join(variant_dir, "drafter")
    if os.path.isdir(variant_dir):
        shutil.rmtree(variant_dir)
    work = tempfile.mkdtemp(prefix="angelslim-")
    cwd = os.getcwd()
    os.chdir(work)  # transformers.Trainer creates args.output_dir (relative) at construction
    try:
        config_path = os.path.join(work, "draft_config.json")
        with open(config_path, "w") as handle:
            json.dump(draft_config(aux_ids=aux_ids, draft_vocab=draft_vocab, rope_theta=rope_theta), handle)
        # tools/train_eagle3_online.py: DraftModelConfig.from_file -> create_draft_model.
        config = FACTORY.DraftModelConfig.from_file(config_path)
        torch.manual_seed(seed)
        model = FACTORY.create_draft_model(config)
        perturb(model, seed)
        model.build_vocab_mapping(dataset=token_dataset(seed), cache_path=os.path.join(work, "vocab", "map.pt"))
        # Eagle3Trainer is abstract; OfflineEagle3Trainer is AngelSlim's own concrete subclass and
        # needs no target model for saving (target_head is only used by its training step).
        # A fixed output_dir: it is pickled into training_args.bin, which save_model writes.
        args = TrainingArguments(output_dir="angelslim-eagle3-tiny", report_to="none", use_cpu=True,
                                 remove_unused_columns=False)
        trainer = OFFLINE.OfflineEagle3Trainer(draft_model=model, target_head=None, length=7, args=args)
        trainer.save_model(drafter_dir)
        saved_dtype = model.lm_head.weight.dtype

        # AngelSlim's module again, built in float32 (fresh RoPE buffers: from_config's .to(bf16)
        # also rounds the cos/sin caches) and loaded with exactly the saved tensors.
        saved = load_file(os.path.join(drafter_dir, "model.safetensors"))
        state = model.state_dict()
        assert set(saved) == set(state), (sorted(saved), sorted(state))
        assert all(torch.equal(saved[k], state[k]) for k in saved), "saved tensors differ from the module"
        reference = LLAMA_EAGLE3.Eagle3LlamaForCausalLM(config).float().eval()
        reference.load_state_dict({k: (v.float() if v.is_floating_point() else v) for k, v in saved.items()},
                                  strict=True)
        trainer.model = reference  # Eagle3Trainer.draft_model is self.model

        num_aux = len(aux_ids) if aux_ids is not None else 3
        inputs = record.seeded_inputs(seed, num_aux * T["hidden_size"])
        with torch.no_grad():
            # Eagle3Trainer.compute_loss / draft_model_training_time_test, step 0.
            hidden = trainer.down_project_hidden_states(inputs["aux"].clone())
            mask, position_ids = trainer.prepare_attention_mask_and_position_ids(
                hidden, None, inputs["positions"][None])
            embeds = trainer.draft_model.embed_input_ids(inputs["input_ids"])
            carried, _cache = trainer.draft_model.encode_layers(
                inputs_embeds=embeds, hidden_states=hidden, cache_hidden=[[], []],
                attention_mask=mask, position_ids=position_ids, use_cache=True)
            logits = trainer.draft_model.compute_logits(carried)
        rotary = reference.midlayer.self_attn.rotary_emb
        used_base = float(rotary.base)
        assert torch.allclose(rotary.inv_freq, 1.0 / used_base ** (
            torch.arange(0, T["head_dim"], 2).float() / T["head_dim"]))

        # The taps AngelSlim's trainer reads for these ids, found by running its own extraction.
        taps_ids = aux_ids if aux_ids is not None else trainer_default_ids(T["target_layers"])
        indices = angelslim_taps(aux_ids)
        assert indices == [i + 1 for i in taps_ids], (indices, taps_ids)
        src = sources()
        written_config = json.load(open(os.path.join(drafter_dir, "config.json")))
        record.write_record(
            variant_dir, producer="angelslim", package=PACKAGE, variant=variant,
            written_by=("angelslim.compressor.speculative.train.trainer.eagle3_trainer.Eagle3Trainer.save_model "
                        "(OfflineEagle3Trainer, no DeepSpeed: transformers Trainer.save_model -> "
                        "Eagle3LlamaForCausalLM.save_pretrained)"),
            sources=sorted(set(src.values())), drafter="drafter",
            aux_hidden_state_indices=indices,
            tensors={"input_ids": inputs["input_ids"], "positions": inputs["positions"],
                     "aux": inputs["aux"], "logits": logits.float(), "carried": carried.float()},
            forward={
                "module": "angelslim Eagle3LlamaForCausalLM via Eagle3Trainer.draft_model_training_time_test "
                          "step 0 (combine_hidden_states, embed_input_ids, encode_layers, compute_logits)",
                "dtype": "float32 (weights as saved in " + str(saved_dtype).replace("torch.", "") + ")",
                "carried": ("the pre-norm output of the draft layer (encode_layers' hidden_states_out), "
                            "fed back as hidden_states on the next training-time-test step: "
                            f"{src['carried']}, {src['carried_is_prenorm']}"),
                "trained_rope": {
                    "rope_type": "default", "rope_theta": used_base, "config_rope_theta": rope_theta,
                    "config_rope_parameters": written_config.get("rope_parameters"),
                    "why": ("LlamaAttention._init_rope builds LlamaRotaryEmbedding(head_dim, "
                            "max_position_embeddings) without base= whether config.rope_scaling is None or "
                            "(transformers 5: rope_parameters) of type 'default'; its default base is 10000: "
                            f"{src['rope_default_branch']}, {src['rope_no_base']}, {src['rope_base_10000']}"),
                },
                "aux_order": "concatenated in the order the ids are written (not sorted): " + src["aux_tap"],
            },
            expect={"dialect": "angelslim", "architecture": "Eagle3LlamaForCausalLM", "num_layers": 1,
                    "hidden_size": T["hidden_size"], "draft_vocab_size": draft_vocab,
                    "vocab_size": T["vocab_size"], "has_vocab_map": True, "tie_word_embeddings": False,
                    "embed_tokens_from_target": False, "lm_head_from_target": False,
                    "torch_dtype": "bfloat16", "rope_theta_trained": used_base,
                    "aux_hidden_state_indices": indices},
            notes=[
                f"aux ids written: {aux_ids} (key aux_hidden_states_layer_ids)" if aux_ids is not None else
                "no aux ids written (as in AngelSlim's shipped draft configs); its trainer taps the default "
                f"[1, N//2-1, N-4] = {taps_ids}: {src['aux_default']}",
                f"AngelSlim taps hidden_states[id + 1] (HF output_hidden_states): {src['aux_offset']}, "
                f"{src['aux_tap']}; ids read by the trainer from the draft config: {src['aux_key_read']}",
                "the drafter keeps its own embed_tokens and lm_head (the plain-Trainer save keeps embed_tokens; "
                f"only the DeepSpeed ZeRO-3 path drops every 'embed' tensor: {src['save_zero3_drops_embed']})",
                "t2d (bool [V]) and d2t (int64 offsets [Vd], target = draft + d2t[draft]) are saved buffers: "
                f"{src['vocab_buffers']}, {src['d2t_offsets']}",
                f"saved in bfloat16: create_draft_model casts to bf16 ({src['bf16']})",
                f"only one draft layer exists (midlayer): {src['one_layer']}",
            ])
    finally:
        os.chdir(cwd)
        shutil.rmtree(work, ignore_errors=True)


def trainer_default_ids(num_layers: int) -> list[int]:
    """AngelSlim's own default (``BaseBackend._get_default_aux_layer_ids``), read from its code."""
    return list(WRAPPER_MOD.BaseBackend._get_default_aux_layer_ids(None, num_layers))


def angelslim_taps(aux_ids: list[int] | None) -> list[int]:
    """The HF ``output_hidden_states`` indices AngelSlim's HF-transformers target backend
    (``TransformersBackend.get_hidden_states_and_logits``) concatenates for ``aux_ids``, in its
    order: its own ``_extract_auxiliary_hidden_states`` is run on a tuple of ``N + 1``
    distinguishable states laid out like HF's (index 0 = embeddings), on a target whose config
    has ``num_hidden_layers = N`` (used for the default ids)."""
    n, h = T["target_layers"], 4
    states = tuple(torch.full((1, 1, h), float(k)) for k in range(n + 1))
    backend = types.SimpleNamespace(
        model=types.SimpleNamespace(config=types.SimpleNamespace(num_hidden_layers=n)),
        _get_default_aux_layer_ids=lambda total: trainer_default_ids(total))
    out = WRAPPER_MOD.BaseBackend._extract_auxiliary_hidden_states(backend, states, aux_ids)
    return [int(chunk[0, 0, 0].item()) for chunk in out.split(h, dim=-1)]


def main() -> None:
    out_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                              os.path.join(HERE, "..", "..", "tests", "producer_files", "angelslim"))
    for variant, settings in VARIANTS.items():
        write_variant(out_dir, variant, **settings)
        print("wrote", os.path.join(out_dir, variant))


if __name__ == "__main__":
    main()
