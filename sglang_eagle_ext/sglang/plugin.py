"""SGLang plugin entry point: makes ``--speculative-algorithm EAGLE3`` serve drafts with our class.

Activated in every SGLang process (launcher, schedulers) by the ``sglang.srt.plugins`` entry
point (SGLang >= 0.5.11), or by ``SGLANG_EXTERNAL_MODEL_PACKAGE=sglang_eagle_ext.sglang.models``
as a fallback. ``SGLANG_EAGLE_EXT=0`` turns it off (stock SGLang then serves the draft).

SGLang logs and swallows any ``Exception`` a plugin raises, then silently serves the built-in
class; a failure here therefore raises :class:`PluginActivationError`, which is not an
``Exception`` and stops the process with the original error attached; so does a switch set to a
value it does not take (:mod:`sglang_eagle_ext.env`), with a one-line message, as does a launch
the package cannot serve as asked (:func:`not_started`: the adaptive set's tree, checked in the
main process). This module imports only the standard library (and :mod:`sglang_eagle_ext.env`,
which does too) at import time so that the entry point itself always loads.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING

from sglang_eagle_ext import env

if TYPE_CHECKING:
    from packaging.version import Version

SWITCH = "SGLANG_EAGLE_EXT"  # off ("0", "false", "off", "no") turns the plugin off

_activation: str | None = None  # the log line of this process's activation


class PluginActivationError(SystemExit):
    """Our code failed to import or patch: the server must stop rather than silently serve the
    built-in class. A ``SystemExit`` because SGLang's plugin loader catches ``Exception``."""


def enabled() -> bool:
    return env.flag(SWITCH, True)


# The bindings wait for SGLang's scheduler module (:data:`~.compat.patch.SCHEDULER_MODULE`). Plugins
# are loaded from the engine and scheduler modules, so they are normally bound during activation;
# bound later, they log their own line.
_BOUND_LATER = "tree kernels and verify bound when SGLang's scheduler loads (logged then)"
MODEL_MODULE = "sglang_eagle_ext.sglang.model"
MODEL_CLASS = "LlamaForCausalLMEagle3"


def _register(registry_module) -> None:
    """Runs when SGLang imports its model registry: our class under the built-in's name. Set in
    the registry dict explicitly: it keeps the classes it imported, whatever module attributes
    are patched later."""
    from sglang_eagle_ext.drafter.spec import SERVED_ARCHITECTURE

    try:
        model_class = getattr(importlib.import_module(MODEL_MODULE), MODEL_CLASS)
    except Exception as exc:
        raise RuntimeError(f"sglang-eagle-ext: cannot import {MODEL_MODULE} ({type(exc).__name__}: "
                           f"{exc}); refusing to let SGLang fall back to its built-in EAGLE3 class "
                           f"(set {SWITCH}=0 to serve with stock SGLang)") from exc
    registry_module.ModelRegistry.models[SERVED_ARCHITECTURE] = model_class


def activate() -> str:
    """Register our class and arm the worker patches in this process (idempotent).

    Returns the one log line that says what serves EAGLE3 drafts here.
    """
    global _activation
    if _activation is not None:
        return _activation
    try:
        on = enabled()
    except env.SwitchError as exc:
        raise PluginActivationError(_bad_switch(exc)) from exc
    if not on:
        _activation = f"sglang-eagle-ext: disabled by {SWITCH}=0; SGLang's built-in EAGLE3 class serves drafts"
        _log(_activation)
        return _activation
    try:
        from sglang_eagle_ext.sglang import compat
        from sglang_eagle_ext.sglang.compat.patch import after_import

        release = compat.installed_release()
        bound: list[str] = []
        patches = arm(release, bound)
        after_import("sglang.srt.models.registry", _register)
        bindings = "; ".join(bound) if len(bound) == len(compat.BINDINGS) else _BOUND_LATER
    except env.SwitchError as exc:
        raise PluginActivationError(_bad_switch(exc)) from exc
    except BaseException as exc:  # noqa: BLE001 - re-raised as a process-stopping error
        raise PluginActivationError(
            f"sglang-eagle-ext failed to activate ({type(exc).__name__}: {exc}); refusing to let "
            f"SGLang fall back to its built-in EAGLE3 class. Fix the error above, or set "
            f"{SWITCH}=0 to serve with stock SGLang.") from exc
    untested = "" if release in compat.SUPPORTED else f" (untested: supported {compat.SUPPORTED})"
    _activation = (f"sglang-eagle-ext: EAGLE3 drafts served by {MODEL_MODULE}.{MODEL_CLASS} on SGLang "
                   f"{release}{untested} (pid {os.getpid()}); patches: {', '.join(patches)}; {bindings}")
    _log(_activation)
    return _activation


def arm(release: Version, bound: list[str]) -> list[str]:
    """Schedule every patch of the table (:data:`compat.PATCHES`) that ``release`` needs, each
    applied when SGLang imports its module; return the fixes' names for the log line. Each
    binding's switch is read now; once it is applied, its phrase of the log line joins ``bound``.
    A release older than :data:`compat.SUPPORTED` is refused; a newer one gets the newest
    release's patches, whose checks stop the server if its code has moved."""
    from sglang_eagle_ext.sglang.compat import PATCHES, SUPPORTED
    from sglang_eagle_ext.sglang.compat.patch import UnsupportedRelease, after_import
    from sglang_eagle_ext.sglang.compat.releases import older_than_supported

    if older_than_supported(release):
        raise UnsupportedRelease(f"sglang-eagle-ext: SGLang {release} is older than the supported "
                                 f"range ({SUPPORTED}); install a supported release or set {SWITCH}=0")
    names: list[str] = []
    for patch in PATCHES:
        if not patch.needed(release):
            continue
        if patch.switch is None:
            after_import(patch.module, patch.apply)
            if patch.name not in names and patch.part_of is None:
                names.append(patch.name)
            continue
        patch.switch(release)
        after_import(patch.module, lambda module, apply=patch.apply: _on_bound(bound, apply(module)))
    return names


def _on_bound(bound: list[str], phrase: str) -> None:
    """Collects the bindings' phrases (:data:`compat.BINDINGS`, in table order); when they were
    bound after activation, logs them once the last is."""
    from sglang_eagle_ext.sglang import compat

    bound.append(phrase)
    if _activation is not None and len(bound) == len(compat.BINDINGS):
        _log(f"sglang-eagle-ext: (pid {os.getpid()}) {'; '.join(bound)}")


def _bad_switch(exc: object) -> str:
    # the user's setting, not our failure: say which and what it takes, without a traceback
    return f"sglang-eagle-ext: not started: {exc}"


def not_started(reason: object) -> PluginActivationError:
    """The stop for a launch whose settings the package cannot serve (the user's, not our failure): one line,
    ``reason`` naming the setting and the fix, no traceback (a ``SystemExit``'s message)."""
    return PluginActivationError(_bad_switch(reason))


def _log(line: str) -> None:
    # stderr, not `logging`: plugins load before SGLang configures its loggers in some processes
    print(line, file=sys.stderr, flush=True)


def load() -> None:
    """The ``sglang.srt.plugins`` entry point."""
    activate()
