"""Launch Triton kernels with little host time: the compiled kernel is looked up once, then called.

``kernel[grid](...)`` re-derives the specialisation of every argument, builds Triton's cache key
and checks its globals on each call: tens of microseconds of host time for a kernel with twenty
arguments, more than the GPU time of a tree-sized kernel. :class:`Launcher` lets Triton compile
and launch the first call of a specialisation as usual, keeps the ``CompiledKernel`` it returns,
and launches later calls of that specialisation through the compiled kernel's own launcher with
the current stream (what ``kernel[grid]`` ends with).

The key of a call is finer than Triton's specialisation, so a kept kernel is only reused where
Triton itself would pick the same binary: per tensor its dtype and 16-byte alignment, per integer
whether it is 1, divisible by 16 and which of int32 / int64 / uint64 holds it, per float or bool
its type, plus the device and the compile-time keywords. Anything else (another argument type,
launch hooks installed by a profiler, the interpreter, a Triton whose internals differ) takes
``kernel[grid]``, so results never depend on the path.

Launches stay asynchronous and capturable in CUDA graphs; nothing recompiles per batch size.
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


def _tensor_key(tensor: torch.Tensor, address: int):
    return tensor.dtype, address % 16 == 0, tensor.is_cuda


def arg_key(arg: Any):
    """What Triton's specialisation of one runtime argument depends on (or finer)."""
    if isinstance(arg, torch.Tensor):
        return _tensor_key(arg, arg.data_ptr())
    kind = type(arg)
    if kind is int:
        width = 0 if _INT32_MIN <= arg <= _INT32_MAX else (1 if arg < _UINT64_FROM else 2)
        return arg == 1, arg % 16 == 0, width
    if kind is float or kind is bool or arg is None:
        return kind
    raise _Unsupported(kind)


def _hooks_installed() -> bool:
    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


class Launcher:
    """``Launcher(kernel)(grid, *args, **kwargs)`` does what ``kernel[grid](*args, **kwargs)`` does.

    ``args``: the kernel's runtime parameters, positionally and in order; ``kwargs``: its
    ``tl.constexpr`` parameters (every one that follows the runtime ones) and launch options
    (``num_warps``, ``num_stages``). ``grid``: a tuple of 1 to 3 ints.
    """

    fast = _fast_path_available()

    def __init__(self, kernel):
        self.kernel = kernel
        # (device, keywords, argument keys) -> (run, function, packed metadata, constexpr values)
        self._compiled: Dict[tuple, tuple] = {}

    def __call__(self, grid: Tuple[int, ...], *args, **kwargs) -> None:
        if not self.fast:
            self.kernel[grid](*args, **kwargs)
            return
        device = driver.active.get_current_device()
        # One pass builds the key and the launch arguments; tensors go to the launcher as their
        # device addresses, which spares it a data_ptr() call and a driver query per pointer
        # (a tensor off the GPU keys differently and takes Triton's path, which rejects it).
        key = [device, tuple(kwargs.items())]
        launch_args = []
        try:
            for arg in args:
                if isinstance(arg, torch.Tensor):
                    address = arg.data_ptr()
                    key.append(_tensor_key(arg, address))
                    launch_args.append(address)
                else:
                    key.append(arg_key(arg))
                    launch_args.append(arg)
        except _Unsupported:
            self.kernel[grid](*args, **kwargs)
            return
        key = tuple(key)
        entry = self._compiled.get(key)
        if entry is None or _hooks_installed():
            compiled = self.kernel[grid](*args, **kwargs)  # compiles on a miss, launches either way
            if entry is None:
                self._keep(key, compiled, len(args), kwargs)
            return
        run, function, metadata, constexprs = entry
        grid_1 = grid[1] if len(grid) > 1 else 1
        grid_2 = grid[2] if len(grid) > 2 else 1
        run(grid[0], grid_1, grid_2, driver.active.get_current_stream(device), function, metadata,
            None, None, None, *launch_args, *constexprs)

    def _keep(self, key, compiled, runtime_args: int, kwargs) -> None:
        """Keep what later launches of this specialisation need, when it has the expected shape."""
        if hasattr(compiled, "result"):  # Triton versions that compile asynchronously
            compiled = compiled.result()
        names = list(getattr(self.kernel, "arg_names", ()))
        constexpr_names = names[runtime_args:]
        if len(names) < runtime_args or any(name not in kwargs for name in constexpr_names):
            return
        if not all(hasattr(compiled, attr) for attr in ("run", "function", "packed_metadata")):
            return
        self._compiled[key] = (compiled.run, compiled.function, compiled.packed_metadata,
                               tuple(kwargs[name] for name in constexpr_names))
