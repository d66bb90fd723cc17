"""`sglang-eagle eval`: the distilled drafter against wrong aux taps and a shuffled vocab map."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from sglang_eagle_ext.cli import main

WRONG_TAPS = "1,3,4"  # the default taps (2, 4, 5) shifted down by one layer


@pytest.fixture(scope="module")
def wrong_map(shared_drafter, tmp_path_factory):
    """The shared drafter with its draft-to-target map permuted at random."""
    directory = str(tmp_path_factory.mktemp("eval") / "wrong_map")
    shutil.copytree(shared_drafter, directory)
    tensors = load_file(f"{directory}/model.safetensors")
    ids = torch.arange(tensors["d2t"].numel()) + tensors["d2t"]
    shuffled = ids[torch.randperm(ids.numel())]
    tensors["d2t"] = shuffled - torch.arange(ids.numel())
    save_file(tensors, f"{directory}/model.safetensors")
    return directory


def evaluate(capsys, target, draft, *extra):
    seed = str(int(torch.randint(1 << 20, ())))  # fresh prompts each run
    assert main(["eval", "--target", target, "--draft", draft, "--num-prompts", "3",
                 "--max-new-tokens", "32", "--topk", "2", "--seed", seed, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_right_taps_accept_and_compared_taps_get_their_own_rows(shared_target, shared_drafter,
                                                                capsys):
    # Shifted taps do not collapse on the tiny target (adjacent residual streams carry the same
    # token identity); only the comparison itself is checked for them.
    report = evaluate(capsys, shared_target, shared_drafter, "--compare-aux-layers", WRONG_TAPS)
    assert set(report["rows"]) == {"chain greedy", "chain sampled", "tree greedy", "tree sampled"}
    assert report["aux_indices"] == [2, 4, 5]
    assert report["compared"]["aux_indices"] == [1, 3, 4]
    assert set(report["compared"]["rows"]) == set(report["rows"])
    for row in ("chain greedy", "tree greedy"):
        assert report["rows"][row]["accept_length"] >= 1.8, (row, report)


def test_aux_override_reaches_the_capture(shared_target, shared_drafter, capsys):
    overridden = evaluate(capsys, shared_target, shared_drafter, "--aux-layers", WRONG_TAPS)
    assert overridden["aux_indices"] == [1, 3, 4] and "compared" not in overridden


def test_shuffled_vocab_map_collapses(shared_target, shared_drafter, wrong_map, capsys):
    shuffled = evaluate(capsys, shared_target, wrong_map)
    for row in ("chain greedy", "tree greedy"):
        assert shuffled["rows"][row]["accept_length"] < 1.1, (row, shuffled)


def test_table_and_failures(shared_target, shared_drafter, capsys, tmp_path):
    assert main(["eval", "--target", shared_target, "--draft", shared_drafter, "--num-prompts",
                 "1", "--max-new-tokens", "6", "--num-steps", "2",
                 "--compare-aux-layers", WRONG_TAPS]) == 0
    out = capsys.readouterr().out
    assert "accept length" in out and "tree sampled" in out
    assert "aux hidden-state indices [2, 4, 5]" in out and "aux hidden-state indices [1, 3, 4]" in out
    assert main(["eval", "--target", shared_target, "--draft", str(tmp_path)]) == 1
    assert "config.json" in capsys.readouterr().err
    for option in ("--aux-layers", "--compare-aux-layers"):
        assert main(["eval", "--target", shared_target, "--draft", shared_drafter, option,
                     "1,2,99"]) == 1
        assert "do not exist" in capsys.readouterr().err
