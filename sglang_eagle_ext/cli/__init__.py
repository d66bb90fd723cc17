"""`sglang-eagle` command line: one subcommand per module.

Building the parser imports every subcommand's module (its docstring and options are the help),
so even ``--help`` imports what those modules import at module level, torch included."""

from __future__ import annotations

import argparse
import importlib
import sys

from sglang_eagle_ext.cli.options import HelpFormatter, plain_text

# subcommand -> module; each module defines `configure(parser)` and `run(args) -> int`.
COMMANDS = {
    "inspect": "sglang_eagle_ext.cli.inspect_cmd",
    "serve": "sglang_eagle_ext.cli.serve_cmd",
    "eval": "sglang_eagle_ext.cli.eval_cmd",
    "demo": "sglang_eagle_ext.demo.run",
    "prepare-target": "sglang_eagle_ext.cli.prepare_target_cmd",
}


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser by name, as ``sglang-eagle`` builds it (``docs/cli.md`` documents
    their options from these)."""
    return dict(_build()[1].choices)


def _build():
    """The parser and its subparsers action (whose ``choices`` maps each subcommand to its parser)."""
    parser = argparse.ArgumentParser(
        prog="sglang-eagle",
        description="EAGLE-3 drafters for stock SGLang: inspect, serve, evaluate, demo, prepare a real target.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        description = plain_text(module.__doc__)
        sub = subparsers.add_parser(name, help=description.splitlines()[0], description=description,
                                    formatter_class=HelpFormatter)
        module.configure(sub)
        sub.set_defaults(_run=module.run)
    return parser, subparsers


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args._run(args)


if __name__ == "__main__":
    sys.exit(main())
