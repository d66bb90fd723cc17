"""`sglang-eagle eval`: the distilled drafter against wrong aux taps and a shuffled vocab map."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from sglang_eagle_ext.cli import main

# The drafter's taps are hidden-state indices (2, 4, 5); ModelOpt / NeMo write the same taps as
# layer-output ids [1, 3, 4]. Reading those ids as indices taps every layer one too shallow.
WRONG_TAPS = "1,3,4"


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


def evaluate(capsys, target, draft, *extra, prompts=3, tokens=32):
    seed = str(int(torch.randint(1 << 20, ())))  # fresh prompts each run
    assert main(["eval", "--target", target, "--draft", draft, "--num-prompts", str(prompts),
                 "--max-new-tokens", str(tokens), "--topk", "2", "--seed", seed, "--json",
                 *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_wrong_taps_collapse_next_to_the_right_ones(shared_target, shared_drafter, capsys):
    """The target's previous token reaches only hidden states after its context layer (index 5
    of 8), so taps one layer too shallow leave the drafter guessing; its own taps do not."""
    report = evaluate(capsys, shared_target, shared_drafter, "--compare-aux-layers", WRONG_TAPS,
                      prompts=4, tokens=48)
    assert set(report["rows"]) == {"chain greedy", "chain sampled", "tree greedy", "tree sampled"}
    assert report["aux_indices"] == [2, 4, 5]
    assert report["compared"]["aux_indices"] == [1, 3, 4]
    right = {name: row["accept_length"] for name, row in report["rows"].items()}
    wrong = {name: row["accept_length"] for name, row in report["compared"]["rows"].items()}
    assert set(wrong) == set(right)
    for row in ("chain greedy", "tree greedy"):  # about 2.0-2.9 over fresh prompt sets
        assert right[row] >= 1.8, (row, right, wrong)
    for row in right:  # wrong: about 1.09-1.31; gains beyond one token 5-20 times smaller
        assert wrong[row] < 1.4 and right[row] - 1 >= 3 * (wrong[row] - 1), (row, right, wrong)


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
    header = next(line for line in out.splitlines() if line.startswith("drafting"))
    assert header.index("[2, 4, 5]") < header.index("[1, 3, 4]")  # own taps first, one table
    assert "tokens gained per verify step" in out
    assert main(["eval", "--target", shared_target, "--draft", str(tmp_path)]) == 1
    assert "config.json" in capsys.readouterr().err


def test_jsonl_prompts_keep_their_line_breaks(shared_target, tmp_path):
    from transformers import AutoTokenizer

    from sglang_eagle_ext.cli.eval_cmd import _prompts, configure

    texts = ["first line\nsecond line of the same prompt", "another prompt"]
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": t, "id": i}) + "\n" for i, t in enumerate(texts)))
    import argparse

    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["--target", shared_target, "--draft", "x", "--prompts", str(path)])
    tokenizer = AutoTokenizer.from_pretrained(shared_target)
    assert _prompts(args, tokenizer) == [tokenizer(t).input_ids for t in texts]


def test_chat_prompts_are_formatted_by_the_target_template(smollm2_target, tmp_path):
    """MT-bench's first turns as SmolLM2 reads them: its own ChatML template, ready for the answer."""
    import argparse

    from transformers import AutoTokenizer

    from sglang_eagle_ext.cli.eval_cmd import _prompts, configure

    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "Name a prime number.\nOnly one."}) + "\n")
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["--target", str(smollm2_target), "--draft", "x", "--prompts", str(path), "--chat"])
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_target))
    (ids,) = _prompts(args, tokenizer)
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_start|>user\nName a prime number.\nOnly one.<|im_end|>\n<|im_start|>assistant\n")


def test_bad_jsonl_and_chat_without_template_are_one_line_errors(shared_target, shared_drafter, tmp_path, capsys):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"text": "no prompt key"}\n')
    assert main(["eval", "--target", shared_target, "--draft", shared_drafter, "--prompts", str(path)]) == 2
    assert "line 1 has no \"prompt\" string" in capsys.readouterr().err
    plain = tmp_path / "prompts.txt"
    plain.write_text("a prompt of several words\n")
    assert main(["eval", "--target", shared_target, "--draft", shared_drafter, "--prompts", str(plain),
                 "--chat"]) == 2
    assert "--chat: the target's tokenizer has no chat template" in capsys.readouterr().err
