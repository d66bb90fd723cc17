"""Argument types shared by the subcommands: each rejects a bad value with argparse's own usage
error (exit status 2, one line, no traceback) naming the option and what it takes."""

from __future__ import annotations

import argparse
import os
import re


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number >= 0")
    return value


def layer_indices(text: str) -> tuple[int, ...]:
    """Comma-separated distinct non-negative integers, e.g. ``2,4,5``."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers such as 2,4,5") from None
    if min(values) < 0 or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r}: indices must be distinct and >= 0")
    return values


def torch_device(text: str) -> str:
    """A device torch can name (``cpu``, ``cuda``, ``cuda:1``); availability is checked at run time."""
    import torch

    try:
        torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch device (cpu, cuda, cuda:1)") from None
    return text


def device_problem(device: str) -> str | None:
    """Why ``device`` cannot be used here, or None."""
    import torch

    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        return f"{device}: no CUDA GPU is visible to torch (use --device cpu)"
    return None


SERVING_DEVICES = ("auto", "cpu", "cuda")


def serving_device(requested: str) -> str:
    """One of :data:`SERVING_DEVICES` resolved: ``auto`` is the GPU when torch sees one, else the CPU."""
    import torch

    return requested if requested != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")


def existing_file(text: str) -> str:
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a readable file")
    return text


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the descriptions' paragraphs and shows each option's default (when it has one)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text \
                and action.option_strings:
            text += " (default: %(default)s)"
        return text


def plain_text(docstring: str) -> str:
    """A module docstring without its reST markup, for ``--help``."""
    text = re.sub(r":\w+:`~?([\w.]+)`", lambda match: match.group(1).rsplit(".", 1)[-1], docstring)
    return text.replace("``", "").strip()
