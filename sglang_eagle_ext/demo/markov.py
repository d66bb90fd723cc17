"""A sparse token process whose next token depends on the two tokens *before* the current one.

Token ``t + 1`` follows the pair ``(x[t-2], x[t-1])``: each pair has one likely successor (drawn
with probability ``likely``) and one rare one, both chosen at random; the current token ``x[t]``
plays no part. This is what makes the tiny target's aux layers matter. An EAGLE-3 drafter at
position ``i`` holds the target's hidden states at ``i`` and the token ``x[i+1]``, and predicts
``x[i+2]``, the successor of ``(x[i-1], x[i])``:
``x[i]`` is in every layer's residual stream (it is the position's own token), but ``x[i-1]``
reaches position ``i`` only through the target's attention, so only the layers after the one that
moves it carry it. For every ``x[i]`` the likely successors over the 16 (or K) possible ``x[i-1]``
are all different (a permutation), so without ``x[i-1]`` the next token is a uniform guess.

The rare successor makes sampled text wander over every pair, so the target learns all of them
and its next-token distributions stay peaked everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ORDER = 3  # tokens drawn at random before the process takes over (the rule looks 2 back)


@dataclass(frozen=True)
class LaggedPairProcess:
    alphabet: torch.Tensor  # [K] token ids the process emits
    # [K, K, 2] alphabet positions: the likely and the rare successor of (x[t-2], x[t-1])
    successors: torch.Tensor
    likely: float  # probability of a pair's likely successor; the rare one gets the rest

    @classmethod
    def random(cls, alphabet: torch.Tensor, generator: torch.Generator, likely: float) -> "LaggedPairProcess":
        size = alphabet.numel()
        # Column b (the later token of the pair) is a random permutation over the earlier token a.
        likely_next = torch.stack([torch.randperm(size, generator=generator) for _ in range(size)], 1)
        # rare_next = likely_next shifted by 1..K-1 (mod K): always a different token
        rare_next = (likely_next + torch.randint(1, size, (size, size), generator=generator)) % size
        return cls(alphabet, torch.stack([likely_next, rare_next], dim=-1), likely)

    def sample(self, count: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """``[count, length]`` token ids: ``ORDER`` random tokens, then the process."""
        size = self.alphabet.numel()
        positions = torch.empty(count, length, dtype=torch.long)
        positions[:, :ORDER] = torch.randint(0, size, (count, ORDER), generator=generator)
        rare = torch.rand(count, length, generator=generator) >= self.likely
        rows = torch.arange(count)
        for t in range(ORDER, length):
            pick = self.successors[positions[:, t - 3], positions[:, t - 2]]
            positions[:, t] = pick[rows, rare[:, t].long()]
        return self.alphabet[positions]
