"""Write the README's "Drafter layouts" table from the declared producer layouts.

The table is generated from ``sglang_eagle_ext/testing/producer_layouts.py`` (each layout, its
verdict and the producer code it was read from) and ``testing/drafter_configs/SOURCES.md`` (the
upstream config each one starts from), and replaces what lies between the README's markers::

    python scripts/layouts_table.py           # rewrite README.md
    python scripts/layouts_table.py --check   # exit 1 when README.md is not the generated one

``tests/drafter/test_producer_layouts.py`` runs the check, so the table cannot drift from the
layouts the tests verify.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

BEGIN, END = "<!-- layouts:begin -->", "<!-- layouts:end -->"
README = Path(__file__).resolve().parent.parent / "README.md"


def with_table(readme: str) -> str:
    """``readme`` with the generated table between the markers (a ValueError naming the markers
    when they are missing)."""
    from sglang_eagle_ext.testing.producer_layouts import markdown_table

    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md needs the markers {BEGIN} and {END} (in that order) around the table")
    return readme[: start + len(BEGIN)] + "\n\n" + markdown_table() + "\n" + readme[end:]


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` in one step, so a reader never sees half a README."""
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether README.md is current")
    args = parser.parse_args(argv)
    current = README.read_text(encoding="utf-8")
    try:
        generated = with_table(current)
    except ValueError as error:
        print(f"{README}: {error}", file=sys.stderr)
        return 2
    if args.check:
        if generated != current:
            print(f"{README}: the drafter layouts table is out of date; run python scripts/layouts_table.py",
                  file=sys.stderr)
            return 1
        return 0
    if generated != current:
        write_atomically(README, generated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
