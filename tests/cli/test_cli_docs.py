"""Every argument of every `sglang-eagle` subcommand is documented where the subcommand is: in its
section of docs/cli.md, and in any synopsis of it written elsewhere in the README or docs/ (the
README's `serve` synopsis once left out `--stock-check`)."""

import re

import pytest

from sglang_eagle_ext.cli import COMMANDS, subcommand_parsers
from tests.script_module import ROOT

CLI_PAGE = ROOT / "docs" / "cli.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.fixture(scope="module")
def arguments() -> dict[str, list[str]]:
    """Per subcommand, how each argument is named: its option strings (``--help`` aside), or a
    positional's value name. (argparse lists a parser's actions only in ``_actions``.)"""
    named = {}
    for command, parser in subcommand_parsers().items():
        named[command] = [name for action in parser._actions if "--help" not in action.option_strings
                          for name in (action.option_strings or [action.metavar or action.dest.upper()])]
    return named


def section(text: str, command: str) -> str:
    """The part of docs/cli.md under ``## sglang-eagle COMMAND``, up to the next section."""
    found = re.search(rf"^## sglang-eagle {re.escape(command)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert found, f"docs/cli.md has no section '## sglang-eagle {command}'"
    return found.group(1)


def synopses(text: str, command: str) -> list[str]:
    """Every synopsis of ``sglang-eagle COMMAND`` in ``text``: the command followed, in the same code
    span or block, by an optional argument in brackets."""
    found = []
    for match in re.finditer(rf"sglang-eagle {re.escape(command)}\b", text):
        rest = text[match.end():]
        end = min(position for position in (rest.find("`"), rest.find("\n\n"), len(rest)) if position >= 0)
        if "[-" in rest[:end]:
            found.append(match.group(0) + rest[:end])
    return found


def missing(synopsis: str, names: list[str]) -> list[str]:
    return [name for name in names if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", synopsis)]


def test_every_subcommand_has_its_section_with_every_argument(arguments):
    text = CLI_PAGE.read_text(encoding="utf-8")
    assert set(arguments) == set(COMMANDS)
    for command, names in arguments.items():
        assert not missing(section(text, command), names), (command, missing(section(text, command), names))


def test_every_synopsis_lists_every_argument(arguments):
    written = 0
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for command, names in arguments.items():
            for synopsis in synopses(text, command):
                written += 1
                assert not missing(synopsis, names), f"{page.name}: {synopsis!r} leaves out {missing(synopsis, names)}"
    assert written >= len(COMMANDS)  # docs/cli.md's generated synopses at least


def test_a_synopsis_without_an_option_is_caught(arguments):
    """The README's serve synopsis before docs/cli.md: every option but --algorithm, --adaptive (newer) and
    --stock-check."""
    old = ("`sglang-eagle serve --target T --draft D [--num-steps N] [--topk K] [--num-draft-tokens M]\n"
           "[--device auto|cpu|cuda] [--cpu-kv-tokens N] [--export-dir DIR] [--print-only]\n"
           "[-- SGLANG ARGS]` launches `sglang serve`")
    [synopsis] = synopses(old, "serve")
    assert missing(synopsis, arguments["serve"]) == ["--algorithm", "--adaptive", "--stock-check", "SGLANG_ARGS"]


def test_the_readme_points_to_the_options():
    assert "(docs/cli.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
