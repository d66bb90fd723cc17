"""Deterministic English-like text for training the tiny tokenizer and for prompts.

The tiny target is random, so the text only has to give the tokenizer realistic merges and the
prompts realistic token statistics; a seeded generator keeps everything reproducible offline.

Used by the demo's tiny models (:mod:`sglang_eagle_ext.demo`) and by ``sglang-eagle eval``'s
default prompts; it lives at the package's top so that the command line never imports the demo
(imports go one way: ``demo`` may use ``cli``, not the reverse).
"""

from __future__ import annotations

import random

_SUBJECTS = ("the quick brown fox", "a small model", "the draft head", "every target layer",
             "the old sailor", "my neighbour's cat", "a patient engineer", "the river",
             "this sentence", "the server", "a curious child", "the north wind")
_VERBS = ("jumps over", "predicts", "follows", "remembers", "writes about", "waits for",
          "speaks to", "carries", "accepts", "rejects", "draws", "counts")
_OBJECTS = ("the lazy dog", "seven tokens", "the hidden state", "a long river", "the morning",
            "every question", "a paper boat", "the final answer", "the mountain road",
            "three green apples", "the quiet library", "a distant star")
_TAILS = (".", ", and then it rains.", " before dinner.", " without a sound.", " again and again.",
          "; nobody knows why.", " in the year 2024.", " at 7:45 am.", "!", "?")


def sentences(count: int, seed: int) -> list[str]:
    """``count`` short sentences, the same for the same ``seed``."""
    rng = random.Random(seed)
    return [f"{rng.choice(_SUBJECTS).capitalize()} {rng.choice(_VERBS)} "
            f"{rng.choice(_OBJECTS)}{rng.choice(_TAILS)}" for _ in range(count)]


def prompts(count: int, seed: int) -> list[str]:
    """``count`` prompts of one or two sentences (distinct seed stream from the tokenizer's)."""
    rng = random.Random(seed)
    return [" ".join(sentences(rng.randint(1, 2), seed=rng.randrange(1 << 30))) for _ in range(count)]
