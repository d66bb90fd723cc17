"""Helpers for the kernel tests: built verify trees and outputs poisoned before every call."""

import torch
from hypothesis import strategies as st

from sglang_eagle_ext.kernels import tree_build
from tests.kit.draft_trees import orphan_some_nodes, random_draft_tree


def draw_tree_shape(draw, *, max_topk: int, max_steps: int, max_n: int):
    """(topk, steps, n) of a draft round: n from 2 up to one more than the tree's draft nodes
    (the root plus ``topk + (steps - 1) * topk**2`` candidates) or ``max_n + 1``."""
    topk = draw(st.integers(1, max_topk))
    steps = draw(st.integers(1, max_steps))
    return topk, steps, draw(st.integers(2, min(topk + (steps - 1) * topk * topk, max_n) + 1))


def built_tree(seed: int, bs: int, topk: int, steps: int, n: int, *, vocab: int, orphans: bool = False):
    """Links and candidates of a random draft round, built by our build kernel (itself checked
    against the reference in test_tree_build)."""
    gen = torch.Generator().manual_seed(seed)
    tree = random_draft_tree(bs, topk, steps, n, vocab=vocab, tie_levels=8 if seed % 3 == 0 else None,
                             generator=gen)
    if orphans:
        orphan_some_nodes(tree, gen)
    _, _, ri, nt, ns, tokens = tree_build.build_eagle_tree(
        tree.bonus_tokens, tree.parent_list, tree.top_scores_index, tree.draft_tokens, tree.seq_lens,
        int(tree.seq_lens.sum()), topk, steps, n)
    return tokens.reshape(bs, n), ri, nt, ns, gen


def favour_children(logits: torch.Tensor, candidates, first_child, gen, boost: float):
    """Raise each node's first-child token in the node's row (w.p. 3/4), so paths get long."""
    bs, n = candidates.shape
    child_token = torch.where(first_child >= 0, torch.gather(candidates, 1, first_child.clamp(min=0)), 0)
    hit = (torch.rand(bs * n, generator=gen) < 0.75).float() * boost
    logits[torch.arange(bs * n), child_token.reshape(-1)] += hit
    return logits


def poisoned_outputs(bs: int, n: int, steps: int):
    """predicts / accept_index / accept_token_num as SGLang passes them, predicts poisoned."""
    return (torch.full((bs * n,), -77, dtype=torch.int32),
            torch.full((bs, steps + 1), -1, dtype=torch.int32),
            torch.full((bs,), -55, dtype=torch.int32))


def assert_same(outputs, expected):
    for got, want in zip(outputs, expected):
        assert torch.equal(got, want), (got, want)


def one_child_round(child_prob: float, coin: float, threshold_single: float):
    """A root with one child (token 1) whose target probability is ``child_prob`` (exact in
    float32), the root's coin ``coin``: what SGLang's two acceptance tests decide differently."""
    probs = torch.tensor([[[1.0 - child_prob, child_prob, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]]])
    tree = (torch.tensor([[3, 1]]), torch.tensor([[0, 1]]), torch.tensor([[1, -1]]), torch.tensor([[-1, -1]]),
            torch.tensor([[coin, 0.5]]), torch.tensor([0.1]))
    return tree, probs, (threshold_single, 1.0)
