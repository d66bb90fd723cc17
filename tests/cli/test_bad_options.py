"""Every option's bad values end in a one-line error and a non-zero status, never a traceback."""

import pytest

from sglang_eagle_ext.cli import main


def outcome(argv, capsys):
    """(exit status, what was printed) of ``sglang-eagle argv``; any exception other than
    SystemExit fails the test."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err + printed.out
    return status, printed.err + printed.out


USAGE_ERRORS = [  # argparse's own checks: status 2, the option named
    (["eval", "--target", "t", "--draft", "d", "--num-steps", "0"], "--num-steps"),
    (["eval", "--target", "t", "--draft", "d", "--topk", "two"], "--topk"),
    (["eval", "--target", "t", "--draft", "d", "--temperature", "-1"], "--temperature"),
    (["eval", "--target", "t", "--draft", "d", "--aux-layers", "2,x"], "--aux-layers"),
    (["eval", "--target", "t", "--draft", "d", "--aux-layers", "2,2,3"], "--aux-layers"),
    (["eval", "--target", "t", "--draft", "d", "--prompts", "/nonexistent/prompts.txt"], "--prompts"),
    (["eval", "--target", "t", "--draft", "d", "--device", "tpu0"], "--device"),
    (["serve", "--target", "t", "--draft", "d", "--num-steps", "-3"], "--num-steps"),
    (["serve", "--target", "t", "--draft", "d", "--topk", "0"], "--topk"),
    (["demo", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["demo", "--device", "tpu"], "--device"),
    (["inspect"], "path"),
]


@pytest.mark.parametrize("argv, option", USAGE_ERRORS)
def test_usage_errors(argv, option, capsys):
    status, err = outcome(argv, capsys)
    assert status == 2 and option in err


def test_eval_values_that_do_not_fit_the_drafter(shared_target, shared_drafter, tmp_path, capsys):
    base = ["eval", "--target", shared_target, "--draft", shared_drafter, "--num-prompts", "1",
            "--max-new-tokens", "2"]
    status, err = outcome(base + ["--aux-layers", "2,4"], capsys)  # the drafter takes three
    assert status == 2 and "--aux-layers" in err and "3 aux hidden states" in err
    status, err = outcome(base + ["--compare-aux-layers", "2,4,99"], capsys)
    assert status == 2 and "--compare-aux-layers" in err and "0 to 8" in err
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    status, err = outcome(base + ["--prompts", str(empty)], capsys)
    assert status == 2 and "no prompts" in err


def test_missing_paths(tmp_path, capsys):
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text('{"num_hidden_layers": 12, "hidden_size": 64, "vocab_size": 512}')
    for argv in (["inspect", str(tmp_path / "nothing")],
                 ["serve", "--target", str(target), "--draft", str(tmp_path / "nothing"), "--print-only"],
                 ["eval", "--target", str(target), "--draft", str(tmp_path / "nothing")]):
        status, err = outcome(argv, capsys)
        assert status != 0 and "nothing" in err, (argv, err)
