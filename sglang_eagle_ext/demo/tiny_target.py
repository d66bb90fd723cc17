"""Build (or reuse) a tiny decoder target with a locally trained byte-level BPE tokenizer.

The result is an ordinary Hugging Face model directory (``save_pretrained``) that HF
transformers and stock SGLang both load. Nothing is downloaded: the tokenizer is trained on
:mod:`~sglang_eagle_ext.corpus` text, and the seeded random weights are then trained for a few
hundred steps on a token process over the corpus's most frequent tokens (:mod:`.markov`) whose
next token follows the two tokens before the current one. A random target continues text
chaotically, so a drafter cannot learn it and every acceptance number is noise; the trained one
continues the process, which a drafter learns from the target's aux hidden states.

Like a real model, the target carries what a drafter needs in some layers only, and its layers'
states differ strongly from one another:

* just one layer (``context_layer``, N//2 by default) mixes positions; it starts as previous-token
  heads (:func:`_previous_token_heads`). The others are token-local (their attention output
  projection is zero and stays so in training), a caricature of the lowest layers of real models.
  So hidden-state indices up to ``context_layer`` hold only the position's own token, and the
  previous token, without which a drafter can only guess (:mod:`.markov`), appears from index
  ``context_layer + 1`` on;
* each token-local layer below it writes ``depth_gain`` times more than the one before
  (:func:`_scale_outputs`), so the residual stream grows and turns with depth.

A drafter distilled on the default taps (2, N//2, N-3) = (2, 4, 5) therefore collapses when it is
fed taps one layer shallower, (1, 3, 4): what ModelOpt / NeMo write for the same taps in their
layer-output id convention, read as hidden-state indices. The same settings give the same files
(on the same torch build and thread count).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

from sglang_eagle_ext.drafter.model_dir import staged_directory

BUILD_RECORD = "tiny_target.json"  # settings the directory was built with; used for reuse
SPECIAL_TOKENS = ("<|bos|>", "<|eos|>", "<|pad|>")
FAMILIES = ("llama", "qwen3")
LAGS = (1, 2)  # distances the context layer's heads start attending to (the process's pair)
SHARPNESS = 8.0  # nats between a built head's peak and any other distance
ATTENTION_BIAS = True  # q/k/v/o carry biases: the context layer's built heads are biases (_previous_token_heads)


@dataclass(frozen=True)
class TinyTargetSettings:
    family: str = "llama"  # "llama" or "qwen3" (per-head q/k RMSNorm)
    num_layers: int = 8  # deep enough for distinct default aux taps (2, N//2, N-3)
    # The only layer whose attention mixes positions (None: num_layers // 2); see the docstring.
    context_layer: int | None = None
    # Layer k's output projections start depth_gain ** min(k, context_layer - 1) times larger, so
    # the residual stream grows and turns with depth as a real model's does (see _scale_outputs).
    depth_gain: float = 3.0
    hidden_size: int = 64
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 192
    vocab_size: int = 512  # tokenizer size = model vocabulary
    initializer_range: float = 0.08
    # The lm_head starts wider than the rest, so next-token distributions are peaked from the
    # first training step on (and stay so on tokens the process never emits).
    lm_head_std: float = 0.6
    max_position_embeddings: int = 1024
    # Training on the lagged pair process (:mod:`.markov`).
    alphabet_size: int = 16  # K most frequent corpus tokens; K * K pairs to learn
    # Probability of each pair's likely successor: the trained target's next token leads the
    # runner-up by about log(p / (1 - p)) nats, so lower values give flatter distributions.
    likely_successor: float = 0.9
    train_steps: int = 240
    train_batch: int = 8
    # Longer than prompt + continuation in distillation and eval: greedy accuracy drops beyond
    # the trained length.
    train_length: int = 96
    learning_rate: float = 8e-3
    seed: int = 0

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}")
        if self.context_layer is None:
            object.__setattr__(self, "context_layer", self.num_layers // 2)
        if not 0.5 < self.likely_successor < 1:
            raise ValueError(f"likely_successor must be in (0.5, 1), got {self.likely_successor}")
        if not 0 <= self.context_layer < self.num_layers:
            raise ValueError(f"context_layer must be in [0, {self.num_layers - 1}], "
                             f"got {self.context_layer}")


def _train_tokenizer(vocab_size: int, seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from sglang_eagle_ext.corpus import sentences

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(sentences(4000, seed), trainer=trainer)
    bos, eos, pad = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=bos, eos_token=eos,
                                   pad_token=pad, model_max_length=1 << 20)


def _alphabet(tokenizer, size: int, seed: int):
    """The ``size`` most frequent tokens of corpus text (ties broken by id)."""
    import torch

    from sglang_eagle_ext.corpus import sentences

    counts = torch.zeros(len(tokenizer), dtype=torch.long)
    for text in sentences(2000, seed):
        counts += torch.bincount(torch.tensor(tokenizer(text).input_ids), minlength=len(counts))
    order = sorted(range(len(counts)), key=lambda i: (-int(counts[i]), i))
    return torch.tensor(sorted(order[:size]))


def _make_token_local(model, settings: TinyTargetSettings) -> None:
    """Zero and freeze the attention output of every layer but ``context_layer``."""
    import torch

    from sglang_eagle_ext.reference.capture import decoder_layers

    for index, layer in enumerate(decoder_layers(model)):
        if index != settings.context_layer:
            for param in layer.self_attn.o_proj.parameters():
                with torch.no_grad():
                    param.zero_()
                param.requires_grad_(False)


def _scale_outputs(model, settings: TinyTargetSettings) -> None:
    """Scale each layer's output projections (MLP down_proj, attention o_proj) at init.

    Below the context layer each token-local layer then writes ``depth_gain`` times more than
    the one before, so adjacent hidden states are far apart (cosine about 0.3-0.45 at gain 3,
    0.6-0.9 without) and a drafter's ``fc``, trained on one set of layers, reads another set as
    noise, as with real models. From the context layer on, outputs keep the last lower layer's
    scale, so what the context layer gathers is not drowned by the token-local part of the
    residual stream (without it, training takes several times longer).
    """
    import torch

    from sglang_eagle_ext.reference.capture import decoder_layers

    with torch.no_grad():
        for index, layer in enumerate(decoder_layers(model)):
            gain = settings.depth_gain ** max(0, min(index, settings.context_layer - 1))
            layer.mlp.down_proj.weight.mul_(gain)
            layer.self_attn.o_proj.weight.mul_(gain)


def _previous_token_heads(model, settings: TinyTargetSettings) -> None:
    """Start ``context_layer``'s attention as previous-token heads: query head ``h`` attends to
    the token ``LAGS[h % 2]`` positions back, whatever the tokens.

    Queries and keys are their biases alone, so with RoPE a head's score depends only on the
    distance: a query bias of ``PEAK * exp(-i theta_j lag)`` per rotary pair ``j`` against a key
    bias of ``PEAK`` scores ``PEAK^2 * sum_j cos(theta_j (distance - lag))`` (before the
    ``1/sqrt(d)`` scaling), largest at ``distance = lag``. Real models learn such heads early;
    building them saves the plateau of several hundred steps before this small model finds them.
    ``PEAK`` puts every other distance at least ``SHARPNESS`` nats below the peak.
    """
    import torch

    from sglang_eagle_ext.reference.capture import decoder_layers

    attention = decoder_layers(model)[settings.context_layer].self_attn
    head_dim = settings.hidden_size // settings.num_attention_heads
    theta = model.model.rotary_emb.inv_freq.double()  # [head_dim / 2]
    distances = torch.arange(settings.max_position_embeddings, dtype=torch.float64)
    gaps = []
    for lag in LAGS:
        scores = torch.cos(theta * (distances[:, None] - lag)).sum(-1)
        gaps.append((scores[lag] - scores[distances != lag]).min())
    peak = (SHARPNESS * head_dim ** 0.5 / min(gaps)) ** 0.5
    lags = torch.tensor([LAGS[h % len(LAGS)] for h in range(settings.num_attention_heads)])
    angle = -theta[None, :] * lags[:, None]  # [heads, head_dim / 2]
    query = peak * torch.cat([angle.cos(), angle.sin()], dim=-1)
    key = torch.zeros(settings.num_key_value_heads, head_dim, dtype=torch.float64)
    key[:, :head_dim // 2] = peak
    with torch.no_grad():
        attention.q_proj.weight.zero_()
        attention.k_proj.weight.zero_()
        attention.q_proj.bias.copy_(query.flatten())
        attention.k_proj.bias.copy_(key.flatten())
        for norm in (getattr(attention, "q_norm", None), getattr(attention, "k_norm", None)):
            if norm is not None:  # Qwen3 normalises q and k per head: give the scale back
                norm.weight.fill_(peak / 2 ** 0.5)


def _train(model, process, settings: TinyTargetSettings) -> None:
    """Next-token training on sequences of ``process`` (AdamW, one-cycle schedule)."""
    import torch

    generator = torch.Generator().manual_seed(settings.seed)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=settings.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, settings.learning_rate,
                                                   total_steps=settings.train_steps, pct_start=0.1)
    model.train()
    for _ in range(settings.train_steps):
        batch = process.sample(settings.train_batch, settings.train_length, generator)
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()


def _model_config(settings: TinyTargetSettings, vocab_size: int, tokenizer):
    from transformers import LlamaConfig, Qwen3Config

    common = dict(
        vocab_size=vocab_size, hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size, num_hidden_layers=settings.num_layers,
        num_attention_heads=settings.num_attention_heads,
        num_key_value_heads=settings.num_key_value_heads,
        head_dim=settings.hidden_size // settings.num_attention_heads,
        max_position_embeddings=settings.max_position_embeddings,
        initializer_range=settings.initializer_range, tie_word_embeddings=False,
        attention_bias=ATTENTION_BIAS,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, dtype="float32",
    )
    if settings.family == "qwen3":
        return Qwen3Config(**common)
    return LlamaConfig(**common)


def _build_into(directory: str, settings: TinyTargetSettings) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from sglang_eagle_ext.demo.markov import LaggedPairProcess

    tokenizer = _train_tokenizer(settings.vocab_size, settings.seed)
    config = _model_config(settings, len(tokenizer), tokenizer)
    torch.manual_seed(settings.seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head.normal_(0.0, settings.lm_head_std)
    _scale_outputs(model, settings)
    _make_token_local(model, settings)
    _previous_token_heads(model, settings)
    process = LaggedPairProcess.random(_alphabet(tokenizer, settings.alphabet_size, settings.seed),
                                       torch.Generator().manual_seed(settings.seed), settings.likely_successor)
    _train(model, process, settings)
    model.generation_config.do_sample = False
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    with open(os.path.join(directory, BUILD_RECORD), "w", encoding="utf-8") as handle:
        json.dump(dataclasses.asdict(settings), handle, indent=2, sort_keys=True)


def built_with(directory: str) -> TinyTargetSettings | None:
    """The settings ``directory`` was built with, or None when it is not a finished tiny target."""
    try:
        with open(os.path.join(directory, BUILD_RECORD), encoding="utf-8") as handle:
            return TinyTargetSettings(**json.load(handle))
    except (OSError, ValueError, TypeError):
        return None


def build_tiny_target(directory: str | os.PathLike,
                      settings: TinyTargetSettings = TinyTargetSettings()) -> str:
    """Build the tiny target in ``directory`` or reuse it when it was built with ``settings``.

    The model is written into a sibling temporary directory that is renamed into place once
    complete, so an interrupted build never leaves a half-written target behind. An existing
    directory built with other settings (or not by this function) is an error, never
    overwritten.
    """
    directory = os.path.abspath(os.fspath(directory))
    existing = built_with(directory)
    if existing == settings:
        return directory
    if os.path.exists(directory):
        found = "other settings" if existing else "no build record"
        raise FileExistsError(
            f"{directory}: exists with {found} ({BUILD_RECORD}); remove it or choose another "
            "directory for the tiny target")
    with staged_directory(directory) as staging:
        _build_into(staging, settings)
    return directory


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--family", choices=FAMILIES, default="llama")
    parser.add_argument("--num-layers", type=int, default=TinyTargetSettings.num_layers)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    settings = TinyTargetSettings(family=args.family, num_layers=args.num_layers, seed=args.seed)
    print(build_tiny_target(args.directory, settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
