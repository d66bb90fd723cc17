"""Launch Triton kernels with little host time: the compiled kernel is looked up once, then called.

``kernel[grid](...)`` re-derives the specialisation of every argument, builds Triton's cache key
and checks its globals on each call: host time that grows with the argument count and exceeds
the GPU time of a tree-sized kernel. :class:`Launcher` lets Triton compile and launch the first
call of a specialisation as usual, keeps the ``CompiledKernel`` it returns, and launches later
calls of that specialisation through the compiled kernel's own launcher on the current stream
(what ``kernel[grid]`` ends with), passing tensors as device addresses. Where the launcher's
Python wrapper is one this module knows (:data:`_KNOWN_WRAPPERS`, by a digest of its source), the
wrapper's native ``launch`` is called with what the wrapper would pass it, sparing the closures
the wrapper builds per call. Triton changed that call once: 3.6 compiles a ``launch`` per kernel
signature and spreads the kernel's arguments after the others; 3.7 - 3.9 share one ``launch``
that takes them as one tuple, after scratch and the wrapper's description of the arguments. A
wrapper not in the table (another Triton release) is called as it is, the generic path, and
``tests/kernels/test_launch.py`` fails on a Triton whose wrapper is not in it, so that a new
release's wrapper gets read and added. (The host times behind these choices:
``benchmarks/results/tree_kernels_tuning.md``; ``benchmarks/gpu/launch_probe.py`` measures both
paths against ``kernel[grid]`` on the installed Triton.)

The key of a call is finer than Triton's specialisation wherever a kept kernel is reused, so a
kept kernel is only reused where Triton itself would pick the same binary: per tensor its dtype;
per integer whether it is 1, divisible by 16 and which of int32 / int64 / uint64 holds it; per
float, bool or None its type; plus the device, the compile-time keywords, and whether the first
tensor is on the GPU. Kernels are kept and reused only for calls whose tensors are all 16-byte
aligned (Triton specialises on each pointer's alignment; SGLang's buffers always are, and one OR
of the addresses checks them all). Anything else (other argument kinds, a misaligned tensor,
launch hooks installed by a profiler, the interpreter, a Triton older than 3.3 whose launcher
takes other arguments) goes through ``kernel[grid]``, so results never depend on the path.

Launches stay asynchronous and capturable in CUDA graphs; nothing recompiles per batch size. A miss
of the fast launch that makes Triton compile or load a binary it did not hold, taking
:data:`COMPILE_NOTED_S` or more, is said on stderr with the specialisation, read from Triton's own
binder: a compilation after start-up stalls a server for seconds, and the line says which argument
asked for it. (A load from Triton's disk cache is counted too when it is that slow: the first one
in a process hashes Triton's library, about 0.35 s on a CPU machine.)

Use::

    _my_kernel_launcher = Launcher(_my_kernel)
    _my_kernel_launcher(grid, *runtime_args, BLOCK=128, num_warps=4)   # like _my_kernel[grid](...)
    fixed = _my_kernel_launcher.specialise(BLOCK=128, num_warps=4)     # keep for repeated calls:
    fixed.launch(grid, *runtime_args)                                   # skips the keyword handling
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
import time
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import triton
from triton.runtime import driver

try:
    from triton import knobs
except ImportError:  # Triton < 3.3: launched through kernel[grid] only
    knobs = None

_INT32_MIN, _INT32_MAX, _UINT64_FROM = -(2**31), 2**31 - 1, 2**63
COMPILE_NOTED_S = 0.25  # a miss this slow that added a binary: a compilation, or a process's first disk load
_NONE_TYPE = type(None)


class _Unsupported(Exception):
    """An argument whose specialisation this module does not model."""


def _triton_version() -> Tuple[int, int]:
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def _fast_path_available() -> bool:
    """The launch convention used here: Triton >= 3.3 (every parameter, constexprs included, is
    passed to ``CompiledKernel.run``; hooks live in ``triton.knobs``), compiled code (no interpreter:
    ``TRITON_INTERPRET`` read by Triton itself, whose variable it is, so that the two never disagree)."""
    return knobs is not None and not knobs.runtime.interpret and _triton_version() >= (3, 3)


def _scalar_key(arg: Any):
    """The key of a non-tensor argument (see the module docstring)."""
    kind = type(arg)
    if kind is int:
        return arg == 1, arg % 16 == 0, _INT32_MIN <= arg <= _INT32_MAX, arg >= _UINT64_FROM
    if kind is float or kind is bool or arg is None:
        return kind
    raise _Unsupported(kind)


def _scalar_slot(name: str, arg: Any) -> str:
    """Source of the key of scalar slot ``name``: inline for the kind ``arg`` has (the kind a
    kernel's calls keep), :func:`_scalar_key` for any other."""
    if type(arg) is int:
        return (f"(({name} == 1, {name} % 16 == 0, {_INT32_MIN} <= {name} <= {_INT32_MAX}, "
                f"{name} >= {_UINT64_FROM}) if type({name}) is int else _scalar_key({name}))")
    if arg is None:
        return f"(_NONE_TYPE if {name} is None else _scalar_key({name}))"
    if type(arg) in (float, bool):
        return f"({type(arg).__name__} if type({name}) is {type(arg).__name__} else _scalar_key({name}))"
    raise _Unsupported(type(arg))


def _generate(args) -> Callable:
    """``make_launch`` for calls whose arguments are of the kinds of ``args`` (tensor or not, per
    position): the key and the launch as straight-line code in one frame (much less host time
    than a loop over the arguments).

    ``make_launch(compiled, miss, constexprs, device, stream, hooks)`` returns ``launch(grid,
    *args)``. It computes the call's key: ``device()``, whether the first tensor is on the GPU
    (``None`` without tensors), per argument its dtype (tensors) or :func:`_scalar_key`, and the
    OR of the tensors' addresses modulo 16 (0: all aligned; kernels are kept under such keys only).
    It launches the entry of ``compiled`` under that key (made by :func:`_launch_entry`), or calls
    ``miss(grid, args, key)``: when there is no entry or ``hooks()`` is true, and with ``key=None``
    when the call's kinds differ (a tensor slot given something else, a scalar slot given a
    tensor). Another argument count is a ``TypeError``, as for any function."""
    names = [f"a{i}" for i in range(len(args))]
    tensors = [name for name, arg in zip(names, args) if isinstance(arg, torch.Tensor)]
    slots = [f"{name}.dtype" if name in tensors else _scalar_slot(name, arg) for name, arg in zip(names, args)]
    first_on_gpu = f"{tensors[0]}.is_cuda" if tensors else "None"
    misaligned = f"({' | '.join('p' + name for name in tensors)}) & 15" if tensors else "0"
    launch_args = "".join(("p" + name if name in tensors else name) + ", " for name in names)
    params = "".join(name + ", " for name in names)
    source = (
        "def make_launch(compiled, miss, constexprs, device, stream, hooks):\n"
        f"    def launch(grid, {params}):\n"
        "        try:\n"
        + "".join(f"            p{name} = {name}.data_ptr()\n" for name in tensors)
        + f"            key = (device(), {first_on_gpu}, {', '.join(slots + [misaligned])})\n"
        "        except (AttributeError, TypeError, _Unsupported):\n"
        f"            return miss(grid, ({params}), None)\n"
        "        entry = compiled.get(key)\n"
        "        if entry is None or hooks():\n"
        f"            return miss(grid, ({params}), key)\n"
        "        native, leading, args_as_tuple = entry\n"
        "        grid = grid + (1, 1)\n"
        "        if args_as_tuple:\n"
        f"            native(grid[0], grid[1], grid[2], stream(key[0]), *leading, ({launch_args}*constexprs,))\n"
        "        else:\n"
        f"            native(grid[0], grid[1], grid[2], stream(key[0]), *leading, {launch_args}*constexprs)\n"
        "    return launch\n")
    namespace = {"_scalar_key": _scalar_key, "_Unsupported": _Unsupported, "_NONE_TYPE": _NONE_TYPE}
    exec(compile(source, "<sglang_eagle_ext.kernels.launch>", "exec"), namespace)
    return namespace["make_launch"]


def _hooks_installed() -> bool:
    """Whether a launch hook is set: a function (older Triton) or a non-empty ``HookChain`` (newer)."""
    runtime = knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    if enter is None and leave is None:
        return False
    return bool(getattr(enter, "calls", enter)) or bool(getattr(leave, "calls", leave))


def _device_and_stream() -> Tuple[Callable[[], int], Callable[[int], int]]:
    """The current CUDA device's index, and a device's current stream handle (Triton's own query)."""
    return getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device), driver.active.get_current_stream


def _source_digest(function) -> str:
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return ""
    return hashlib.sha256("".join(source.split()).encode()).hexdigest()


def _per_kernel_launch(run, compiled) -> Tuple[Callable, tuple, bool]:
    """Triton 3.6's native ``launch``, compiled for the kernel's signature: ``(grid x, y, z, stream,
    function, cooperative, pdl, global scratch, profile scratch, kernel metadata, launch metadata,
    enter hook, exit hook, *kernel args)``."""
    return run.launch, (compiled.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                        compiled.packed_metadata, None, None, None), False


def _shared_launch(run, compiled) -> Tuple[Callable, tuple, bool]:
    """The native ``launch`` Triton 3.7 - 3.9 share between kernels: ``(grid x, y, z, stream,
    function, cooperative, pdl, kernel metadata, launch metadata, enter hook, exit hook, global
    scratch, profile scratch, argument annotations, signature, kernel args as one tuple)``; it
    reads the tuple by the wrapper's annotations and signature, skipping the constexprs."""
    return run.launch, (compiled.function, run.launch_cooperative_grid, run.launch_pdl, compiled.packed_metadata,
                        None, None, None, None, None, run.arg_annotations, run.kernel_signature), True


# The launcher wrappers (``CompiledKernel.run``'s class, Triton's ``CudaLauncher``) whose native
# ``launch`` this module calls itself: SHA-256 of the whitespace-free source of ``__call__`` ->
# (the Triton releases that ship it, how its native ``launch`` is called). Each of these
# ``__call__`` allocates scratch only for a kernel that uses it (3.9: a default profile scratch
# too, also only when used), adds GSan's arguments only when the kernel is built for GSan (3.8+),
# and then calls ``self.launch`` with the arguments its convention names; the tensor-descriptor
# wrapper Triton may put in ``self.launch`` takes the same call.
_KNOWN_WRAPPERS: Dict[str, Tuple[Tuple[str, ...], Callable]] = {
    "0ff2b3219ec9f5067def7f5b72cf4ed0f1b544e98655c5e548c7e933e3ab3a19": (("3.6.0",), _per_kernel_launch),
    "7689f191428df69bea1ce6bd9ed82644239df6c89e48933380d3c97a3843fd45": (("3.7.0", "3.7.1"), _shared_launch),
    "07cb65bca80ed204492b71f9004d9c488498ad407504aa4aed61cf1349755e37": (("3.8.0",), _shared_launch),
    "b3d689acc085368a2b47eb1106ae1225f912073e5d1786ab7f309ae6f5318de3": (("3.9.0",), _shared_launch),
}

# Launcher wrapper class -> its convention in _KNOWN_WRAPPERS, or None where its digest is not there.
_wrapper_conventions: Dict[type, Optional[Callable]] = {}


def _launch_entry(compiled) -> Tuple[Callable, tuple, bool]:
    """How to launch ``compiled``: the function to call, the arguments it takes between the stream
    and the kernel's own, and whether it takes the kernel's own as one tuple. The launcher's native
    function where the launcher's wrapper is a known one and leaves nothing to do for this kernel
    (no scratch memory, no GSan); else the launcher itself."""
    run = compiled.run
    wrapper = type(run)
    if wrapper not in _wrapper_conventions:
        known = _KNOWN_WRAPPERS.get(_source_digest(wrapper.__call__))
        _wrapper_conventions[wrapper] = known[1] if known else None
    convention = _wrapper_conventions[wrapper]
    if (convention is None or getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1)
            or getattr(run, "gsan_enabled", False)):
        return run, (compiled.function, compiled.packed_metadata, None, None, None), False
    return convention(run, compiled)


class Specialised:
    """A kernel with its compile-time keywords fixed: ``launch(grid, *runtime_args)`` launches it.

    Look ``launch`` up at each call (``fixed.launch(...)``), not once: the first call replaces it
    with the launch generated for its argument kinds."""

    def __init__(self, kernel, kwargs: Dict[str, Any], fast: bool):
        self.kernel, self.kwargs = kernel, kwargs
        names = list(getattr(kernel, "arg_names", ()))
        self._runtime_count = len(names) - sum(name in kwargs for name in names)
        # Parameters after the runtime ones, in order: what the compiled launcher takes after them.
        constexpr_names = names[self._runtime_count:]
        if not names or any(name not in kwargs for name in constexpr_names):
            fast = False  # keywords that are not the trailing parameters: Triton's path only
        self._constexprs = tuple(kwargs.get(name) for name in constexpr_names)
        # (device, argument key) -> how to launch the kernel kept for it (see _launch_entry)
        self._compiled: Dict[tuple, tuple] = {}
        self.launch: Callable[..., None] = self._first_launch if fast else self._triton_launch

    def _triton_launch(self, grid: Tuple[int, ...], *args) -> None:
        self.kernel[grid](*args, **self.kwargs)

    def _first_launch(self, grid: Tuple[int, ...], *args) -> None:
        """Make the fast launch from this call's argument kinds, then launch through it."""
        try:
            make_launch = _generate(args)
        except _Unsupported:
            make_launch = None
        if make_launch is None or len(args) != self._runtime_count:
            self._triton_launch(grid, *args)
            return
        device, stream = _device_and_stream()
        self.launch = make_launch(self._compiled, self._miss, self._constexprs, device, stream, _hooks_installed)
        self.launch(grid, *args)

    def _miss(self, grid: Tuple[int, ...], args: tuple, key) -> None:
        """Launch through Triton (compiling on a first call); keep the kernel under ``key`` when the
        call is one the fast launch can repeat (its kinds, all tensors aligned, no hooks)."""
        held, started = compiled_specialisations(self.kernel), time.perf_counter()
        compiled = self.kernel[grid](*args, **self.kwargs)
        took = time.perf_counter() - started
        if took >= COMPILE_NOTED_S and compiled_specialisations(self.kernel) > held:
            print(f"sglang-eagle-ext: Triton compiled or loaded {getattr(self.kernel, '__name__', self.kernel)} "
                  f"in {took:.2f} s "
                  f"(pid {os.getpid()}) for {specialisation_text(self.kernel, args, self.kwargs)}",
                  file=sys.stderr, flush=True)
        if key is None or key[-1] != 0 or key in self._compiled or _hooks_installed():
            return
        if hasattr(compiled, "result"):  # Triton versions that compile asynchronously
            compiled = compiled.result()
        if all(hasattr(compiled, attr) for attr in ("run", "function", "packed_metadata")):
            self._compiled[key] = _launch_entry(compiled)


def compiled_specialisations(kernel) -> int:
    """How many binaries Triton holds for ``kernel`` (its in-memory cache, every device; 0 when it keeps none)."""
    caches = getattr(kernel, "device_caches", None)
    try:
        return sum(len(cache[0]) for cache in list(caches.values())) if caches else 0
    except Exception:  # noqa: BLE001 (a Triton that keeps them otherwise: never the launch's failure)
        return 0


def specialisation_text(kernel, args: tuple, kwargs: Dict[str, Any], binder: Optional[Callable] = None) -> str:
    """Each runtime argument's specialisation as Triton's binder gives it (the key it compiles by), as
    ``name type`` with ``/16`` for a multiple of 16 or a 16-byte aligned pointer and ``=1`` for a 1;
    "not read (...)" where this Triton's binder is not the one this reads. ``binder``: the current
    device's (the last item of its ``device_caches`` entry: the fifth from Triton 3.5, the fourth before)
    unless given."""
    try:
        binder = binder or kernel.device_caches[torch.cuda.current_device()][-1]
        _, specialisation, _ = binder(*args, **kwargs)
        parts = []
        for param, (kind, attribute) in zip(kernel.params, specialisation):
            if param.is_constexpr:
                continue
            parts.append(f"{param.name} {kind}" + {"D": "/16", "1": "=1"}.get(str(attribute), ""))
        return ", ".join(parts)
    except Exception as exc:  # noqa: BLE001 (a diagnostic line: never the launch's failure)
        return f"(specialisation not read: {type(exc).__name__}: {exc})"


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
        self.specialise(**kwargs).launch(grid, *args)
