"""A sparse second-order Markov process over a small alphabet of token ids.

The tiny target is trained on it so that its greedy continuation is a learnable function of the
last *two* tokens: each pair ``(a, b)`` has one likely successor and one rare one, both drawn at
random, so the token after ``b`` differs with ``a``. A drafter that only sees the current token
cannot predict it; one that reads the target's aux hidden states (which encode ``a``) can. The
rare successor makes sampled text wander over every pair, so the target learns all of them and
its next-token distributions stay peaked everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LIKELY = 0.9  # probability of a pair's likely successor; the rare one gets the rest


@dataclass(frozen=True)
class PairProcess:
    alphabet: torch.Tensor  # [K] token ids the process emits
    successors: torch.Tensor  # [K, K, 2] alphabet positions: likely, rare successor of (a, b)

    @classmethod
    def random(cls, alphabet: torch.Tensor, generator: torch.Generator) -> "PairProcess":
        size = alphabet.numel()
        likely = torch.randint(0, size, (size, size), generator=generator)
        # rare = likely shifted by 1..K-1 (mod K): always a different token
        rare = (likely + torch.randint(1, size, (size, size), generator=generator)) % size
        return cls(alphabet, torch.stack([likely, rare], dim=-1))

    def sample(self, count: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """``[count, length]`` token ids: a random first pair, then the process."""
        size = self.alphabet.numel()
        positions = torch.empty(count, length, dtype=torch.long)
        positions[:, :2] = torch.randint(0, size, (count, 2), generator=generator)
        rare = torch.rand(count, length, generator=generator) >= LIKELY
        rows = torch.arange(count)
        for t in range(2, length):
            pick = self.successors[positions[:, t - 2], positions[:, t - 1]]
            positions[:, t] = pick[rows, rare[:, t].long()]
        return self.alphabet[positions]
