"""The mechanics every patch shares: which releases it is for, the SGLang code it relies on, when
it is applied, how a method is wrapped, and the error raised when SGLang's code is not shaped as
the patch expects."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import sys
from dataclasses import dataclass
from typing import Any, Callable

from packaging.specifiers import SpecifierSet
from packaging.version import Version


class UnsupportedRelease(RuntimeError):
    """SGLang's code lacks what a patch for this release changes: serving would be wrong."""


def require(condition: bool, what: str) -> None:
    if not condition:
        raise UnsupportedRelease(f"sglang-eagle-ext: {what} not found in this SGLang; the plugin does "
                                 "not support this release (set SGLANG_EAGLE_EXT=0 to use stock SGLang)")


def required_class(module, class_name: str, method: str):
    """``module.<class_name>`` when it has ``method``; stops the server otherwise."""
    cls = getattr(module, class_name, None)
    require(cls is not None and hasattr(cls, method), f"{class_name}.{method}")
    return cls


@dataclass(frozen=True)
class Target:
    """A piece of SGLang's code that compat code relies on, in the releases that have it.

    ``module.name``: a function, a class or a name the module binds by import; ``member``: a
    method of class ``name``. ``params``: its leading parameters, in order, where the code passes
    or reads arguments by position; ``keywords``: parameters it passes or reads by name;
    ``reads``: what its body reads (``self.a.b``, or ``b`` for any object's ``.b`` or a global
    ``b``), e.g. the state a patch sets. ``imported_in``: the SGLang functions
    (``module.function``) that import it in their body, i.e. look it up at call time (``module``
    may then be outside SGLang). ``absent_elsewhere``: other releases lack it as declared, where
    the code takes another path there. Declared once, next to the code that uses it; checked
    against each release's wheel by ``tests/sglang/test_release_source.py``.
    """

    releases: SpecifierSet
    module: str
    name: str
    member: str | None = None
    params: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    imported_in: tuple[str, ...] = ()
    absent_elsewhere: bool = False

    @property
    def attribute(self) -> str:
        """What is looked up on the module or class: the method, else the module-level name."""
        return self.member or self.name

    @property
    def qualname(self) -> str:
        return ".".join(filter(None, (self.name, self.member)))

    @property
    def path(self) -> str:
        return f"{self.module}.{self.qualname}"

    def covers(self, release: Version) -> bool:
        return self.releases.contains(release, prereleases=True)


# The module after whose import the switch-selected bindings are made: they import SGLang's
# speculative modules, which is only safe once SGLang has imported them in its own order.
SCHEDULER_MODULE = "sglang.srt.managers.scheduler"


@dataclass(frozen=True)
class Patch:
    """One change to SGLang: its name, the releases that need it, the SGLang module it changes and
    ``apply(module)``, run right after SGLang itself imports that module (importing SGLang's
    modules earlier breaks its import order); ``targets``: the SGLang code ``apply`` relies on.

    A fix (no ``switch``) is listed by name in the activation log line. A binding selected by an
    environment switch has ``switch(release)``, read when the patch is armed so that a bad value
    stops start-up with its own message; its ``apply`` returns its phrase of the log line. A fix
    ``part_of`` a binding (the binding's name) is that binding's work in another module, armed at
    activation like a fix and said by the binding's phrase, not listed by name."""

    name: str
    releases: SpecifierSet
    module: str
    apply: Callable[[Any], str | None]
    targets: tuple[Target, ...]
    switch: Callable[[Version], object] | None = None
    part_of: str | None = None

    def needed(self, release: Version) -> bool:
        return self.releases.contains(release, prereleases=True)


_PATCHED_MARK = "__eagle_ext_original__"  # on a wrapper: SGLang's own function beneath every wrapper
_MAKERS_MARK = "__eagle_ext_makers__"  # on a wrapper: the functions that made the wrappers, innermost first


def _maker(make: Callable) -> str:
    function = getattr(make, "func", make)  # a functools.partial's function: one patch whatever its arguments
    return f"{function.__module__}.{function.__qualname__}"


def wrap_method(owner: Any, name: str, make: Callable[[Callable], Callable]) -> bool:
    """Replace ``owner.name`` by ``make(current)`` and return True; keeps classmethods class-bound. Once per
    ``make``: a second call with the same function (or a partial of it) changes nothing and returns False. Two
    patches of one method stack, the later one around the earlier, so that neither is dropped unseen."""
    raw = inspect.getattr_static(owner, name)
    is_classmethod = isinstance(raw, classmethod)
    current = raw.__func__ if is_classmethod else raw
    makers = getattr(current, _MAKERS_MARK, ())
    if _maker(make) in makers:
        return False
    wrapper = make(current)
    functools.update_wrapper(wrapper, current)
    setattr(wrapper, _PATCHED_MARK, getattr(current, _PATCHED_MARK, current))
    setattr(wrapper, _MAKERS_MARK, (*makers, _maker(make)))
    setattr(owner, name, classmethod(wrapper) if is_classmethod else wrapper)
    return True


class _PostImportHooks(importlib.abc.MetaPathFinder):
    """Runs ``hook(module)`` once right after ``name`` is first executed."""

    def __init__(self):
        self.hooks: dict[str, list[Callable]] = {}

    def find_spec(self, name, path=None, target=None):
        if name not in self.hooks:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _HookedLoader(spec.loader, self.hooks.pop(name))
        return spec


class _HookedLoader(importlib.abc.Loader):
    def __init__(self, inner, hooks):
        self._inner, self._hooks = inner, hooks

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        for hook in self._hooks:
            hook(module)


_post_import = _PostImportHooks()


def after_import(name: str, hook: Callable[[Any], None]) -> None:
    """Run ``hook(module)`` once module ``name`` is imported (at once if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        hook(module)
        return
    if _post_import not in sys.meta_path:
        sys.meta_path.insert(0, _post_import)
    _post_import.hooks.setdefault(name, []).append(hook)
