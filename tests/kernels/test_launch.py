"""The low-overhead launcher: its cache key against Triton's own specialisation, and what it passes
to a compiled kernel's launcher (the GPU equality tests run every kernel through it for real)."""

import pytest
import torch
import triton
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_eagle_ext.kernels import launch

BOUNDARY_INTS = [0, 1, 2, 15, 16, 17, -1, -16, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32, 2**63 - 1,
                 2**63, 2**64 - 16, 2**64 - 1]


def _reference_key(args) -> tuple:
    """The launcher's key of a call (after the device), written as a plain loop: whether the first
    tensor is on the GPU, per argument its dtype or ``_scalar_key``, the OR of the tensors'
    addresses modulo 16."""
    slots, first_on_gpu, misaligned = [], None, 0
    for arg in args:
        if isinstance(arg, torch.Tensor):
            first_on_gpu = arg.is_cuda if first_on_gpu is None else first_on_gpu
            misaligned |= arg.data_ptr()
            slots.append(arg.dtype)
        else:
            slots.append(launch._scalar_key(arg))
    return (first_on_gpu, *slots, misaligned & 15)


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
    """Two arguments with the same key, under which a kept kernel is reused (every tensor
    aligned), get the same specialisation from Triton (so a kept kernel is only reused where Triton
    would pick the same binary)."""
    native = pytest.importorskip("triton._C.libtriton").__dict__.get("native_specialize_impl")
    if native is None:
        pytest.skip("this Triton has no native specialisation to compare with")
    from triton.backends.compiler import BaseBackend

    a, b = pair
    key = _reference_key([a])
    if key == _reference_key([b]) and key[-1] == 0:
        for specialize, align in ((True, True), (False, False), (True, False)):
            assert native(BaseBackend, a, False, specialize, align) == native(BaseBackend, b, False, specialize, align)


def test_a_misaligned_tensor_shows_in_the_key():
    x = torch.zeros(64)
    assert _reference_key([x, x])[-1] == 0
    assert _reference_key([x, x[1:]])[-1] != 0


def _generated_launch(first):
    """The fast launch generated from the call ``first``, with no kernel kept: every call reports
    its key to ``misses``."""
    misses = []
    launch_fn = launch._generate(first)({}, lambda grid, args, key: misses.append((args, key)), (), lambda: 7,
                                        lambda device: 0, lambda: False)
    return launch_fn, misses


@settings(max_examples=300, deadline=None)
@given(st.lists(runtime_args, min_size=0, max_size=6), st.lists(runtime_args, min_size=0, max_size=6))
def test_generated_key_matches_the_general_key_or_refuses(first, later):
    """The launch generated from one call computes the reference key (after the device)
    for every later call whose argument kinds match, and reports no key for any other (the
    caller then launches through Triton and keeps nothing)."""
    launch_fn, misses = _generated_launch(first)
    launch_fn((1,), *first)
    assert misses[-1] == (tuple(first), (7, *_reference_key(first)))
    if len(later) != len(first):  # the kernel's parameter count is fixed: a wrong count is a bug
        with pytest.raises(TypeError):
            launch_fn((1,), *later)
        return
    launch_fn((1,), *later)
    args, key = misses[-1]
    assert args == tuple(later)
    kinds_match = all(isinstance(a, torch.Tensor) == isinstance(b, torch.Tensor) for a, b in zip(first, later))
    assert key == ((7, *_reference_key(later)) if kinds_match else None)


def test_unmodelled_arguments_are_refused():
    with pytest.raises(launch._Unsupported):
        launch._scalar_key((1, 2))
    with pytest.raises(launch._Unsupported):
        launch._generate([torch.zeros(2), (1, 2)])


class _FakeRun:
    """Stands for a compiled kernel's launcher: records what it receives."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid, launch_pdl = "cooperative", "pdl"
    arg_annotations, kernel_signature = "annotations", "signature"

    def __init__(self):
        self.calls, self.native_calls = [], []
        self.launch = lambda *call: self.native_calls.append(call)

    def __call__(self, *call):
        self.calls.append(call)


class _FakeCompiled:
    def __init__(self):
        self.function, self.packed_metadata, self.run = "function", "metadata", _FakeRun()


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


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(launch.Launcher, "fast", True)
    monkeypatch.setattr(launch, "_device_and_stream", lambda: (lambda: 0, lambda device: 1234))
    monkeypatch.setattr(launch, "_hooks_installed", lambda: False)


def test_cached_launch_passes_runtime_args_then_constexprs_in_parameter_order(fake_gpu):
    kernel = _FakeKernel()
    run = launch.Launcher(kernel)
    calls = kernel.compiled.run.calls
    x, y = torch.zeros(8), torch.zeros(8, dtype=torch.int64)
    run((3, 2), x, y, 5, B=64, A=7, num_warps=4)  # first call of the specialisation: Triton's path
    assert len(kernel.slow_calls) == 1 and calls == []
    run((3,), x, y, 6, B=64, A=7, num_warps=4)  # same key (6 is like 5): the kept kernel
    assert calls == [(3, 1, 1, 1234, "function", "metadata", None, None, None, x.data_ptr(), y.data_ptr(), 6, 7, 64)]
    run((3,), x, y, 16, B=64, A=7, num_warps=4)  # 16 is specialised differently: Triton again
    run((3,), x[1:], y, 6, B=64, A=7, num_warps=4)  # misaligned pointer: Triton again
    run((3,), x[1:], y, 6, B=64, A=7, num_warps=4)  # and again: misaligned calls are never kept
    run((3,), x, y, 6, B=32, A=7, num_warps=4)  # another constexpr: Triton again
    assert len(kernel.slow_calls) == 5 and len(calls) == 1
    fixed = run.specialise(B=64, A=7, num_warps=4)  # the same specialisation, keywords bound once
    fixed.launch((5, 1, 2), x, y, 7)
    assert calls[-1][:3] == (5, 1, 2) and len(kernel.slow_calls) == 5
    fixed.launch((5,), None, y, 7)  # arguments of other kinds than the first call's: Triton, not a crash
    fixed.launch((5,), x, y, torch.zeros(2))
    assert len(kernel.slow_calls) == 7 and len(calls) == 2


def _native_call(x, y):
    """What each known convention's native launch gets for ``fixed.launch((3,), x, y, 5)`` with
    A=1, B=2: the arguments Triton's wrapper of that convention passes it."""
    return {
        launch._per_kernel_launch: (3, 1, 1, 1234, "function", "cooperative", "pdl", None, None, "metadata", None,
                                    None, None, x.data_ptr(), y.data_ptr(), 5, 1, 2),
        launch._shared_launch: (3, 1, 1, 1234, "function", "cooperative", "pdl", "metadata", None, None, None, None,
                                None, "annotations", "signature", (x.data_ptr(), y.data_ptr(), 5, 1, 2)),
    }


@pytest.mark.parametrize("convention", [launch._per_kernel_launch, launch._shared_launch],
                         ids=["per-kernel (3.6)", "shared (3.7+)"])
def test_known_launcher_wrappers_are_bypassed_for_their_native_launch(fake_gpu, monkeypatch, convention):
    """Where the launcher's wrapper is a known one (by source digest) and the kernel leaves it
    nothing to do (no scratch, no GSan), its native launch gets what the wrapper would give it, in
    the wrapper's convention; otherwise the wrapper runs."""
    digest = launch._source_digest(_FakeRun.__call__)
    monkeypatch.setattr(launch, "_KNOWN_WRAPPERS", {digest: (("fake",), convention)})
    monkeypatch.setattr(launch, "_wrapper_conventions", {})
    x, y = torch.zeros(8), torch.zeros(8, dtype=torch.int64)
    kernel = _FakeKernel()
    fixed = launch.Launcher(kernel).specialise(A=1, B=2)
    fixed.launch((3,), x, y, 5)
    fixed.launch((3,), x, y, 5)
    assert kernel.compiled.run.calls == []
    assert kernel.compiled.run.native_calls == [_native_call(x, y)[convention]]
    for wrapper_work in ({"global_scratch_size": 64}, {"profile_scratch_size": 64}, {"gsan_enabled": True}):
        kernel = _FakeKernel()
        for name, value in wrapper_work.items():
            setattr(kernel.compiled.run, name, value)
        fixed = launch.Launcher(kernel).specialise(A=1, B=2)
        fixed.launch((3,), x, y, 5)
        fixed.launch((3,), x, y, 5)
        assert len(kernel.compiled.run.calls) == 1 and kernel.compiled.run.native_calls == [], wrapper_work


def _installed_cuda_wrapper_digest() -> str:
    """The digest of the installed Triton's CUDA launcher wrapper, as the launcher computes it
    (importing Triton's CUDA driver module needs no GPU)."""
    nvidia = pytest.importorskip("triton.backends.nvidia.driver")
    return launch._source_digest(nvidia.CudaLauncher.__call__)


def test_the_installed_tritons_launcher_wrapper_is_a_known_one():
    """A Triton whose launcher wrapper the table does not know still launches correctly, through
    the wrapper, but with more host time per launch: fail, so that its wrapper gets read."""
    digest = _installed_cuda_wrapper_digest()
    assert digest in launch._KNOWN_WRAPPERS, (
        f"Triton {triton.__version__}'s CUDA launcher wrapper (CudaLauncher.__call__ in "
        f"triton/backends/nvidia/driver.py) has digest {digest}, which sglang_eagle_ext/kernels/launch.py's "
        "_KNOWN_WRAPPERS lacks: its kernels launch through the wrapper. Read that __call__ and the native launch "
        "it calls: if it calls self.launch as a known convention does (_per_kernel_launch, _shared_launch) and "
        "does nothing else for a kernel without scratch (or GSan), add the digest with this version and that "
        "convention; if the call differs, write its convention beside them and add the digest with it.")


# The Triton each supported SGLang line runs on: (SGLang releases, the torch they pin, that torch's
# CUDA wheel's Requires-Dist on triton, the Triton release it installs).
SGLANG_TRITONS = [
    ("0.5.11 - 0.5.17", "2.11.0", "triton==3.6.0", "3.6.0"),
    ("0.5.18 - 0.5.21", "2.13.0", "triton==3.7.1", "3.7.1"),
    ("0.5.22 - 0.5.23", "2.14.1", "triton~=3.8.0", "3.8.0"),  # 3.8.0: the only 3.8 release on PyPI yet
]


@pytest.mark.parametrize("sglang, torch_version, requirement, triton_version", SGLANG_TRITONS,
                         ids=[line[0] for line in SGLANG_TRITONS])
def test_every_triton_a_supported_sglang_runs_on_is_known(sglang, torch_version, requirement, triton_version):
    known = {version for versions, _ in launch._KNOWN_WRAPPERS.values() for version in versions}
    assert triton_version in known, (f"SGLang {sglang} runs on torch {torch_version} ({requirement}): add Triton "
                                     f"{triton_version}'s launcher wrapper to launch._KNOWN_WRAPPERS")


def test_the_table_names_the_installed_triton_under_its_own_digest():
    """Where the table names the installed Triton, the digest it names it under is the installed
    wrapper's (the digests were computed from each release's wheel)."""
    named = [digest for digest, (versions, _) in launch._KNOWN_WRAPPERS.items() if triton.__version__ in versions]
    if not named:
        pytest.skip(f"the table names no Triton {triton.__version__} "
                    "(the test above says whether its wrapper is known)")
    assert named == [_installed_cuda_wrapper_digest()]



class _CompilingKernel(_FakeKernel):
    """A fake kernel whose launches take ``seconds`` and, with ``adds``, add a binary to its in-memory
    cache, as a compilation does; its specialisation is not readable (no binder), as on a CPU."""

    def __init__(self, seconds: float, adds: bool):
        super().__init__()
        self.seconds, self.adds, self.device_caches = seconds, adds, {0: ({}, {}, None, None, None)}
        self.__name__ = "_compiling_kernel"

    def __getitem__(self, grid):
        def launch_now(*args, **kwargs):
            import time

            time.sleep(self.seconds)
            binaries = self.device_caches[0][0]
            if self.adds:
                binaries[len(binaries)] = self.compiled
            return self.compiled

        return launch_now


@pytest.mark.parametrize("seconds, adds, said", [(launch.COMPILE_NOTED_S, True, True), (0.0, True, False),
                                                 (launch.COMPILE_NOTED_S, False, False)],
                         ids=["slow, a binary added", "fast, a binary added", "slow, no binary added"])
def test_a_launch_that_compiles_says_so_with_its_specialisation(fake_gpu, capsys, seconds, adds, said):
    kernel = _CompilingKernel(seconds, adds)
    launch.Launcher(kernel)((1,), torch.rand(8), torch.rand(8), 3, A=1, B=2)
    assert launch.compiled_specialisations(kernel) == int(adds)
    line = capsys.readouterr().err
    assert ("sglang-eagle-ext: Triton compiled or loaded _compiling_kernel in" in line) == said
    assert ("specialisation not read" in line) == said  # no binder here: said to be ours, not Triton's
