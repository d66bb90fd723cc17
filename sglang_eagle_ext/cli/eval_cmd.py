"""Measure a drafter's acceptance length on a target offline, before renting GPUs.

The target runs in HF transformers, the drafter in the plain-PyTorch reference implementation
(CPU or CUDA). For chain and tree drafting, greedy and sampled, it reports the mean number of
tokens per verify step (accepted drafts + 1, SGLang's spec_accept_length). A drafter with a wrong
vocabulary map or wrong aux layers loads fine and then accepts almost nothing (about 1.0): this is
where that shows; ``--compare-aux-layers`` measures a second tap set (say, the drafter's ids read
in the other id convention) and prints it as a column next to the drafter's own.
"""

from __future__ import annotations

import argparse
import json
import sys

from sglang_eagle_ext.cli.options import (device_problem, existing_file, layer_indices, non_negative_float,
                                          positive_int, torch_device)
from sglang_eagle_ext.errors import DrafterError, counted

NOTHING_ACCEPTED_BELOW = 1.1  # a mean under this means the drafter is useless for this target


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", required=True, help="target model directory (HF format)")
    parser.add_argument("--draft", required=True, help="drafter: model directory of any supported "
                        "dialect, a training checkpoint folder, or a Hugging Face hub id")
    parser.add_argument("--prompts", type=existing_file,
                        help="text file, one prompt per line, or a .jsonl file with a \"prompt\" string "
                             "in each record (prompts that span lines; e.g. MT-bench's first turns) "
                             "(default: prompts from the demo's corpus)")
    parser.add_argument("--chat", action="store_true",
                        help="format each prompt as a one-turn chat with the target tokenizer's chat "
                             "template, ready for the answer (an instruction-tuned target)")
    parser.add_argument("--num-prompts", type=positive_int, default=8, help="prompts measured")
    parser.add_argument("--max-new-tokens", type=positive_int, default=48, help="tokens generated per prompt")
    parser.add_argument("--num-steps", type=positive_int, default=3, help="draft steps per verify step")
    parser.add_argument("--topk", type=positive_int, default=4, help="branching of the tree rows")
    parser.add_argument("--num-draft-tokens", type=positive_int, default=None,
                        help="tree rows: drafted tokens + 1 (default: topk * num_steps + 1)")
    parser.add_argument("--temperature", type=non_negative_float, default=1.0,
                        help="temperature of the sampled rows")
    parser.add_argument("--aux-layers", type=layer_indices, default=None,
                        help="override the drafter's aux hidden-state indices, e.g. 2,4,5 "
                             "(index k = input of target layer k)")
    parser.add_argument("--compare-aux-layers", type=layer_indices, default=None,
                        help="also measure with these aux hidden-state indices (a suspected wrong "
                             "set, e.g. the drafter's ids read in the other id convention: 1,3,4 "
                             "for 2,4,5) and print them as a second column")
    parser.add_argument("--device", type=torch_device, default="cpu",
                        help="torch device for both models (cpu, cuda, cuda:1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampled rows and the default prompts")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _prompt_texts(path: str) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle if line.strip()]
    if not path.endswith(".jsonl"):
        return lines
    texts = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise OptionError(f"--prompts {path}: line {number} is not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("prompt"), str):
            raise OptionError(f"--prompts {path}: line {number} has no \"prompt\" string "
                              "(a .jsonl file holds one {\"prompt\": ...} record per line)")
        texts.append(record["prompt"])
    return texts


def _prompts(args, tokenizer) -> list[list[int]]:
    if args.prompts:
        texts = _prompt_texts(args.prompts)
        if not texts:
            raise OptionError(f"--prompts {args.prompts}: no prompts (one prompt per non-empty line)")
    else:
        from sglang_eagle_ext.corpus import prompts

        texts = prompts(args.num_prompts, seed=10_000 + args.seed)
    texts = texts[:args.num_prompts]
    if args.chat:
        if not getattr(tokenizer, "chat_template", None):
            raise OptionError("--chat: the target's tokenizer has no chat template (tokenizer_config.json "
                              "or chat_template.jinja); leave --chat out to feed the prompts as they are")
        return [_chat_ids(tokenizer, text) for text in texts]
    ids = [tokenizer(text).input_ids for text in texts]
    if any(len(i) < 2 for i in ids):
        raise OptionError("--prompts: every prompt must be at least 2 tokens long")
    return ids


def _chat_ids(tokenizer, text: str) -> list[int]:
    encoded = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


class OptionError(ValueError):
    """A command-line value that does not fit the drafter or the target."""


def check_indices(indices: tuple[int, ...], count: int, depth: int, option: str) -> None:
    """Aux hidden-state indices for a ``count``-aux drafter on a ``depth``-layer target."""
    if len(indices) != count:
        raise OptionError(f"{option}: the drafter's fc takes {count} aux hidden states, {len(indices)} "
                          f"indices given ({','.join(map(str, indices))})")
    if max(indices) > depth:
        raise OptionError(f"{option}: hidden-state indices run from 0 to {depth} on this {depth}-layer "
                          f"target, {max(indices)} given")


def load(target_dir: str, draft_dir: str, device: str, aux_override=None):
    """Target (HF), capture wrapper and reference drafter, checked against each other."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sglang_eagle_ext.drafter.locate import locate_drafter
    from sglang_eagle_ext.drafter.reader import read_drafter
    from sglang_eagle_ext.reference.capture import CapturingTarget
    from sglang_eagle_ext.reference.drafter import ReferenceDrafter

    checkpoint = read_drafter(locate_drafter(draft_dir).directory, target=target_dir)
    spec = checkpoint.spec
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    depth = model.config.get_text_config().num_hidden_layers
    if not spec.use_aux_hidden_state:
        indices = (depth,)
    else:
        indices = aux_override or spec.aux_layers.hidden_state_indices(depth)
    check_indices(indices, spec.num_aux_hidden_states if spec.use_aux_hidden_state else 1, depth, "--aux-layers")
    drafter = ReferenceDrafter.from_tensors(
        spec, checkpoint.load_tensors(torch.float32),
        target_embed=model.get_input_embeddings().weight.detach(),
        target_lm_head=model.get_output_embeddings().weight.detach()).to(device).eval()
    return tokenizer, CapturingTarget(model, indices), drafter


def _measure(target, drafter, prompts, rows, args, bar) -> dict:
    """Mean acceptance length (and counts) of every drafting row over ``prompts``."""
    import torch

    from sglang_eagle_ext.reference.acceptance import mean_accept_length, speculative_generate

    results = {}
    for name, settings in rows.items():
        generator = torch.Generator().manual_seed(args.seed)
        runs = []
        for prompt in prompts:
            runs.append(speculative_generate(target, drafter, prompt, args.max_new_tokens,
                                             settings, generator))
            bar.update(1)
        results[name] = {"accept_length": mean_accept_length(runs),
                         "verify_steps": sum(len(r.accept_lengths) for r in runs),
                         "tokens": sum(len(r.output) for r in runs),
                         "num_steps": settings.num_steps, "topk": settings.topk,
                         "draft_tokens": settings.tree_size + 1,
                         "temperature": settings.temperature}
    return results


def _print_table(measured) -> None:
    """One row per drafting setting, one accept-length column per aux tap set."""
    names = [str(list(indices)) for indices, _ in measured]
    width = max(12, *(len(n) + 2 for n in names))
    print("accept length (tokens per verify step) by aux hidden-state indices")
    print(f"{'drafting':<15}{'steps':>6}{'topk':>6}{'tokens':>8}{'temp':>6}"
          + "".join(f"{n:>{width}}" for n in names))
    for name, row in measured[0][1].items():
        cells = "".join(f"{rows[name]['accept_length']:>{width}.3f}" for _, rows in measured)
        print(f"{name:<15}{row['num_steps']:>6}{row['topk']:>6}{row['draft_tokens']:>8}"
              f"{row['temperature']:>6.1f}{cells}")


def _gain(rows: dict) -> float:
    """Mean tokens per verify step beyond plain decoding's one, over the drafting rows."""
    return sum(row["accept_length"] - 1 for row in rows.values()) / len(rows)


def run(args) -> int:
    from sglang_eagle_ext.sglang.compat import cpu as cpu_shims

    cpu_shims.install()
    from tqdm import tqdm

    from sglang_eagle_ext.reference.acceptance import DraftSettings
    from sglang_eagle_ext.reference.capture import CapturingTarget

    if device_problem(args.device):
        print(f"eval: --device {device_problem(args.device)}", file=sys.stderr)
        return 2
    try:
        tokenizer, target, drafter = load(args.target, args.draft, args.device, args.aux_layers)
        compared = None
        if args.compare_aux_layers is not None:
            check_indices(args.compare_aux_layers, len(target.indices), len(target.layers), "--compare-aux-layers")
            compared = CapturingTarget(target.model, args.compare_aux_layers)
        rows = {
            "chain greedy": DraftSettings(args.num_steps, 1),
            "chain sampled": DraftSettings(args.num_steps, 1, temperature=args.temperature),
            "tree greedy": DraftSettings(args.num_steps, args.topk, args.num_draft_tokens),
            "tree sampled": DraftSettings(args.num_steps, args.topk, args.num_draft_tokens,
                                          temperature=args.temperature),
        }
    except DrafterError as exc:
        print(exc, file=sys.stderr)
        return 1
    except (OptionError, OSError) as exc:
        print(f"eval: {exc}", file=sys.stderr)
        return 2
    try:
        prompts = _prompts(args, tokenizer)
    except (OptionError, OSError, UnicodeDecodeError) as exc:
        print(f"eval: {exc}", file=sys.stderr)
        return 2
    targets = [target] + ([compared] if compared is not None else [])
    with tqdm(total=len(targets) * len(rows) * len(prompts), desc="verify steps", unit="prompt",
              file=sys.stderr, disable=None) as bar:
        measured = [(t.indices, _measure(t, drafter, prompts, rows, args, bar)) for t in targets]
    results = measured[0][1]
    report = {"target": args.target, "draft": args.draft, "aux_indices": list(target.indices),
              "prompts": len(prompts), "chat": args.chat, "rows": results}
    if compared is not None:
        report["compared"] = {"aux_indices": list(compared.indices), "rows": measured[1][1]}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"target {args.target}\ndraft  {args.draft}\n"
          f"{counted(len(prompts), 'prompt')} x {counted(args.max_new_tokens, 'token')}")
    _print_table(measured)
    own = _gain(results)
    for indices, rows_measured in measured[1:]:
        other = _gain(rows_measured)
        print(f"tokens gained per verify step (mean over rows): {own:.2f} with "
              f"{list(target.indices)}, {other:.2f} with {list(indices)}"
              + (f" ({100 * other / own:.0f}%)" if own > 0 else ""))
    if max(row["accept_length"] for row in results.values()) < NOTHING_ACCEPTED_BELOW:
        print("warning: the drafter accepts almost nothing on this target: check that its aux "
              "layers and vocabulary map are the ones it was trained with "
              "(`sglang-eagle inspect`)")
    return 0
