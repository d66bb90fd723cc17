"""Build (or reuse) a tiny decoder target with a locally trained byte-level BPE tokenizer.

The result is an ordinary Hugging Face model directory (``save_pretrained``) that HF
transformers and stock SGLang both load. Nothing is downloaded: the tokenizer is trained on
:mod:`.corpus` text, and the seeded random weights are then trained for a few hundred steps on a
second-order Markov process over the corpus's most frequent tokens (:mod:`.markov`). A random
target continues text chaotically, so a drafter cannot learn it and every acceptance number is
noise; the trained one continues it as a function of the last two tokens, which a drafter learns
from the target's aux hidden states. (Every layer of so small a model still carries those two
tokens, so reading other layers' states costs a drafter little here.) The same
settings give the same files (on the same torch build and thread count).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

from ..model_dir import staged_directory

BUILD_RECORD = "tiny_target.json"  # settings the directory was built with; used for reuse
SPECIAL_TOKENS = ("<|bos|>", "<|eos|>", "<|pad|>")
FAMILIES = ("llama", "qwen3")


@dataclass(frozen=True)
class TinyTargetSettings:
    family: str = "llama"  # "llama" or "qwen3" (per-head q/k RMSNorm)
    num_layers: int = 8  # deep enough for distinct default aux taps (2, N//2, N-3)
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
    # Training on the pair process (see the module docstring).
    alphabet_size: int = 16  # K most frequent corpus tokens; K * K pairs to learn
    train_steps: int = 240
    train_batch: int = 8
    # Longer than prompt + continuation in distillation and eval: the pair rule is learnt per
    # position range, and greedy accuracy drops beyond the trained length.
    train_length: int = 96
    learning_rate: float = 8e-3
    seed: int = 0

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}")


def _train_tokenizer(vocab_size: int, seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from .corpus import sentences

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

    from .corpus import sentences

    counts = torch.zeros(len(tokenizer), dtype=torch.long)
    for text in sentences(2000, seed):
        counts += torch.bincount(torch.tensor(tokenizer(text).input_ids), minlength=len(counts))
    order = sorted(range(len(counts)), key=lambda i: (-int(counts[i]), i))
    return torch.tensor(sorted(order[:size]))


def _train(model, process, settings: TinyTargetSettings) -> None:
    """Next-token training on sequences of ``process`` (AdamW, one-cycle schedule)."""
    import torch

    generator = torch.Generator().manual_seed(settings.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.0)
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
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, dtype="float32",
    )
    if settings.family == "qwen3":
        return Qwen3Config(**common)
    return LlamaConfig(**common)


def _build_into(directory: str, settings: TinyTargetSettings) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from .markov import PairProcess

    tokenizer = _train_tokenizer(settings.vocab_size, settings.seed)
    config = _model_config(settings, len(tokenizer), tokenizer)
    torch.manual_seed(settings.seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head.normal_(0.0, settings.lm_head_std)
    process = PairProcess.random(_alphabet(tokenizer, settings.alphabet_size, settings.seed),
                                 torch.Generator().manual_seed(settings.seed))
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
