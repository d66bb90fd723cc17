"""Launch Triton kernels with little host time: the compiled kernel is looked up once, then called.

``kernel[grid](...)`` re-derives the specialisation of every argument, builds Triton's cache key
and checks its globals on each call: about 20 us of host time for a kernel with twenty arguments
(Triton 3.6, H200 host), more than the GPU time of a tree-sized kernel. :class:`Launcher` lets
Triton compile and launch the first call of a specialisation as usual, keeps the
``CompiledKernel`` it returns, and launches later calls of that specialisation through the
compiled kernel's own launcher on the current stream (what ``kernel[grid]`` ends with), passing
tensors as device addresses.

The key of a call is finer than Triton's specialisation, so a kept kernel is only reused where
Triton itself would pick the same binary: per tensor its dtype, 16-byte alignment and whether it
is on the GPU; per integer whether it is 1, divisible by 16 and which of int32 / int64 / uint64
holds it; per float or bool its type; plus the device and the compile-time keywords. Anything
else (another argument type, launch hooks installed by a profiler, the interpreter, a Triton
older than 3.3 whose launcher takes other arguments) goes through ``kernel[grid]``, so results
never depend on the path.

Launches stay asynchronous and capturable in CUDA graphs; nothing recompiles per batch size.

Use::

    _my_kernel_launcher = Launcher(_my_kernel)
    _my_kernel_launcher(grid, *runtime_args, BLOCK=128, num_warps=4)   # like _my_kernel[grid](...)
    fixed = _my_kernel_launcher.specialise(BLOCK=128, num_warps=4)     # keep for repeated calls:
    fixed(grid, *runtime_args)                                          # skips the keyword handling
"""

from __future__ import annotations

import os
from typing import Any, Dict, Tuple

import torch
import triton
from triton.runtime import driver

try:
    from triton import knobs
except ImportError:  # Triton < 3.3: launched through kernel[grid] only
    knobs = None

_INT32_MIN, _INT32_MAX, _UINT64_FROM = -(2**31), 2**31 - 1, 2**63


class _Unsupported(Exception):
    """An argument whose specialisation this module does not model."""


def _triton_version() -> Tuple[int, int]:
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def _fast_path_available() -> bool:
    """The launch convention used here: Triton >= 3.3 (every parameter, constexprs included, is
    passed to ``CompiledKernel.run``; hooks live in ``triton.knobs``), compiled code (no interpreter)."""
    if os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes"):
        return False
    return knobs is not None and _triton_version() >= (3, 3)


def _scalar_key(arg: Any):
    kind = type(arg)
    if kind is int:
        width = 0 if _INT32_MIN <= arg <= _INT32_MAX else (1 if arg < _UINT64_FROM else 2)
        return arg == 1, arg % 16 == 0, width
    if kind is float or kind is bool or arg is None:
        return kind
    raise _Unsupported(kind)


def key_and_arguments(args) -> Tuple[tuple, list]:
    """The specialisation key of a call's runtime arguments (what Triton's specialisation depends
    on, or finer) and the arguments as the compiled launcher takes them (tensors as addresses,
    which spares the launcher a ``data_ptr()`` call and a driver query per pointer)."""
    key, launch_args = [], []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            address = arg.data_ptr()
            key.append((arg.dtype, address % 16 == 0, arg.is_cuda))
            launch_args.append(address)
        else:
            key.append(_scalar_key(arg))
            launch_args.append(arg)
    return tuple(key), launch_args


def _make_binder(args):
    """A function that returns what :func:`key_and_arguments` returns for calls whose arguments
    are of the kinds of ``args`` (tensor or not, per position), as straight-line code: about half
    the host time of the loop. It raises ``AttributeError`` (a tensor slot given something else)
    or :class:`_Unsupported` (a scalar slot given a tensor) for calls of other kinds."""
    names, lines, keys, launch_args = [], [], [], []
    for i, arg in enumerate(args):
        names.append(f"a{i}")
        if isinstance(arg, torch.Tensor):
            lines.append(f"    p{i} = a{i}.data_ptr()\n")
            keys.append(f"(a{i}.dtype, p{i} % 16 == 0, a{i}.is_cuda), ")
            launch_args.append(f"p{i}")
        else:
            keys.append(f"_scalar_key(a{i}), ")
            launch_args.append(f"a{i}")
    source = (f"def bind({', '.join(names)}):\n" + "".join(lines)
              + f"    return ({''.join(keys)}), [{', '.join(launch_args)}]\n")
    namespace = {"_scalar_key": _scalar_key}
    exec(compile(source, "<sglang_eagle_ext.kernels.launch binder>", "exec"), namespace)
    return namespace["bind"]


def _hooks_installed() -> bool:
    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


class Specialised:
    """A kernel with its compile-time keywords fixed: ``(grid, *runtime_args)`` launches it."""

    def __init__(self, kernel, kwargs: Dict[str, Any], fast: bool):
        self.kernel, self.kwargs, self.fast = kernel, kwargs, fast
        names = list(getattr(kernel, "arg_names", ()))
        self._runtime_count = len(names) - sum(name in kwargs for name in names)
        # Parameters after the runtime ones, in order: what the compiled launcher takes after them.
        constexpr_names = names[self._runtime_count:]
        if not names or any(name not in kwargs for name in constexpr_names):
            self.fast = False  # keywords that are not the trailing parameters: Triton's path only
        self._constexprs = tuple(kwargs.get(name) for name in constexpr_names)
        # (device, argument key) -> (launcher, function handle, packed metadata)
        self._compiled: Dict[tuple, tuple] = {}
        self._bind = None  # made from the first call's argument kinds

    def __call__(self, grid: Tuple[int, ...], *args) -> None:
        if not self.fast:
            self.kernel[grid](*args, **self.kwargs)
            return
        device = driver.active.get_current_device()
        try:
            arg_key, launch_args = self._bind(*args)
        except (AttributeError, TypeError, _Unsupported):  # no binder yet, or arguments of other kinds
            try:
                arg_key, launch_args = key_and_arguments(args)
            except _Unsupported:
                self.kernel[grid](*args, **self.kwargs)
                return
            if self._bind is None and len(args) == self._runtime_count:
                self._bind = _make_binder(args)
        entry = self._compiled.get((device, arg_key))
        if entry is None or _hooks_installed():
            compiled = self.kernel[grid](*args, **self.kwargs)  # compiles on a miss, launches either way
            if entry is None and len(args) == self._runtime_count:
                self._keep((device, arg_key), compiled)
            return
        run, function, metadata = entry
        grid_1 = grid[1] if len(grid) > 1 else 1
        grid_2 = grid[2] if len(grid) > 2 else 1
        run(grid[0], grid_1, grid_2, driver.active.get_current_stream(device), function, metadata,
            None, None, None, *launch_args, *self._constexprs)

    def _keep(self, key, compiled) -> None:
        if hasattr(compiled, "result"):  # Triton versions that compile asynchronously
            compiled = compiled.result()
        if all(hasattr(compiled, attr) for attr in ("run", "function", "packed_metadata")):
            self._compiled[key] = (compiled.run, compiled.function, compiled.packed_metadata)


class Launcher:
    """``Launcher(kernel)(grid, *args, **kwargs)`` does what ``kernel[grid](*args, **kwargs)`` does.

    ``args``: the kernel's runtime parameters, positionally and in order; ``kwargs``: its
    ``tl.constexpr`` parameters (every one that follows the runtime ones) and launch options
    (``num_warps``, ``num_stages``). ``grid``: a tuple of 1 to 3 ints.
    """

    fast = _fast_path_available()

    def __init__(self, kernel):
        self.kernel = kernel
        self._specialised: Dict[tuple, Specialised] = {}

    def specialise(self, **kwargs) -> Specialised:
        """The kernel with these compile-time keywords and options, for repeated launches."""
        key = tuple(kwargs.items())
        fixed = self._specialised.get(key)
        if fixed is None:
            fixed = self._specialised[key] = Specialised(self.kernel, kwargs, self.fast)
        return fixed

    def __call__(self, grid: Tuple[int, ...], *args, **kwargs) -> None:
        self.specialise(**kwargs)(grid, *args)
