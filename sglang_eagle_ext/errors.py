"""Problems found while reading a drafter: each names the file, the field, what was expected,
what was found and how to fix it. Readers collect all of them and raise once."""

from __future__ import annotations

from dataclasses import dataclass


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, in the plural unless it is one: "1 parameter", "7 parameters"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


@dataclass(frozen=True)
class Problem:
    file: str  # the file the fact was read from (or the checkpoint directory)
    field: str  # config key, tensor name or other locator inside the file
    message: str
    fix: str
    expected: str | None = None
    found: str | None = None

    def __str__(self) -> str:
        parts = [f"{self.file}: {self.field}: {self.message}"]
        if self.expected is not None or self.found is not None:
            parts.append(f"expected {self.expected}, found {self.found}")
        parts.append(f"fix: {self.fix}")
        return "\n    ".join(parts)


class DrafterError(ValueError):
    """A drafter checkpoint that must not be served; ``problems`` lists every reason."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        header = f"drafter checkpoint rejected ({counted(len(self.problems), 'problem')}):"
        super().__init__("\n  - ".join([header] + [str(p) for p in self.problems]))
