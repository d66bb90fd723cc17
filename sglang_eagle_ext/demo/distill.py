"""Distil an EAGLE-3 drafter from a (tiny) target's own greedy continuations, on CPU.

Random drafters accept nothing, which makes every acceptance and speed-up number meaningless;
this trains one that does, in seconds to minutes. Recipe (EAGLE-3's, scaled down):

* data: corpus prompts cut to ``prompt_tokens`` tokens, continued greedily by the target; the
  target's aux hidden states and next-token distributions are captured on every sequence;
* draft vocabulary: the ``draft_vocab_size`` most frequent target tokens in that data (``d2t``);
* loss: cross-entropy of the drafter against the target's distribution restricted to the draft
  vocabulary, at every position, for ``ttt_steps`` unrolled draft steps ("training-time test":
  step ``s`` feeds the drafter its own carried hidden states and attends to the keys a real
  ``s``-th draft step would see), so later draft steps are trained for what they get at
  inference;
* the token embedding is the target's (frozen, not saved); ``lm_head`` starts from the target's
  rows for the draft vocabulary.

The result is a flat SGLang-style drafter directory (``LlamaForCausalLMEagle3``, ``layers.{i}``
names, aux ids in ``eagle_config``), or the same drafter in another producer's layout
(:mod:`sglang_eagle_ext.drafter.producer_export`), written atomically and read back.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

import torch

from sglang_eagle_ext.drafter.producer_export import write_in_layout
from sglang_eagle_ext.reference.capture import CapturingTarget
from sglang_eagle_ext.reference.drafter import DraftCache, ReferenceDrafter, causal_mask
from sglang_eagle_ext.drafter.spec import (AuxLayers, Dialect, DrafterSpec, IdConvention, LaterLayerNorm,
                                           default_aux_indices)
from sglang_eagle_ext.drafter.target import read_target
from sglang_eagle_ext.demo.tiny_target import ATTENTION_BIAS, TinyTargetSettings

BUILD_RECORD = "tiny_drafter.json"


@dataclass(frozen=True)
class DistillSettings:
    num_layers: int = 2
    aux_indices: tuple[int, ...] | None = None  # hidden-state indices; None: (2, N//2, N-3)
    intermediate_size: int = 256
    attention_bias: bool = False  # biases on q/k/v and o_proj (HF Llama's and NeMo's draft attention)
    fc_norm: bool = False  # EAGLE 3.1: one RMSNorm per aux chunk before fc
    carry_normed_state: bool = False  # the next draft step gets the final-normed hidden state
    later_layer_norm: str = "input_layernorm"  # or "hidden_norm": what layers >= 1 normalise with
    draft_vocab_size: int = 256
    num_sequences: int = 256
    prompt_tokens: int = 8
    new_tokens: int = 56
    ttt_steps: int = 2
    # The loss sits on a plateau for the first ~150 steps (reading the previous token out of the
    # aux states), so fewer steps leave the one-cycle schedule annealed before it has been left.
    train_steps: int = 600
    batch_size: int = 16
    learning_rate: float = 1e-2
    seed: int = 0


# What the demo distils for each producer layout of :mod:`sglang_eagle_ext.drafter.producer_export`:
# a drafter with that layout's features, for the tiny target.
LAYOUT_SETTINGS = {
    "sglang": DistillSettings(num_layers=2),  # the demo's drafter: later layers read input_layernorm
    "speculators": DistillSettings(num_layers=2),
    "modelopt-hf": DistillSettings(num_layers=2),
    "modelopt-megatron": DistillSettings(num_layers=2, later_layer_norm="hidden_norm"),
    "specforge": DistillSettings(num_layers=1, fc_norm=True),  # SpecForge carries the pre-norm state
    # NeMo's draft takes the target's config: its MLP width and its attention biases
    "nemo": DistillSettings(num_layers=1, fc_norm=True, carry_normed_state=True,
                            intermediate_size=TinyTargetSettings().intermediate_size, attention_bias=ATTENTION_BIAS),
}


def _spec(target_dir: str, settings: DistillSettings, indices: tuple[int, ...]) -> DrafterSpec:
    from transformers import AutoConfig

    info = read_target(target_dir)
    config = AutoConfig.from_pretrained(target_dir)
    heads = config.num_attention_heads
    return DrafterSpec.from_values(
        path="<distilled>", dialect=Dialect.FLAT, architecture="LlamaForCausalLMEagle3",
        num_layers=settings.num_layers, hidden_size=info.hidden_size, num_attention_heads=heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=getattr(config, "head_dim", None) or info.hidden_size // heads,
        intermediate_size=settings.intermediate_size, attention_bias=settings.attention_bias,
        o_proj_bias=settings.attention_bias, rms_norm_eps=config.rms_norm_eps,
        rope_theta=float(config.rope_parameters["rope_theta"]),
        max_position_embeddings=config.max_position_embeddings, num_aux_hidden_states=len(indices),
        aux_layers=AuxLayers(indices, IdConvention.HIDDEN_STATE_INDEX, "<distilled>"),
        vocab_size=info.vocab_size, draft_vocab_size=min(settings.draft_vocab_size, info.vocab_size),
        has_vocab_map=settings.draft_vocab_size < info.vocab_size, embed_tokens_from_target=True,
        fc_norm=settings.fc_norm, norm_output=settings.carry_normed_state,
        later_layer_norm=LaterLayerNorm(settings.later_layer_norm) if settings.num_layers > 1 else None)


def _sequences(model, tokenizer, settings: DistillSettings) -> torch.Tensor:
    from sglang_eagle_ext.corpus import prompts

    rows = []
    for text in prompts(settings.num_sequences * 2, settings.seed + 1):
        ids = tokenizer(text).input_ids
        if len(ids) >= settings.prompt_tokens:
            rows.append(ids[:settings.prompt_tokens])
        if len(rows) == settings.num_sequences:
            break
    prompts_tensor = torch.tensor(rows)
    chunks = []
    for batch in prompts_tensor.split(64):
        chunks.append(model.generate(batch, attention_mask=torch.ones_like(batch),
                                     max_new_tokens=settings.new_tokens, do_sample=False,
                                     min_new_tokens=settings.new_tokens,
                                     pad_token_id=tokenizer.pad_token_id))
    return torch.cat(chunks)


def _ttt_mask(length: int, step: int) -> torch.Tensor:
    """Visibility for unrolled draft step ``step``: the query at ``i`` sees the aux-based keys up
    to ``i - step`` and, from each earlier unrolled step ``b``, the key at ``i - step + b``."""
    if step == 0:
        return causal_mask(0, length)
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    blocks = [j <= i - step] + [j == i - step + b for b in range(1, step + 1)]
    return torch.cat(blocks, dim=1)


def train(target_dir: str, settings: DistillSettings, progress=None) -> tuple[ReferenceDrafter, dict]:
    """Train a drafter for the target in ``target_dir``; returns it and a summary."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(settings.seed)
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    info = read_target(target_dir)
    indices = settings.aux_indices or default_aux_indices(info.num_layers)
    spec = _spec(target_dir, settings, tuple(indices))
    with torch.no_grad():
        sequences = _sequences(model, tokenizer, settings)
        captured = CapturingTarget(model, spec.aux_layers.declared)(sequences)
    counts = torch.bincount(sequences.flatten(), minlength=spec.vocab_size)
    selected = counts.topk(spec.draft_vocab_size).indices.sort().values
    drafter = ReferenceDrafter(spec)
    with torch.no_grad():
        drafter.embed_tokens.weight.copy_(model.get_input_embeddings().weight)
        drafter.lm_head.weight.copy_(model.get_output_embeddings().weight[selected])
        if spec.has_vocab_map:
            drafter.d2t.copy_(selected - torch.arange(spec.draft_vocab_size))
    drafter.embed_tokens.weight.requires_grad_(False)
    # Target distribution over the draft vocabulary for the token after each input position.
    target_probs = captured.logits.softmax(-1)[..., selected]
    target_probs = target_probs / target_probs.sum(-1, keepdim=True)
    inputs, aux = sequences[:, 1:], captured.aux[:, :-1]
    labels = target_probs[:, 1:]  # drafter position i (token i+1, aux i) predicts token i+2
    length = inputs.shape[1]
    masks = [_ttt_mask(length, s) for s in range(settings.ttt_steps)]
    optimizer = torch.optim.AdamW([p for p in drafter.parameters() if p.requires_grad],
                                  lr=settings.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, settings.learning_rate,
                                                   total_steps=settings.train_steps, pct_start=0.1)
    generator = torch.Generator().manual_seed(settings.seed)
    positions = torch.arange(length)
    loss_value = float("nan")
    for step in range(settings.train_steps):
        rows = torch.randint(0, len(inputs), (settings.batch_size,), generator=generator)
        cache = DraftCache()
        out = drafter(inputs[rows], positions, aux=aux[rows], cache=cache, attend=masks[0])
        loss = -(labels[rows][:, :-1] * out.logits[:, :-1].log_softmax(-1)).sum(-1).mean()
        for unrolled in range(1, settings.ttt_steps):
            carried = torch.cat([torch.zeros_like(out.carried[:, :1]), out.carried[:, :-1]], 1)
            out = drafter(inputs[rows], positions, carried=carried, cache=cache,
                          attend=masks[unrolled])
            valid = slice(unrolled, length - 1)
            loss = loss - (labels[rows][:, valid] * out.logits[:, valid].log_softmax(-1)
                           ).sum(-1).mean() * 0.8 ** unrolled
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        loss_value = float(loss.detach())
        if progress is not None:
            progress(step + 1, settings.train_steps, loss_value)
    return drafter.eval(), {"final_loss": loss_value, "sequences": len(sequences)}


def write_drafter(directory: str, drafter: ReferenceDrafter, target_dir: str, summary: dict,
                  settings: DistillSettings, layout: str = "sglang") -> str:
    """Write ``drafter`` as a model directory in ``layout`` (a producer's, see
    :mod:`sglang_eagle_ext.drafter.producer_export`), atomically, checked by reading it back."""
    record = {"settings": dataclasses.asdict(settings), "layout": layout, **summary}
    return write_in_layout(directory, layout, drafter.spec, drafter.canonical_state_dict(), target_dir,
                           extra_files={BUILD_RECORD: record})


def _record(directory: str) -> dict | None:
    try:
        with open(os.path.join(directory, BUILD_RECORD), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def built_with(directory: str) -> DistillSettings | None:
    try:
        data = dict(_record(directory)["settings"])
        if data.get("aux_indices") is not None:
            data["aux_indices"] = tuple(data["aux_indices"])
        return DistillSettings(**data)
    except (TypeError, KeyError):
        return None


def build_tiny_drafter(directory: str, target_dir: str, settings: DistillSettings = DistillSettings(),
                       progress=None, layout: str = "sglang") -> str:
    """Distil a drafter into ``directory`` written in ``layout``, or reuse it when built with the
    same settings and layout."""
    if built_with(directory) == settings and _record(directory).get("layout", "sglang") == layout:
        return os.path.abspath(directory)
    if os.path.exists(directory) and built_with(directory) is None:
        raise FileExistsError(f"{directory}: exists and was not written by this tool "
                              f"({BUILD_RECORD} missing); remove it or choose another directory")
    drafter, summary = train(target_dir, settings, progress)
    return write_drafter(directory, drafter, target_dir, summary, settings, layout)
