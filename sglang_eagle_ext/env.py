"""The package's environment switches, all read here so that every one takes the same values.

A boolean switch (:func:`flag`) takes ``1``/``0``, ``true``/``false``, ``on``/``off``,
``yes``/``no``; a switch naming an option (:func:`choice`) takes one of its options. Case and
surrounding whitespace are ignored; unset or empty means the switch's default. Any other value
raises :class:`SwitchError` naming the variable, the value and what it takes: a misspelt switch
must not silently serve something the user did not ask for.

``TRITON_INTERPRET`` is Triton's variable, not ours: the package reads it through Triton
(``triton.knobs.runtime.interpret``) so that it always agrees with Triton's own spellings.

Standard library only: the SGLang plugin reads its switch before it imports anything else.
"""

from __future__ import annotations

import os
from typing import TypeVar

ON = ("1", "true", "on", "yes")
OFF = ("0", "false", "off", "no")
SPELLINGS = "1/0, true/false, on/off, yes/no"

Default = TypeVar("Default")


class SwitchError(ValueError):
    """An environment switch set to a value it does not take."""


def _given(name: str) -> str:
    return os.environ.get(name, "").strip().lower()


def flag(name: str, default: Default) -> bool | Default:
    """The boolean switch ``name``; ``default`` when it is unset or empty (``None`` lets a caller
    tell "not set" from "set off")."""
    value = _given(name)
    if not value:
        return default
    if value in ON or value in OFF:
        return value in ON
    raise SwitchError(f"{name}={os.environ[name]!r}: expected one of {SPELLINGS} (any case), or unset")


def choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """The option the switch ``name`` selects among ``choices``; ``default`` when it is unset or empty."""
    value = _given(name)
    if not value:
        return default
    if value not in choices:
        raise SwitchError(f"{name}={os.environ[name]!r}: expected one of {', '.join(choices)} (any case), or unset")
    return value


def text(name: str) -> str | None:
    """The switch ``name``'s value as given (a path, say: case kept), surrounding whitespace removed; ``None``
    when it is unset or empty."""
    return os.environ.get(name, "").strip() or None
