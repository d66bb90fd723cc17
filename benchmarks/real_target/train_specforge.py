"""A 1-layer EAGLE-3 drafter for a HF Llama target, trained by SpecForge 0.2.0's own trainer and exported by it.

SpecForge 0.2.0 trains online only against an external SGLang capture server (its config's
``model.target_backend`` admits only "sglang"; its in-process HF backend is gone) and pins SGLang
0.5.14, while the GPU kit has 0.5.23. Its other entry point, ``specforge train`` on *offline*
features (``data.hidden_states_path``, one process, ``deployment.mode=local_colocated``), runs the
same trainer: the EAGLE-3 draft model, ``OnlineEagle3Model``'s training-time-test loop and its
Triton loss, ``Eagle3TrainStrategy``, ``BF16Optimizer`` with its cosine schedule, the checkpoint
manager. So the steps are:

1. tokenise (SpecForge): ``build_eagle3_dataset`` with a ChatML template registered in its
   ``TEMPLATE_REGISTRY`` (no system prompt of its own, so the target's chat template adds its
   default one, as serving does); loss on assistant tokens only;
2. draft vocabulary (SpecForge): ``generate_vocab_mapping_file`` over those tokens;
3. features (ours, the one step SpecForge 0.2.0 has no non-SGLang code for): the HF target runs here
   once and each conversation is saved in SpecForge's offline layout, with the capture layers and
   feature names its ``resolve_offline_capture`` gives: aux = HF ``hidden_states[i + 1]`` for each
   SpecForge/SGLang layer id ``i`` (SGLang taps the input of layer ``i + 1``), concatenated in layer
   order; the target state = the final normed state ``lm_head`` reads;
4. train (SpecForge): ``python -m specforge.cli train --config run.json``;
5. export (SpecForge): ``python -m specforge.cli export --to sglang``.

Output ``--out``: the exported drafter (config.json, model.safetensors), ``train_record.json``, and
``checkpoints/`` (SpecForge's run directory: run config, draft config, vocabulary map, log, its
checkpoint). ``config.json`` is moved in last: its presence means the run finished.

usage (repository root)::

    python3 benchmarks/real_target/train_specforge.py --target DIR --data data.jsonl --out DIR \\
        [--epochs 2] [--max-steps N] [--batch-size 16] [--lr 3e-4] [--max-length 1024] \\
        [--draft-vocab-size 16384] [--device cuda]

Defaults are sized for about 3,000 conversations (1M tokens) on one H100: two epochs of batches of
16 (about 375 optimizer steps), SpecForge's bf16 training, its flex attention and TTT length 7.

On a CPU (a check, not a recipe): SpecForge's Triton loss runs in Triton's interpreter
(``TRITON_INTERPRET=1``, set here) and the attention backend is SpecForge's ``sdpa``, since torch's
flex attention has no backward on a CPU.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time

# The GPU machine has no network: every model, tokenizer and data set here is local.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

PACKAGE = "specforge==0.2.0"
RUN_ID = "eagle3"
TEMPLATE = "chatml-target-system"  # registered below; the name says its system prompt is the target's


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="HF Llama model directory")
    parser.add_argument("--data", required=True, help="JSON lines {id, conversations: [{role, content}, ...]}")
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=None, help="stop after this many optimizer steps")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--draft-vocab-size", type=int, default=16384)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--attention-backend", default=None, choices=("flex_attention", "sdpa"),
                        help="SpecForge's training.attention_backend (default: its own, flex_attention; "
                             "sdpa on a CPU, where torch's flex attention has no backward)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--capture-tokens", type=int, default=32768, help="padded tokens per target forward")
    parser.add_argument("--work", default=None, help="where the features go (default: a temporary folder)")
    parser.add_argument("--keep-features", action="store_true")
    args = parser.parse_args()
    if args.attention_backend is None:
        args.attention_backend = "flex_attention" if args.device == "cuda" else "sdpa"
    return args


def seed_everything(seed: int) -> None:
    import numpy
    import torch

    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def specforge_root() -> str:
    import specforge

    return os.path.dirname(os.path.dirname(os.path.abspath(specforge.__file__)))


def cite(path: str, snippet: str) -> str:
    """``specforge==0.2.0 specforge/<path>:<line>`` of the first line of the installed file holding
    ``snippet``; raises when absent, so a citation is looked up, never typed."""
    path = f"specforge/{path}"
    with open(os.path.join(specforge_root(), path), encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if snippet in line:
                return f"{PACKAGE} {path}:{number}"
    raise LookupError(f"{path}: {snippet!r} not found in the installed SpecForge")


# What of SpecForge this recipe runs: (what, installed file, a line of it), cited at run time.
USED = [
    ("chat template registry (ours registered through it)", "data/template.py", "def register(self, name: str"),
    ("tokenise + assistant-only loss mask: build_eagle3_dataset", "data/preprocessing.py",
     "def build_eagle3_dataset("),
    ("its parser renders with the tokenizer's chat template", "data/parse.py",
     "conversation = self.apply_chat_template(messages"),
    ("draft vocabulary: generate_vocab_mapping_file", "data/preprocessing.py", "def generate_vocab_mapping_file("),
    ("offline capture plan: resolve_offline_capture", "application/composition.py", "def resolve_offline_capture("),
    ("default aux layer ids [1, N//2-1, N-4]", "algorithms/model_providers.py",
     "layers = [1, num_layers // 2 - 1, num_layers - 4]"),
    ("feature names: OfflineCaptureLayout.materialize", "algorithms/common/providers.py",
     "def materialize(self, sources"),
    ("offline sample: aux -> hidden_state, final state -> target", "algorithms/eagle3/data.py",
     "def normalize_offline_sample("),
    ("1-layer draft config generated from the target", "training/model_loading.py", "def _generate_draft_config("),
    ("CLI: specforge train / export", "cli.py", "def main(argv"),
    ("offline one-process assembly", "training/assembly.py", "trainer = build_offline_runtime("),
    ("draft model (bf16, frozen target embedding)", "algorithms/model_providers.py", "def build_eagle3_draft("),
    ("training model: OnlineEagle3Model + frozen TargetHead", "algorithms/model_providers.py",
     "def build_eagle3_model("),
    ("training-time-test loop: OnlineEagle3Model.forward", "algorithms/eagle3/model.py",
     "for idx in range(self.length):"),
    ("loss: LogSoftmaxLoss (Triton)", "core/loss.py", "class LogSoftmaxLoss(torch.autograd.Function):"),
    ("step loss: TTT losses weighted 0.8**i (Eagle3TrainStrategy)", "training/strategies/base.py",
     "weights = [self.ploss_decay**i for i in range(len(plosses))]"),
    ("teacher logits: TargetHead over the stored final state", "training/strategies/base.py",
     "target = target_head(target.to(device))"),
    ("optimizer: BF16Optimizer (AdamW on fp32 masters, clipping, warmup + cosine)", "training/assembly.py",
     "return BF16Optimizer("),
    ("training loop: TrainerController.fit", "training/controller.py", "def _fit(self, data"),
    ("logged acc_i / ploss_i / loss", "training/controller.py", 'result[f"acc_{index}"] = float(value)'),
    ("step log line", "training/assembly.py", 'print(f"step {step}: {printable}", flush=True)'),
    ("checkpoint: TrainerController.save_checkpoint", "training/controller.py", "def save_checkpoint(self, step: int)"),
    ("export: export_to_sglang", "export/to_sglang.py", "def export_to_sglang("),
]


def register_template() -> None:
    """ChatML as SmolLM2's template writes it. No system prompt of its own: SpecForge then adds none
    and the target tokenizer's chat template inserts its default (as serving does). The turn end
    ``<|im_end|>\\n`` is inside the loss, as in SpecForge's own ChatML ("qwen") template."""
    from specforge.data.template import TEMPLATE_REGISTRY, ChatTemplate

    TEMPLATE_REGISTRY.register(TEMPLATE, ChatTemplate(
        assistant_header="<|im_start|>assistant\n", user_header="<|im_start|>user\n",
        system_prompt=None, end_of_turn_token="<|im_end|>\n"), override=True)


def check_template(tokenizer) -> None:
    """The loss mask is found by the assistant header in the rendered text: refuse a target whose
    chat template does not write ChatML rather than train on an empty mask."""
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    rendered = tokenizer.apply_chat_template(chat, tokenize=False)
    if "<|im_start|>assistant\nyo<|im_end|>\n" not in rendered:
        raise SystemExit(f"the target's chat template is not ChatML; it renders {rendered!r}")


def read_conversations(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    # only the conversation reaches SpecForge: its preprocessor passes any other column to the
    # chat template as a keyword
    return [{"conversations": row["conversations"]} for row in rows if row.get("conversations")]


def specforge_target(target: str, run_dir: str) -> tuple[str, str]:
    """The target as SpecForge's frozen ``TargetHead`` can read it, and its lm_head key.

    ``TargetHead.load_weights`` finds the lm_head only through a ``*.index.json``; a single-file
    target (as ``prepare-target`` writes) gets a folder of links to its files plus that index. A
    target with tied embeddings has no ``lm_head.weight``: its lm_head is the embedding."""
    import glob

    from safetensors import safe_open

    target = os.path.abspath(target)
    config = json.load(open(os.path.join(target, "config.json"), encoding="utf-8"))
    if glob.glob(os.path.join(target, "*.index.json")):
        view, weight_map = target, json.load(open(glob.glob(os.path.join(target, "*.index.json"))[0]))["weight_map"]
    else:
        view = os.path.join(run_dir, "target")
        os.makedirs(view, exist_ok=True)
        for name in os.listdir(target):
            link = os.path.join(view, name)
            if not os.path.lexists(link):
                os.symlink(os.path.join(target, name), link)
        with safe_open(os.path.join(target, "model.safetensors"), framework="pt") as handle:
            weight_map = {key: "model.safetensors" for key in handle.keys()}
        json.dump({"metadata": {}, "weight_map": weight_map},
                  open(os.path.join(view, "model.safetensors.index.json"), "w"), indent=1)
    if "lm_head.weight" in weight_map:
        return view, "lm_head.weight"
    if config.get("tie_word_embeddings"):
        return view, "model.embed_tokens.weight"
    raise SystemExit(f"{target}: no lm_head.weight and tie_word_embeddings is not set")


def tokenise(rows: list[dict], tokenizer, max_length: int, seed: int, loss_mask_filter):
    from datasets import Dataset
    from specforge.data.preprocessing import build_eagle3_dataset

    # minimum_valid_tokens=1: SpecForge's EAGLE-3 provider's own minimum (one_loss_token)
    return build_eagle3_dataset(Dataset.from_list(rows), tokenizer, chat_template=TEMPLATE, max_length=max_length,
                                shuffle_seed=seed, num_proc=max(1, min(8, (os.cpu_count() or 1) // 2)),
                                minimum_valid_tokens=1, loss_mask_filter=loss_mask_filter)


def capture_features(target: str, dataset, layers: list[int], layout, into: str, device: str,
                     budget: int) -> None:
    """Run the HF target over every sample and save it as SpecForge's offline trainer reads it."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.bfloat16).to(device).eval()
    backbone = model.model  # no lm_head: the trainer's TargetHead makes the logits from the final state
    order = sorted(range(len(dataset)), key=lambda i: dataset[i]["input_ids"].numel())
    batches, batch = [], []
    for index in order:  # similar lengths together: little padding
        length = dataset[index]["input_ids"].numel()
        if batch and length * (len(batch) + 1) > budget:
            batches.append(batch)
            batch = []
        batch.append(index)
    batches.append(batch)
    # SGLang's layer id i captures the input of layer i + 1 = HF hidden_states[i + 1]; its loop
    # concatenates them in layer order whatever the id order
    taps = [i + 1 for i in sorted(layers)]
    with torch.inference_mode():
        for batch in batches:
            rows = [dataset[i] for i in batch]
            lengths = [row["input_ids"].numel() for row in rows]
            ids = torch.zeros(len(rows), max(lengths), dtype=torch.long)
            mask = torch.zeros_like(ids)
            for r, row in enumerate(rows):  # right padding: a causal model's real positions never see it
                ids[r, :lengths[r]] = row["input_ids"].view(-1)
                mask[r, :lengths[r]] = 1
            out = backbone(input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=True)
            aux = torch.cat([out.hidden_states[t] for t in taps], dim=-1)
            for r, (index, row) in enumerate(zip(batch, rows)):
                n = lengths[r]
                record = layout.materialize({
                    "input_ids": row["input_ids"].view(-1).clone(),
                    "loss_mask": row["loss_mask"].view(-1).clone(),
                    # copies, not views: torch.save would write the whole batch's storage
                    "aux_hidden_states": aux[r:r + 1, :n].to("cpu", copy=True),
                    "last_hidden_states": out.last_hidden_state[r:r + 1, :n].to("cpu", copy=True),
                })
                torch.save(record, os.path.join(into, f"data_{index:06d}.ckpt"))
    del model, backbone
    if device == "cuda":
        torch.cuda.empty_cache()


def run_logged(command: list[str], log_path: str, env: dict) -> list[dict]:
    """Run a SpecForge CLI command, echoing and logging its output; returns the parsed step lines."""
    steps = []
    with open(log_path, "a", encoding="utf-8") as log:
        log.write("$ " + " ".join(command) + "\n")
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for line in process.stdout:
            sys.stdout.write(line)
            log.write(line)
            if line.startswith("step ") and ": {" in line:  # SpecForge's logger: "step N: {metrics}"
                head, _, body = line.partition(": ")
                try:
                    steps.append({"step": int(head.split()[1]), **ast.literal_eval(body.strip())})
                except (ValueError, SyntaxError):
                    pass  # a non-literal value (nan) in one line: keep the log, skip the record
        if process.wait() != 0:
            raise SystemExit(f"{' '.join(command[:4])} failed (exit {process.returncode}); log: {log_path}")
    return steps


def versions() -> dict:
    import importlib.metadata as metadata

    found = {}
    for name in ("specforge", "torch", "transformers", "triton", "datasets", "accelerate", "safetensors"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    seed_everything(args.seed)
    import torch
    from transformers import AutoTokenizer

    from specforge.application import resolve_offline_capture
    from specforge.config import Config
    from specforge.data.preprocessing import generate_vocab_mapping_file
    from specforge.modeling.target.target_utils import load_target_config, target_vocab_size

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here")
    used = {what: cite(path, snippet) for what, path, snippet in USED}  # a moved line fails now, not after training
    out = os.path.abspath(args.out)
    run_dir = os.path.join(out, "checkpoints")  # SpecForge's run; run_gpu.sh's packing leaves it out
    if os.path.isdir(out) and os.listdir(out):
        if not os.path.isdir(run_dir):  # not a folder this script wrote: leave it alone
            raise SystemExit(f"{out} exists and holds files this script did not write")
        shutil.rmtree(out)  # an earlier, unfinished run of ours: start again
    os.makedirs(run_dir)
    work = tempfile.mkdtemp(prefix="specforge-features-", dir=args.work)
    features = os.path.join(work, "features")
    os.makedirs(features)
    log_path = os.path.join(run_dir, "train.log")

    # SpecForge's run config: offline features, one process, its EAGLE-3 strategy and defaults
    view, lm_head_key = specforge_target(args.target, run_dir)
    run = {
        "run_id": RUN_ID, "output_dir": run_dir,
        "model": {"target_model_path": view, "lm_head_key": lm_head_key, "torch_dtype": "bfloat16"},
        "data": {"hidden_states_path": features, "max_length": args.max_length,
                 "cache_dir": os.path.join(run_dir, "cache")},
        "training": {"strategy": "eagle3", "num_epochs": args.epochs, "max_steps": args.max_steps,
                     "batch_size": args.batch_size, "learning_rate": args.lr, "seed": args.seed,
                     "attention_backend": args.attention_backend, "log_interval": 1, "save_interval": 0,
                     # one rank: DDP (SpecForge's NO_SHARD wrapper) and FSDP do the same math, and
                     # FSDP1 refuses a CPU, so the CPU check runs the GPU run's path
                     "fsdp_sharding": "NO_SHARD"},
    }
    plan = resolve_offline_capture(Config.model_validate(run))  # capture layers, names, 1-layer draft config
    layers = list(plan.capture_layers)
    draft_config = plan.draft_config
    draft_config.draft_vocab_size = args.draft_vocab_size
    draft_config_path = os.path.join(run_dir, "draft_config.json")
    draft_config.to_json_file(draft_config_path, use_diff=False)
    run["model"]["draft_model_config"] = draft_config_path

    # 1. tokenise (SpecForge's preprocessor, our ChatML template)
    register_template()
    tokenizer = AutoTokenizer.from_pretrained(args.target)
    check_template(tokenizer)
    rows = read_conversations(args.data)
    dataset = tokenise(rows, tokenizer, args.max_length, args.seed, plan.loss_mask_filter)
    tokens = sum(int(row.numel()) for row in dataset["input_ids"])
    loss_tokens = sum(int(row.sum()) for row in dataset["loss_mask"])

    # 2. draft vocabulary (SpecForge's generator over the loss tokens)
    vocab_size = target_vocab_size(load_target_config(args.target))
    vocab_path = generate_vocab_mapping_file(dataset, vocab_size, args.draft_vocab_size,
                                             cache_dir=run_dir, cache_key="vocab_mapping")
    run["model"]["vocab_mapping_path"] = vocab_path
    tokenised = time.perf_counter()

    # 3. the target's states, in SpecForge's offline layout
    capture_features(args.target, dataset, layers, plan.layout, features, args.device, args.capture_tokens)
    captured = time.perf_counter()

    # 4. SpecForge's own trainer, through its CLI
    run_path = os.path.join(run_dir, "run.json")
    json.dump(Config.model_validate(run).model_dump(mode="json"), open(run_path, "w"), indent=1)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.device == "cpu":
        env.update(SPECFORGE_DEVICE="cpu", TRITON_INTERPRET="1")
    steps = run_logged([sys.executable, "-m", "specforge.cli", "train", "--config", run_path], log_path, env)
    trained = time.perf_counter()
    if not steps:
        raise SystemExit(f"SpecForge logged no training step; log: {log_path}")

    # 5. SpecForge's exporter, into a staging folder moved in at the end
    staging = os.path.join(run_dir, "export")
    run_logged([sys.executable, "-m", "specforge.cli", "export", "--to", "sglang", "--checkpoint", run_dir,
                "--draft-config", draft_config_path, "--output-dir", staging], log_path, env)
    if not args.keep_features:
        shutil.rmtree(work)

    last = steps[-1]
    tail = steps[-min(10, len(steps)):]
    record = {
        "what": "1-layer EAGLE-3 drafter trained by SpecForge's offline trainer (specforge train) on features "
                "of the HF target captured in-process, exported by specforge export --to sglang",
        "target": os.path.abspath(args.target), "data": os.path.abspath(args.data),
        "data_size": {"conversations_read": len(rows), "conversations_trained": len(dataset),
                      "tokens": tokens, "loss_tokens": loss_tokens, "max_length": args.max_length},
        "aux_layer_ids": layers, "aux_hidden_states_indices": [i + 1 for i in sorted(layers)],
        "draft_vocab_size": args.draft_vocab_size, "lm_head_key": lm_head_key,
        "steps": last["step"], "epochs": args.epochs, "max_steps": args.max_steps,
        # SpecForge's loader drops a short last batch (drop_last): an epoch is len // batch steps
        "epochs_run": round(last["step"] / max(1, len(dataset) // args.batch_size), 2),
        "batch_size": args.batch_size, "learning_rate": args.lr, "attention_backend": args.attention_backend,
        "seed": args.seed,
        "final": {"loss": last.get("loss"), "acc_0": last.get("acc_0"), "acc": last.get("acc"),
                  "mean_last_steps": {"steps": len(tail),
                                      "loss": sum(s.get("loss", 0.0) for s in tail) / len(tail),
                                      "acc_0": sum(s.get("acc_0", 0.0) for s in tail) / len(tail)}},
        "first_step": {k: steps[0].get(k) for k in ("loss", "acc_0", "acc")},
        "history": [[s["step"], s.get("loss"), s.get("acc_0")] for s in steps],
        "wall_s": {"tokenise_and_vocab": round(tokenised - started, 1), "capture": round(captured - tokenised, 1),
                   "train": round(trained - captured, 1), "total": round(time.perf_counter() - started, 1)},
        "versions": versions(), "python": platform.python_version(),
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else f"cpu ({platform.machine()})",
        "specforge_run_config": os.path.relpath(run_path, out),
        "specforge_used": used,
        "ours": ["the HF target forward that fills SpecForge's offline features (SpecForge 0.2.0's only "
                 "capture is SGLang 0.5.14's; the feature layout, names and layer ids are its own)",
                 "the ChatML template registered in SpecForge's registry (system prompt left to the target)",
                 "a TargetHead-readable view of a single-file target (links + model.safetensors.index.json)"],
    }
    json.dump(record, open(os.path.join(out, "train_record.json"), "w"), indent=1)
    for name in sorted(os.listdir(staging), key=lambda n: n == "config.json"):  # config.json last
        os.replace(os.path.join(staging, name), os.path.join(out, name))
    os.rmdir(staging)
    print(f"wrote {out}: {last['step']} steps, loss {last.get('loss')}, acc_0 {last.get('acc_0')}, "
          f"{record['wall_s']['total']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
