"""Tree building: the Triton kernel against the pure-torch reference, on random draft rounds."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.kernels.tree_fixtures import draw_tree_shape

from sglang_eagle_ext.kernels import tree_build
from tests.kit import kernel_reference as reference
from tests.kit.draft_trees import orphan_some_nodes, random_draft_tree
from sglang_eagle_ext.kernels.tree_mask_modes import (
    FULL_MASK,
    QLEN_ONLY,
    QLEN_ONLY_BITPACKING,
    bitpacked_bytes_per_row,
)

FUZZ = settings(max_examples=300, deadline=None)


@st.composite
def draft_rounds(draw):
    topk, steps, n = draw_tree_shape(draw, max_topk=5, max_steps=5, max_n=40)
    mode = draw(st.sampled_from([FULL_MASK, QLEN_ONLY] + ([QLEN_ONLY_BITPACKING] if n <= 32 else [])))
    return dict(bs=draw(st.integers(1, 4)), topk=topk, steps=steps, n=n, mode=mode,
                ties=draw(st.sampled_from([None, 3, 20])), orphans=draw(st.booleans()),
                seed=draw(st.integers(0, 2**31 - 1)), byte_mask=draw(st.booleans()))


def _mask_buffer(mode, seq_lens, n, gen, byte_mask):
    bs = len(seq_lens)
    if mode == QLEN_ONLY_BITPACKING:
        dtype = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[bitpacked_bytes_per_row(n)]
        return torch.randint(0, 100, (n * bs,), generator=gen).to(dtype)  # garbage: every byte is written
    size = int(seq_lens.sum()) * n + n * n * bs if mode == FULL_MASK else n * n * bs
    mask = torch.rand(size, generator=gen) < 0.5  # random prefix: must stay untouched
    return mask.to(torch.uint8) if byte_mask else mask


def _run(fn, tree, mode, mask):
    bs, n = tree.top_scores_index.shape[0], tree.num_draft_tokens
    positions = torch.full((bs * n,), -7, dtype=torch.long)
    links = torch.full((3, bs, n), -9, dtype=torch.long)  # poisoned: every entry must be written
    if fn is reference.build_tree_reference:
        links.fill_(-1)
    fn(tree.parent_list, tree.top_scores_index, tree.seq_lens, mask, positions, links[0], links[1], links[2],
       tree.topk, tree.steps, n, mode)
    return mask, positions, links


@FUZZ
@given(draft_rounds())
def test_build_tree_matches_reference(case):
    gen = torch.Generator().manual_seed(case["seed"])
    tree = random_draft_tree(case["bs"], case["topk"], case["steps"], case["n"], vocab=16,
                             tie_levels=case["ties"], generator=gen)
    if case["orphans"]:
        orphan_some_nodes(tree, gen)
    mask = _mask_buffer(case["mode"], tree.seq_lens, case["n"], gen, case["byte_mask"])
    ours = _run(tree_build.build_tree_kernel_efficient, tree, case["mode"], mask.clone())
    expected = _run(reference.build_tree_reference, tree, case["mode"], mask.clone())
    for got, want in zip(ours, expected):
        assert torch.equal(got, want)


@settings(max_examples=60, deadline=None)
@given(draft_rounds())
def test_build_eagle_tree_wrapper_matches_sglang_wrapper_semantics(case):
    """The one-launch wrapper returns what SGLang's wrapper returns: a mask pre-filled with True
    (FULL_MASK prefix included), -1 links where there is no child or sibling, the token list."""
    gen = torch.Generator().manual_seed(case["seed"])
    tree = random_draft_tree(case["bs"], case["topk"], case["steps"], case["n"], vocab=16, generator=gen)
    n, mode = case["n"], case["mode"]
    mask, positions, ri, nt, ns, tokens = tree_build.build_eagle_tree(
        tree.bonus_tokens, tree.parent_list, tree.top_scores_index, tree.draft_tokens, tree.seq_lens,
        int(tree.seq_lens.sum()), tree.topk, tree.steps, n, tree_mask_mode=mode)
    if mode == QLEN_ONLY_BITPACKING:
        expected_mask = torch.zeros_like(mask)
    else:
        expected_mask = torch.ones_like(mask)
    expected = _run(reference.build_tree_reference, tree, mode, expected_mask)
    assert torch.equal(mask, expected[0]) and torch.equal(positions, expected[1])
    for got, want in zip((ri, nt, ns), expected[2]):
        assert torch.equal(got, want)
    assert torch.equal(tokens, torch.cat([tree.bonus_tokens[:, None], tree.draft_tokens], 1).flatten())


def test_known_tree():
    """A hand-checked tree: root -> {1, 2}, 1 -> {3}, 3 -> {4}; node 5's parent is not selected."""
    topk, steps, n = 2, 3, 6
    # flat ids: level 1 = {0, 1}; level 2 = 2..5 (children of parent_list[1..2]); level 3 = 6..9
    parent_list = torch.tensor([[-1, 0, 1, 2, 5]])
    selected = torch.tensor([[0, 1, 2, 6, 8]])  # nodes 1..5: flat 0 (root child), 1 (root child),
    # 2 (child of flat 0 = node 1), 6 (child of flat 2 = node 3), 8 (child of flat 5: not selected)
    seq_lens = torch.tensor([3])
    mask = torch.zeros(n * n, dtype=torch.bool)
    positions = torch.zeros(n, dtype=torch.long)
    links = torch.full((3, 1, n), -9, dtype=torch.long)
    tree_build.build_tree_kernel_efficient(parent_list, selected, seq_lens, mask, positions, links[0], links[1],
                                           links[2], topk, steps, n, QLEN_ONLY)
    assert links[1, 0].tolist() == [1, 3, -1, 4, -1, -1]
    assert links[2, 0].tolist() == [-1, 2, -1, -1, -1, -1]
    assert positions.tolist() == [3, 4, 4, 5, 6, 4]
    rows = mask.reshape(n, n).int().tolist()
    assert rows == [[1, 0, 0, 0, 0, 0],
                    [1, 1, 0, 0, 0, 0],
                    [1, 0, 1, 0, 0, 0],
                    [1, 1, 0, 1, 0, 0],
                    [1, 1, 0, 1, 1, 0],
                    [1, 0, 0, 0, 0, 1]]


def test_bitpacking_refuses_more_than_32_tokens():
    with pytest.raises(ValueError):
        bitpacked_bytes_per_row(33)


@pytest.mark.parametrize("topk, steps, n, vocab, complaint", [
    (2, 2, 8, 16, r"num_draft_tokens must be 2 to 7 .*topk=2, steps=2\); got 8"),
    (2, 2, 1, 16, r"num_draft_tokens must be 2 to 7 .*got 1"),
    (4, 1, 3, 3, r"vocab must be at least topk \(4\).*got 3"),
])
def test_random_draft_tree_refuses_impossible_rounds(topk, steps, n, vocab, complaint):
    with pytest.raises(ValueError, match=complaint):
        random_draft_tree(1, topk, steps, n, vocab=vocab, generator=torch.Generator().manual_seed(0))
