"""Random verify trees made the way SGLang's EAGLE draft loop makes them (tests and benchmarks).

:func:`random_draft_tree` replays ``select_top_k_tokens`` / ``organize_draft_results``
(SGLang ``spec_utils.py`` / ``eagle_utils.py``) on random draft distributions: every step expands
the k best paths by their k best tokens, the n-1 best-scoring nodes of all steps become the draft
tokens (sorted by flat id), and ``parent_list`` records whose children each block of k flat ids
holds. Quantised probabilities produce score ties and with them, as in SGLang, the occasional
tree whose selected node lacks its parent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class DraftTree:
    """Inputs of ``build_tree_kernel_efficient`` for ``bs`` requests (all on one device)."""

    bonus_tokens: torch.Tensor      # [bs] int64: the token the last verify emitted (tree root)
    parent_list: torch.Tensor       # [bs, k*(S-1)+1] int64 ([bs, 0] when S = 1)
    top_scores_index: torch.Tensor  # [bs, n-1] int64, ascending flat ids
    draft_tokens: torch.Tensor      # [bs, n-1] int64
    seq_lens: torch.Tensor          # [bs] int64
    topk: int
    steps: int
    num_draft_tokens: int


def _draft_probs(rows: int, vocab: int, topk: int, levels: Optional[int], gen: torch.Generator):
    probs = torch.softmax(3 * torch.randn(rows, vocab, generator=gen), dim=-1)
    if levels:  # coarse probabilities: many exact ties between paths
        probs = torch.round(probs * levels) / levels + 1e-3
    return torch.topk(probs, topk, dim=-1)


def random_draft_tree(bs: int, topk: int, steps: int, num_draft_tokens: int, *, vocab: int = 64,
                      max_seq_len: int = 64, tie_levels: Optional[int] = None,
                      generator: Optional[torch.Generator] = None,
                      device: torch.device | str = "cpu") -> DraftTree:
    """One draft round of ``steps`` steps with top-``topk`` expansion; ``num_draft_tokens`` = n
    (root + n-1 drafts) must satisfy ``n - 1 <= topk + (steps-1)*topk*topk``."""
    gen = generator or torch.Generator().manual_seed(0)
    k, n = topk, num_draft_tokens
    draft_nodes = k + (steps - 1) * k * k
    if not 1 <= n - 1 <= draft_nodes:
        raise ValueError(f"random_draft_tree: num_draft_tokens must be 2 to {draft_nodes + 1} (the root plus "
                         f"at most topk + (steps-1)*topk**2 drafts for topk={k}, steps={steps}); got {n}")
    if vocab < k:
        raise ValueError(f"random_draft_tree: vocab must be at least topk ({k}) to draw topk distinct "
                         f"tokens per step; got {vocab}")
    scores_per_step, tokens_per_step, parents_per_step = [], [], []
    topk_p, topk_index = _draft_probs(bs, vocab, k, tie_levels, gen)
    scores = topk_p
    scores_per_step.append(topk_p)
    tokens_per_step.append(topk_index)
    parents_per_step.append(torch.arange(-1, k).repeat(bs, 1))
    for i in range(1, steps):
        topk_p, topk_index = _draft_probs(bs * k, vocab, k, tie_levels, gen)
        expand_scores = scores[:, :, None] * topk_p.reshape(bs, k, k)
        scores, chosen = torch.topk(expand_scores.flatten(1), k, dim=-1)
        scores_per_step.append(expand_scores.flatten(1))
        tokens_per_step.append(topk_index.reshape(bs, k * k))
        parents_per_step.append(chosen + (k * k * (i - 1) + k))
    score_list = torch.cat(scores_per_step, dim=1)
    token_list = torch.cat(tokens_per_step, dim=1)
    top_scores_index = torch.sort(torch.topk(score_list, n - 1, dim=-1).indices).values
    draft_tokens = torch.gather(token_list, 1, top_scores_index)
    if steps > 1:
        parent_list = torch.cat(parents_per_step[:-1], dim=1)
    else:
        parent_list = torch.empty(bs, 0, dtype=torch.long)
    tree = DraftTree(
        bonus_tokens=torch.randint(0, vocab, (bs,), generator=gen),
        parent_list=parent_list,
        top_scores_index=top_scores_index,
        draft_tokens=draft_tokens,
        seq_lens=torch.randint(1, max_seq_len + 1, (bs,), generator=gen),
        topk=k, steps=steps, num_draft_tokens=n)
    for name in ("bonus_tokens", "parent_list", "top_scores_index", "draft_tokens", "seq_lens"):
        setattr(tree, name, getattr(tree, name).to(device))
    return tree


def orphan_some_nodes(tree: DraftTree, generator: torch.Generator) -> DraftTree:
    """Replace one selected flat id per request by an unselected one (kept ascending and unique),
    so that its children, if any, lose their parent: an invalid tree like those ties produce."""
    k, steps = tree.topk, tree.steps
    total = k + (steps - 1) * k * k
    selected = tree.top_scores_index.cpu().clone()
    for b in range(selected.shape[0]):
        unused = sorted(set(range(total)) - set(selected[b].tolist()))
        if not unused:
            continue
        victim = int(torch.randint(0, selected.shape[1], (1,), generator=generator))
        selected[b, victim] = unused[int(torch.randint(0, len(unused), (1,), generator=generator))]
        selected[b] = torch.sort(selected[b]).values
    tree.top_scores_index = selected.to(tree.top_scores_index.device)
    return tree
