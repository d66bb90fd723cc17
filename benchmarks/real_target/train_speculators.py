"""Train a multi-layer EAGLE-3 drafter for a real target with speculators 0.9.0's own trainer.

speculators trains offline: ``speculators prepare-data`` tokenises the conversations into a dataset
on disk (input_ids, loss_mask, seq_len) plus ``token_freq.pt``; vLLM then writes one
``hidden_states/hs_<row>.safetensors`` per row; ``speculators train`` reads both. vLLM is not on the
GPU machine, so this script stands in for vLLM only, and for nothing else:

1. prepare: speculators' own preprocessing (``load_raw_dataset``, ``build_speculator_training_dataset``,
   whose per-assistant-turn render-boundary loss masks are kept) with one substitution: the render
   that speculators asks a vLLM ``/v1/chat/completions/render`` endpoint for is done in process by
   the target tokenizer's chat template (what that endpoint does for an HF tokenizer: the template
   rendered to text, tokenised without special tokens, cut on the right at --max-length). Then
   ``save_token_frequency_distribution`` and ``save_to_disk``, as ``prepare-data`` does.
2. hidden states: the HF target runs on --device and the script writes the files speculators'
   ``ArrowDataset`` reads through hs_connectors' ``FileTransfer``: ``hidden_states`` [T, A+1, H] in
   bfloat16 (the trainer's default --hidden-states-dtype) and ``token_ids`` [T]. Precomputed rather
   than in process because speculators' dataloader reads exactly these files (in spawned workers
   that must not hold the target) and every epoch reuses them; for ~1M tokens they take ~4.6 GB of
   disk and seconds of GPU time. The taps are speculators' ids: ``resolve_target_layer_ids`` with the
   trainer default [2, N//2, N-3] ([2, 15, 27] for SmolLM2's 30 layers), where id k is the input of
   decoder layer k (= HF ``output_hidden_states[k]``), plus id N, the last layer's output before
   the final norm (the trainer applies the verifier's norm itself). The record cites the lines.
3. train: ``speculators train`` itself: ``TrainConfig.resolve(argv)`` then ``speculators.train.cli.main``
   (vocab mapping from token_freq.pt, ``build_draft_model``, its dataloaders, ``Trainer`` with its
   KL loss over 3 training-time-test steps, Muon+AdamW, linear schedule, bf16 autocast, per-epoch
   ``SingleGPUCheckpointer`` saves and validation). Every flag not set below is the trainer default.
4. export: the last epoch's checkpoint (config.json in speculators format, model.safetensors, the
   auto_map config.py) copied into --out, with ``train_record.json`` beside it.

On a CPU (--device cpu, for tests) speculators itself skips torch.compile (it compiles the forward
only when CUDA is available) and its CUDA autocast is off (fp32 math). The script then passes two
of the trainer's own flags: ``--loss-implementation eager`` (the fused loss is a Triton GPU kernel)
and ``--draft-attn-impl sdpa`` (torch's flex attention has no CPU backward; same mask, made dense).
And it points two names at the CPU: the Trainer moves the model to ``get_local_rank()`` (0, an
accelerator) and its step timer calls ``torch.accelerator.synchronize()`` (a no-op here).

usage: train_speculators.py --target DIR --data JSONL --out DIR [--num-layers 2] [--max-length 1024]
       [--epochs 2] [--max-steps N] [--batch-size 8192] [--lr X] [--draft-vocab-size 16384]
       [--device cuda] [--num-workers 4] [--seed 0] [--work DIR]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import inspect
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time

PACKAGE = "speculators==0.9.0"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HS_BATCH_TOKENS = 32768  # padded tokens per target forward while writing hidden states


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="HF model directory of the target")
    parser.add_argument("--data", required=True, help="JSON lines {id, conversations: [{role, content}, ...]}")
    parser.add_argument("--out", required=True, help="drafter directory to write")
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=1024, help="tokens kept per row (prepare-data --seq-length)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=8192,
                        help="tokens per step: speculators packs rows into one sequence of this length "
                             "(--total-seq-len; a multiple of flex attention's 128-token block)")
    parser.add_argument("--lr", type=float, default=None, help="default: the trainer's (1e-3)")
    parser.add_argument("--draft-vocab-size", type=int, default=16384)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--num-workers", type=int, default=4, help="dataloader workers (trainer default 12)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default=None, help="data directory (default: a temporary one, removed after)")
    args = parser.parse_args()
    if args.batch_size < args.max_length:
        parser.error("--batch-size (tokens per packed step) must hold one --max-length row")
    if args.batch_size % 128:  # flex attention's block: the TTT steps append whole blocks of keys
        parser.error("--batch-size must be a multiple of 128")
    return args


# ---------------------------------------------------------------- citations (installed source)

def _site_relative(path: str) -> str:
    """``path`` relative to the sys.path entry it was imported from (site-packages, /tmp/extra, ...)."""
    path = os.path.abspath(path)
    for entry in sorted((os.path.abspath(e) for e in sys.path if e), key=len, reverse=True):
        if path.startswith(entry + os.sep):
            return os.path.relpath(path, entry)
    return path


def cite_obj(obj) -> str:
    """``file:line`` of a function/class definition, looked up in the installed source."""
    obj = inspect.unwrap(obj)
    obj = getattr(obj, "__func__", obj)
    return f"{_site_relative(inspect.getsourcefile(obj))}:{inspect.getsourcelines(obj)[1]}"


def cite_text(module, snippet: str) -> str:
    """``file:line`` of the first line holding ``snippet`` in a module's installed source (fails if moved)."""
    path = inspect.getsourcefile(module)
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if snippet in line:
                return f"{_site_relative(path)}:{number}"
    raise LookupError(f"{snippet!r} not in {path}")


# ---------------------------------------------------------------- 1. prepare (speculators' preprocessing)

def prepare(args, work: str):
    from speculators.data_generation import preprocessing
    from speculators.train.vocab_mapping import save_token_frequency_distribution

    processor = preprocessing.load_processor(args.target)
    tokenizer = preprocessing.get_tokenizer(processor)

    def render_in_process(conv_prefix, render_endpoint, *, add_generation_prompt, max_length, tools=None):
        # stands in for the vLLM /render call (same arguments, same result for an HF tokenizer)
        text = tokenizer.apply_chat_template(conv_prefix, tools=tools, tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
        return tokenizer(text, add_special_tokens=False)["input_ids"][:max_length]

    preprocessing._encode_render = render_in_process
    raw, _ = preprocessing.load_raw_dataset(args.data)
    raw = raw.shuffle(seed=args.seed)  # as load_and_preprocess_dataset does
    dataset = preprocessing.build_speculator_training_dataset(
        raw, processor, max_length=args.max_length, num_proc=1, render_endpoint="in-process chat template")
    if len(dataset) == 0:
        raise SystemExit("no rows with supervised tokens after preprocessing")
    save_token_frequency_distribution(dataset, os.path.join(work, "token_freq.pt"))
    dataset.save_to_disk(work)
    return dataset, len(raw)


# ---------------------------------------------------------------- 2. hidden states (vLLM's part)

def write_hidden_states(args, dataset, layer_ids: list[int], out_dir: str) -> dict:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype).to(device).eval()
    body = model.model
    num_layers = len(body.layers)
    taps: dict[int, torch.Tensor] = {}

    def tap(index):
        def hook(module, hook_args, hook_kwargs):
            taps[index] = hook_args[0] if hook_args else hook_kwargs["hidden_states"]
        return hook

    # id k < N: the input of decoder layer k; id N: the input of the final norm (pre-norm output)
    hooks = [body.layers[k].register_forward_pre_hook(tap(k), with_kwargs=True) for k in layer_ids]
    hooks.append(body.norm.register_forward_pre_hook(tap(num_layers), with_kwargs=True))
    order = layer_ids + [num_layers]

    os.makedirs(out_dir, exist_ok=True)
    lengths = [int(n) for n in dataset["seq_len"]]
    rows = sorted(range(len(dataset)), key=lambda i: lengths[i])
    checked = False
    with torch.no_grad():
        start = 0
        while start < len(rows):
            # right-padded batches of similar length: causal attention keeps pads out of real tokens
            longest, end = lengths[rows[start]], start
            while end < len(rows) and (end - start + 1) * max(longest, lengths[rows[end]]) <= HS_BATCH_TOKENS:
                longest = max(longest, lengths[rows[end]])
                end += 1
            end = max(end, start + 1)
            batch = rows[start:end]
            ids = torch.zeros(len(batch), longest, dtype=torch.long)
            mask = torch.zeros(len(batch), longest, dtype=torch.long)
            for b, i in enumerate(batch):
                ids[b, :lengths[i]] = dataset[i]["input_ids"]
                mask[b, :lengths[i]] = 1
            out = body(input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=not checked)
            if not checked:  # the convention, checked once against HF's own hidden_states
                for k in layer_ids:
                    assert torch.equal(taps[k], out.hidden_states[k]), f"tap {k} is not hidden_states[{k}]"
                assert torch.allclose(body.norm(taps[num_layers]), out.last_hidden_state), "id N is not pre-norm"
                checked = True
            stacked = torch.stack([taps[k] for k in order], dim=2).to(torch.bfloat16).cpu()  # [B, T, A+1, H]
            for b, i in enumerate(batch):
                save_file({"hidden_states": stacked[b, :lengths[i]].contiguous(),
                           "token_ids": ids[b, :lengths[i]].clone()},
                          os.path.join(out_dir, f"hs_{i}.safetensors"))
            start = end
    for hook in hooks:
        hook.remove()
    taps.clear()
    del model, body
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"layer_ids_written": order, "target_layers": num_layers, "target_dtype": str(dtype),
            "file_dtype": "bfloat16", "files": len(rows)}


# ---------------------------------------------------------------- 3. train (speculators train)

class MetricRecorder(logging.Handler):
    """Keeps the metric dicts the Trainer logs to ``speculators.metrics``."""

    def __init__(self):
        super().__init__()
        self.train: list[dict] = []
        self.val: list[dict] = []

    def emit(self, record):
        message = record.msg
        if isinstance(message, dict) and "train" in message:
            self.train.append({**message["train"], "global_step": message["global_step"],
                               "epoch": message["epoch"], "lr": message["lr"]})
        elif isinstance(message, dict) and "val" in message:
            self.val.append({**message["val"], "epoch": message["epoch"]})


def epochs_for(args, dataset) -> int:
    """Epochs to run: --epochs, or fewer when --max-steps ends training earlier. The Trainer checks
    max_steps only after a step, so an epoch started past it would still train one more step."""
    if args.max_steps is None:
        return args.epochs
    from speculators.train.distributed_batch_sampler import MultipackDistributedBatchSamplerV2

    train_rows = int(len(dataset) * 0.9)  # ArrowDataset's split at the trainer's --train-data-ratio 0.9
    sampler = MultipackDistributedBatchSamplerV2(
        batch_max_length=args.batch_size, lengths=[int(n) for n in dataset["seq_len"][:train_rows]],
        num_replicas=1, rank=0, seed=args.seed)
    return max(1, min(args.epochs, math.ceil(args.max_steps / len(sampler))))


def train(args, work: str, save_path: str, epochs: int) -> tuple[list[str], MetricRecorder]:
    import torch
    from speculators.train import cli, trainer
    from speculators.train.config import TrainConfig

    argv = ["--speculator-type", "eagle3", "--verifier-name-or-path", args.target, "--data-path", work,
            "--save-path", save_path, "--log-dir", os.path.join(work, "logs"),
            "--num-layers", str(args.num_layers), "--draft-vocab-size", str(args.draft_vocab_size),
            "--total-seq-len", str(args.batch_size), "--epochs", str(epochs), "--seed", str(args.seed),
            "--num-workers", str(args.num_workers),
            "--on-missing", "raise"]  # every row has its file; never ask a vLLM endpoint
    if args.max_steps is not None:
        argv += ["--max-steps", str(args.max_steps)]
    if args.lr is not None:
        argv += ["--lr", str(args.lr)]
    if args.device == "cpu":
        argv += ["--loss-implementation", "eager",  # the fused loss is a Triton GPU kernel
                 "--draft-attn-impl", "sdpa"]  # "FlexAttention does not support backward on CPU" (torch)
        trainer.get_local_rank = lambda: torch.device("cpu")  # Trainer does model.to(get_local_rank())
        torch.accelerator.synchronize = lambda *a, **k: None  # its step timer syncs an accelerator
    cfg = TrainConfig.resolve(argv)

    recorder = MetricRecorder()
    setup = cli.setup_metric_logger

    def setup_and_record(*a, **k):  # speculators' dictConfig resets the logger's handlers: add ours after
        setup(*a, **k)
        logging.getLogger("speculators.metrics").addHandler(recorder)

    cli.setup_metric_logger = setup_and_record
    cli.main(cfg)
    return argv, recorder


# ---------------------------------------------------------------- 4. export and record

def export(save_path: str, out: str) -> str:
    epochs = [int(d) for d in os.listdir(save_path) if d.isdigit() and not os.path.islink(os.path.join(save_path, d))]
    last = os.path.join(save_path, str(max(epochs)))
    kept_behind = ("training_state.json", "train_command.txt", "val_metrics.json")
    for name in os.listdir(last):  # what save_pretrained wrote; optimizer/scheduler state stays behind
        if not name.endswith("_state_dict.pt") and name not in kept_behind:
            shutil.copy2(os.path.join(last, name), os.path.join(out, name))
    return last


def citations() -> dict:
    import speculators.models.eagle3.core as core
    import speculators.models.utils as mutils
    import speculators.train.cli as cli
    import speculators.train.config.schema as schema
    import speculators.train.data as data
    import speculators.train.trainer as trainer_mod
    import transformers.utils.output_capturing as capturing
    from hs_connectors import FileTransfer
    from speculators.convert.dflash import converter as dflash
    from speculators.data_generation import preprocessing
    from speculators.losses import utils as losses
    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.models.eagle3.data import shift_batch
    from speculators.models.eagle3.metrics import compute_metrics
    from speculators.train.checkpointer import SingleGPUCheckpointer
    from speculators.train.config import TrainConfig
    from speculators.train.dataloader import create_train_val_loaders
    from speculators.train.optimizers import build_optimizers
    from speculators.train.vocab_mapping import save_token_frequency_distribution

    prep = preprocessing
    return {
        "used": {
            "preprocessing.load_processor": cite_obj(prep.load_processor),
            "preprocessing.load_raw_dataset": cite_obj(prep.load_raw_dataset),
            "preprocessing.build_speculator_training_dataset": cite_obj(prep.build_speculator_training_dataset),
            "preprocessing._render_boundary_rows (loss mask per assistant turn)": cite_obj(prep._render_boundary_rows),
            "preprocessing._encode_render (replaced: the vLLM render call)": cite_text(prep, "def _encode_render("),
            "vocab_mapping.save_token_frequency_distribution": cite_obj(save_token_frequency_distribution),
            "models.utils.resolve_target_layer_ids": cite_obj(mutils.resolve_target_layer_ids),
            "TrainConfig.resolve (the speculators train argv)": cite_obj(TrainConfig.resolve),
            "train.cli.main (speculators train)": cite_obj(cli.main),
            "train.cli.parse_vocab_mappings": cite_obj(cli.parse_vocab_mappings),
            "train.cli.build_draft_model": cite_obj(cli.build_draft_model),
            "Eagle3DraftModel.from_training_args": cite_obj(Eagle3DraftModel.from_training_args),
            "Eagle3DraftModel.forward (TTT loop)": cite_text(core, "    def forward("),
            "eagle3.metrics.compute_metrics (loss per TTT step)": cite_obj(compute_metrics),
            "losses.utils.resolve_loss_config": cite_obj(losses.resolve_loss_config),
            "train.dataloader.create_train_val_loaders": cite_obj(create_train_val_loaders),
            "train.data.ArrowDataset": cite_obj(data.ArrowDataset),
            "hs_connectors.FileTransfer (reads hs_<i>.safetensors)": cite_obj(FileTransfer),
            "eagle3.data.shift_batch": cite_obj(shift_batch),
            "train.trainer.Trainer": cite_obj(trainer_mod.Trainer),
            "train.trainer.Trainer.train_epoch": cite_obj(trainer_mod.Trainer.train_epoch),
            "train.optimizers.build_optimizers": cite_obj(build_optimizers),
            "train.checkpointer.SingleGPUCheckpointer.save_checkpoint": cite_obj(SingleGPUCheckpointer.save_checkpoint),
        },
        "hidden_state_convention": {
            "default ids [2, N//2, N-3]": cite_text(mutils, "target_layer_ids = [2, num_layers // 2, num_layers - 3]"),
            "id N = the final hidden state": cite_text(mutils, "# Layer id ``num_layers`` (the final hidden state)"),
            "ids are HF hidden_states indices (index 0 = embedding output: id k = input of layer k)":
                cite_text(dflash, "# z-lab reads hidden_states[layer_id + 1] (index 0 is the embedding"),
            "aux ids exclude the final layer the datagen appends": cite_text(schema, "launch_vllm.py appends."),
            "file layout: [:, :-1] aux, [:, -1] verifier last":
                cite_text(data, '"hidden_states": loaded_hs["hidden_states"][:, :-1].flatten('),
            "the trainer applies the verifier norm to the last state (so it is pre-norm)":
                cite_text(core, "self.verifier_norm(verifier_last_hidden_states)"),
            "HF's own hidden_states[-1] is post-norm (so not used for id N)":
                cite_text(capturing, "Whether to overwrite `out.hidden_states[-1]`"),
        },
        "cpu_only": {
            "torch.compile only with CUDA": cite_obj(mutils.conditional_torch_compile),
            "Trainer device = get_local_rank()": cite_text(trainer_mod, "self.model.to(self.local_rank)"),
            "fused losses need Triton": cite_text(losses, "Fused losses require Triton"),
            "step timer syncs the accelerator": cite_text(trainer_mod, "torch.accelerator.synchronize()"),
        },
    }


def versions() -> dict:
    found = {}
    for name in ("speculators", "hs-connectors", "torch", "transformers", "datasets", "tokenizers", "triton"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


WORK_FILES = ("token_freq.pt", "dataset_info.json", "state.json", "hidden_states", "logs")


def clear_work(work: str) -> None:
    """Remove what an earlier run left in the data directory: speculators would reuse its
    token_freq.pt and cached d2t/t2d, and stale hidden-state files, without checking them."""
    os.makedirs(work, exist_ok=True)
    for name in os.listdir(work):
        path = os.path.join(work, name)
        if name in WORK_FILES or name.startswith(("data-", "d2t-", "t2d-")):
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def main() -> int:
    args = parse_args()
    args.target = os.path.abspath(args.target)  # recorded as the verifier's name_or_path
    os.makedirs(args.out, exist_ok=True)
    save_path = os.path.join(args.out, "checkpoints")
    shutil.rmtree(save_path, ignore_errors=True)  # the Trainer would resume from an old run's epochs
    work = args.work or tempfile.mkdtemp(prefix="speculators-data-")
    clear_work(work)
    try:
        return run(args, work, save_path)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def run(args, work: str, save_path: str) -> int:
    import torch
    from speculators.models.utils import resolve_target_layer_ids

    torch.manual_seed(args.seed)  # speculators train seeds python/numpy/torch again with --seed
    started = time.perf_counter()
    dataset, conversations = prepare(args, work)
    prepared = time.perf_counter()
    layer_ids = resolve_target_layer_ids(None, args.target)  # the trainer's default for this target
    hidden = write_hidden_states(args, dataset, layer_ids, os.path.join(work, "hidden_states"))
    written = time.perf_counter()
    epochs = epochs_for(args, dataset)
    argv, recorder = train(args, work, save_path, epochs)
    trained = time.perf_counter()
    checkpoint = export(save_path, args.out)

    lengths = [int(n) for n in dataset["seq_len"]]
    supervised = sum(int(row["loss_mask"].sum()) for row in dataset)
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else f"cpu ({os.cpu_count()} cores)"
    record = {
        "written_by": f"{PACKAGE}'s speculators train (train.cli.main) on hidden states this script wrote",
        # the script relative to the checkout: a record names no path of the machine that ran it
        "command": ["python3", os.path.relpath(os.path.abspath(sys.argv[0]), REPO), *sys.argv[1:]],
        "speculators_train_argv": argv,
        "data": {"file": os.path.abspath(args.data), "conversations": conversations, "rows": len(dataset),
                 "rows_note": "one row per assistant turn (speculators' render-boundary fan-out)",
                 "tokens": sum(lengths), "supervised_tokens": supervised, "max_length": args.max_length,
                 "train_rows": int(len(dataset) * 0.9), "val_rows": len(dataset) - int(len(dataset) * 0.9)},
        "hidden_states": {**hidden, "aux_layer_ids": layer_ids,
                          "meaning": "id k < N: input of target decoder layer k (HF hidden_states[k]); "
                                     "id N: output of the last layer before the final norm"},
        "training": {"steps": len(recorder.train), "epochs": epochs, "max_steps": args.max_steps,
                     "tokens_per_step": args.batch_size, "num_layers": args.num_layers,
                     "draft_vocab_size": args.draft_vocab_size, "seed": args.seed,
                     "checkpoint_exported": os.path.relpath(checkpoint, args.out)},
        "final": {"train": recorder.train[-1] if recorder.train else None,
                  "val": recorder.val[-1] if recorder.val else None,
                  "val_per_epoch": recorder.val},
        "wall_s": {"prepare": round(prepared - started, 2), "hidden_states": round(written - prepared, 2),
                   "train": round(trained - written, 2), "total": round(trained - started, 2)},
        "versions": versions(), "python": sys.version.split()[0], "device": device,
        "speculators_sources": citations(),
        "deviations": [
            "the conversation render is the target tokenizer's chat template in process, not a vLLM /render call",
            "hidden states come from the HF target (this script), not from vLLM's hidden-states connector",
        ] + ([
            "cpu: forward not torch.compile'd (speculators compiles only with CUDA), autocast off (fp32), "
            "--loss-implementation eager (fused loss needs Triton), --draft-attn-impl sdpa (flex attention "
            "has no CPU backward), Trainer device pointed at the CPU and "
            "torch.accelerator.synchronize a no-op (its step timer)",
        ] if args.device == "cpu" else []),
    }
    with open(os.path.join(args.out, "train_record.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, default=str)
    final = record["final"]["train"] or {}
    print(f"wrote {args.out}: {len(recorder.train)} steps, {epochs} epoch(s), loss {final.get('loss')}, "
          f"full_acc_0 {final.get('full_acc_0')}, {record['wall_s']['total']} s")
    return 0


if __name__ == "__main__":  # spawned dataloader workers import this file: nothing runs at import
    sys.exit(main())
