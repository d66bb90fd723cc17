"""The low-overhead launcher: its cache key against Triton's own specialisation, and what it passes
to a compiled kernel's launcher (the GPU equality tests run every kernel through it for real)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_eagle_ext.kernels import launch

BOUNDARY_INTS = [0, 1, 2, 15, 16, 17, -1, -16, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32, 2**63 - 1,
                 2**63, 2**64 - 16, 2**64 - 1]


def _tensor(dtype, offset):
    return torch.zeros(64, dtype=dtype)[offset:]


runtime_args = st.one_of(
    st.sampled_from(BOUNDARY_INTS),
    st.integers(-(2**40), 2**40),
    st.integers(0, 2**64 - 1),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.builds(_tensor, st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool,
                                        torch.uint8]), st.integers(0, 40)),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(runtime_args, min_size=2, max_size=2))
def test_equal_keys_mean_equal_triton_specialisation(pair):
    """Two arguments with the same key get the same specialisation from Triton (so a kept kernel
    is only reused where Triton would pick the same binary)."""
    native = pytest.importorskip("triton._C.libtriton").__dict__.get("native_specialize_impl")
    if native is None:
        pytest.skip("this Triton has no native specialisation to compare with")
    from triton.backends.compiler import BaseBackend

    a, b = pair
    if launch.key_and_arguments([a])[0] == launch.key_and_arguments([b])[0]:
        for specialize, align in ((True, True), (False, False), (True, False)):
            assert native(BaseBackend, a, False, specialize, align) == native(BaseBackend, b, False, specialize, align)


@settings(max_examples=300, deadline=None)
@given(st.lists(runtime_args, min_size=0, max_size=6), st.lists(runtime_args, min_size=0, max_size=6))
def test_binder_matches_the_general_key_or_refuses(first, later):
    """A binder made from one call gives the general function's key and launch arguments for every
    later call whose argument kinds match, and raises for any other (the caller then falls back)."""
    bind = launch._make_binder(first)
    assert bind(*first) == launch.key_and_arguments(first)
    try:
        got = bind(*later)
    except (AttributeError, TypeError, launch._Unsupported):
        kinds_match = len(first) == len(later) and all(
            isinstance(a, torch.Tensor) == isinstance(b, torch.Tensor) for a, b in zip(first, later))
        assert not kinds_match
    else:
        assert got == launch.key_and_arguments(later)


def test_unmodelled_arguments_are_refused():
    with pytest.raises(launch._Unsupported):
        launch.key_and_arguments([(1, 2)])


class _FakeCompiled:
    """Stands for a CompiledKernel: records what its launcher receives."""

    def __init__(self):
        self.function, self.packed_metadata, self.calls = "function", "metadata", []

    def run(self, *call):
        self.calls.append(call)


class _FakeKernel:
    """Stands for a JITFunction with runtime parameters x, y, n and constexprs A, B."""

    arg_names = ["x", "y", "n", "A", "B"]

    def __init__(self):
        self.compiled, self.slow_calls = _FakeCompiled(), []

    def __getitem__(self, grid):
        def launch_now(*args, **kwargs):
            self.slow_calls.append((grid, args, kwargs))
            return self.compiled

        return launch_now


class _FakeDriver:
    class active:
        get_current_device = staticmethod(lambda: 0)
        get_current_stream = staticmethod(lambda device: 1234)


def test_cached_launch_passes_runtime_args_then_constexprs_in_parameter_order(monkeypatch):
    monkeypatch.setattr(launch.Launcher, "fast", True)
    monkeypatch.setattr(launch, "driver", _FakeDriver)
    monkeypatch.setattr(launch, "_hooks_installed", lambda: False)
    kernel = _FakeKernel()
    run = launch.Launcher(kernel)
    x, y = torch.zeros(8), torch.zeros(8, dtype=torch.int64)
    run((3, 2), x, y, 5, B=64, A=7, num_warps=4)  # first call of the specialisation: Triton's path
    assert len(kernel.slow_calls) == 1 and kernel.compiled.calls == []
    run((3,), x, y, 6, B=64, A=7, num_warps=4)  # same key (6 is like 5): the kept kernel
    assert kernel.compiled.calls == [(3, 1, 1, 1234, "function", "metadata", None, None, None,
                                      x.data_ptr(), y.data_ptr(), 6, 7, 64)]
    run((3,), x, y, 16, B=64, A=7, num_warps=4)  # 16 is specialised differently: Triton again
    run((3,), x[1:], y, 6, B=64, A=7, num_warps=4)  # misaligned pointer: Triton again
    run((3,), x, y, 6, B=32, A=7, num_warps=4)  # another constexpr: Triton again
    assert len(kernel.slow_calls) == 4 and len(kernel.compiled.calls) == 1
    fixed = run.specialise(B=64, A=7, num_warps=4)  # the same specialisation, keywords bound once
    fixed((5, 1, 2), x, y, 7)
    assert kernel.compiled.calls[-1][:3] == (5, 1, 2) and len(kernel.slow_calls) == 4
    fixed((5,), None, y, 7)  # arguments of other kinds than the binder's: Triton's path, not a crash
    fixed((5,), x, y, torch.zeros(2))
    assert len(kernel.slow_calls) == 6 and len(kernel.compiled.calls) == 2
