"""Offline speculative decoding: how many tokens a drafter gets accepted per verify step.

The loop follows SGLang's EAGLE-3 worker step for step, with the target in HF transformers and
the drafter in :mod:`sglang_eagle_ext.reference`:

1. the drafter extends over the committed tokens, pairing token ``t + 1`` with the target's aux
   hidden states at ``t``;
2. it drafts a tree like ``select_top_k_tokens`` / ``organize_draft_results``: the top ``topk``
   tokens, then ``num_steps - 1`` expansions of the ``topk`` best beams by cumulative
   probability, keeping every candidate; the ``num_draft_tokens - 1`` best candidates form the
   tree (``topk = 1`` is a chain);
3. the target verifies: at each node it draws its own next token (argmax, or a sample at
   ``temperature``) and descends into the child holding that token; the first miss ends the step
   and the drawn token is the bonus. For sampling this equals SGLang's target-only tree sampling,
   since deterministic drafts accept a token with exactly the target's probability of drawing it.

The target only ever runs on committed tokens (one forward per accepted token plus the root), so
its KV cache is never rolled back; attention along the accepted path is what tree attention
computes for it. Output is therefore exactly what the target alone would produce (greedy) or a
sample from the target's own distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sglang_eagle_ext.reference.capture import CapturingTarget
from sglang_eagle_ext.reference.drafter import DraftCache, DraftOutput, ReferenceDrafter


@dataclass(frozen=True)
class DraftSettings:
    num_steps: int = 3
    topk: int = 1
    num_draft_tokens: int | None = None  # default: num_steps + 1 for a chain, else topk * num_steps + 1
    temperature: float = 0.0  # 0: greedy

    def __post_init__(self):
        if self.num_steps < 1 or self.topk < 1:
            raise ValueError("num_steps and topk must be at least 1")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.num_draft_tokens is not None and not 2 <= self.num_draft_tokens <= self.max_nodes + 1:
            raise ValueError(f"num_draft_tokens must be in [2, {self.max_nodes + 1}] for "
                             f"num_steps={self.num_steps}, topk={self.topk}")

    @property
    def max_nodes(self) -> int:
        return self.topk + (self.num_steps - 1) * self.topk * self.topk

    @property
    def tree_size(self) -> int:
        """Drafted tokens per verify step (SGLang's num_draft_tokens minus the root)."""
        if self.num_draft_tokens is not None:
            return self.num_draft_tokens - 1
        return self.num_steps if self.topk == 1 else self.topk * self.num_steps


@dataclass
class DraftTree:
    tokens: list[int] = field(default_factory=list)  # target ids of the nodes
    parents: list[int] = field(default_factory=list)  # -1 = the root (last committed token)

    def child(self, parent: int, token: int) -> int | None:
        for node, (t, p) in enumerate(zip(self.tokens, self.parents)):
            if p == parent and t == token:
                return node
        return None


@dataclass
class Candidate:
    score: float
    draft_id: int
    parent: int  # index into the candidate list, -1 = root
    order: int  # creation order: breaks score ties parent-first, like a stable sort


def draft_tree(drafter: ReferenceDrafter, cache: DraftCache, last: DraftOutput,
               settings: DraftSettings) -> DraftTree:
    """Draft from the state after an extend (``last`` = its final position); the cache is
    returned to its length on entry."""
    committed = len(cache)
    device = last.logits.device
    probs = last.logits[0, -1].float().softmax(-1)
    top_p, top_i = probs.topk(settings.topk)
    candidates = [Candidate(float(p), int(i), -1, n) for n, (p, i) in enumerate(zip(top_p, top_i))]
    beams = list(range(len(candidates)))
    beam_hidden = last.carried[0, -1:].expand(len(beams), -1)
    slot_of: dict[int, int] = {}  # candidate -> cache slot after it went through the drafter
    for step in range(1, settings.num_steps):
        base = len(cache)
        attend = torch.zeros(len(beams), base + len(beams), dtype=torch.bool, device=device)
        attend[:, :committed] = True
        for row, beam in enumerate(beams):
            attend[row, base + row] = True
            ancestor = candidates[beam].parent
            while ancestor >= 0:
                attend[row, slot_of[ancestor]] = True
                ancestor = candidates[ancestor].parent
            slot_of[beam] = base + row
        # a drafted token goes back in as its target id (SGLang maps it through hot_token_id first)
        ids = drafter.to_target_ids(torch.tensor([[candidates[b].draft_id for b in beams]], device=device))
        positions = torch.full((len(beams),), committed + step - 1, device=device)
        out = drafter(ids, positions, carried=beam_hidden[None], cache=cache, attend=attend)
        step_p, step_i = out.logits[0].float().softmax(-1).topk(settings.topk, dim=-1)
        expanded = []
        for row, beam in enumerate(beams):
            for p, i in zip(step_p[row], step_i[row]):
                candidates.append(Candidate(candidates[beam].score * float(p), int(i), beam,
                                            len(candidates)))
                expanded.append((len(candidates) - 1, row))
        best = sorted(expanded, key=lambda e: (-candidates[e[0]].score, e[0]))[:settings.topk]
        beams = [c for c, _ in best]
        beam_hidden = out.carried[0, [row for _, row in best]]
    cache.crop(committed)

    chosen = sorted(candidates, key=lambda c: (-c.score, c.order))[:settings.tree_size]
    chosen_orders = {c.order for c in chosen}
    index_of = {}
    tree = DraftTree()
    target_ids = drafter.to_target_ids(torch.tensor([c.draft_id for c in candidates], device=device))
    for c in sorted(chosen, key=lambda c: c.order):  # parents were created before children
        if c.parent >= 0 and c.parent not in chosen_orders:
            continue  # unreachable without its parent (only possible on exact score ties)
        index_of[c.order] = len(tree.tokens)
        tree.tokens.append(int(target_ids[c.order]))
        tree.parents.append(-1 if c.parent < 0 else index_of[c.parent])
    return tree


@dataclass
class SequenceResult:
    prompt: list[int]
    output: list[int]
    accept_lengths: list[int]  # tokens emitted per verify step (accepted drafts + 1)


def _draw(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    if temperature == 0:
        return int(logits.argmax())
    probs = (logits.double() / temperature).softmax(-1)
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))


@torch.no_grad()
def speculative_generate(target: CapturingTarget, drafter: ReferenceDrafter, prompt: list[int],
                         max_new_tokens: int, settings: DraftSettings,
                         generator: torch.Generator | None = None) -> SequenceResult:
    """Generate ``max_new_tokens`` (or slightly more: the last step is not cut) with drafting."""
    device = next(drafter.parameters()).device
    dtype = next(drafter.parameters()).dtype
    ids = torch.tensor([prompt], device=device)
    step = target(ids, use_cache=True)
    past = step.past_key_values
    output = [_draw(step.logits[0, -1], settings.temperature, generator)]
    cache = DraftCache()
    last = drafter(torch.tensor([prompt[1:] + output], device=device),
                   torch.arange(len(prompt), device=device), aux=step.aux.to(dtype), cache=cache)
    accept_lengths = []
    while len(output) < max_new_tokens:
        tree = draft_tree(drafter, cache, last, settings)
        node, emitted, aux = -1, [], []
        token = output[-1]
        while True:
            step = target(torch.tensor([[token]], device=device), past_key_values=past,
                          use_cache=True)
            past = step.past_key_values
            aux.append(step.aux[0, 0])
            token = _draw(step.logits[0, -1], settings.temperature, generator)
            emitted.append(token)
            node = tree.child(node, token)
            if node is None:
                break
        accept_lengths.append(len(emitted))
        output += emitted
        position = len(cache)
        last = drafter(torch.tensor([emitted], device=device),
                       torch.arange(position, position + len(emitted), device=device),
                       aux=torch.stack(aux)[None].to(dtype), cache=cache)
    return SequenceResult(prompt=list(prompt), output=output, accept_lengths=accept_lengths)


def mean_accept_length(results: list[SequenceResult]) -> float:
    """Tokens per verify step over all steps of all sequences (SGLang's spec_accept_length)."""
    steps = sum(len(r.accept_lengths) for r in results)
    return sum(sum(r.accept_lengths) for r in results) / max(steps, 1)
