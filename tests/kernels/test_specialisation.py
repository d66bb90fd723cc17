"""The fused sampler's kernels take no new specialisation from the integers a drafting shape sets.

Triton compiles a kernel per specialisation of its integer arguments (a 1, a multiple of 16). The
rows per request (``n``) and the deepest acceptance (``max_accepts``) follow the drafting shape,
which an adaptive server changes per step: specialised, the first sampled step at chain 1 compiled
the walk anew mid-serving (2.61 s on an H200, 2026-11-29, ``docs/adaptive-shape.md`` section 15).
Judged by Triton's own binder (the function ``JITFunction.run`` computes its cache key from), for
a Hopper target, on a CPU: the binder needs no GPU."""

import pytest
import torch

from sglang_eagle_ext.kernels.sampling import row_filter, row_pass, walk

jit = pytest.importorskip("triton.runtime.jit")
compiler = pytest.importorskip("triton.compiler")
backends = pytest.importorskip("triton.backends.compiler")

# kernel -> the arguments a drafting shape sets (this test's own list, not the decorators')
SHAPE_ARGUMENTS = {
    row_pass._chunk_pass_kernel: ("n",),
    row_filter._row_filter_kernel: ("n",),
    walk._walk_kernel: ("n", "max_accepts"),
}
# what a chain 0-7 or a tree up to 64 draft tokens gives them, at any batch size
SHAPE_VALUES = (1, 2, 3, 4, 6, 8, 16, 32, 64)


def binder_of(kernel, unspecialised_off: bool = False):
    """Triton's binder for ``kernel`` as ``triton.jit`` builds it without the interpreter (the tests
    run under it); ``unspecialised_off`` drops the kernel's ``do_not_specialize`` (the control)."""
    if not hasattr(jit, "create_function_from_signature") or not hasattr(compiler, "make_backend"):
        pytest.skip("not checked: this Triton has no create_function_from_signature / make_backend")
    fn = getattr(kernel, "fn", kernel)
    options = dict(getattr(kernel, "kwargs", {}))
    if isinstance(kernel, jit.JITFunction):
        options = {"do_not_specialize": kernel.do_not_specialize}
    if unspecialised_off:
        options.pop("do_not_specialize", None)
    function = jit.JITFunction(fn, **{key: value for key, value in options.items()
                                      if key in ("do_not_specialize", "do_not_specialize_on_alignment")})
    backend = compiler.make_backend(backends.GPUTarget("cuda", 90, 32))
    return jit.create_function_from_signature(function.signature, function.params, backend), function


def specialisation(kernel, unspecialised_off: bool = False, **values) -> list:
    """Triton's specialisation of a call of ``kernel``: every pointer a float32 tensor, every other
    runtime argument 4096 (a float for the thresholds), every constexpr 16, ``values`` over them."""
    binder, function = binder_of(kernel, unspecialised_off)
    arguments = {}
    for param in function.params:
        name = param.name
        if param.is_constexpr:
            arguments[name] = 16
        elif name.endswith("_ptr"):
            arguments[name] = torch.ones(64, dtype=torch.float32)
        elif name.startswith("threshold"):
            arguments[name] = 0.5
        else:
            arguments[name] = 4096
    arguments.update(values)
    _, specialised, _ = binder(**arguments)
    return specialised


@pytest.mark.parametrize("kernel", list(SHAPE_ARGUMENTS), ids=lambda kernel: getattr(kernel, "fn", kernel).__name__)
def test_no_drafting_shape_gives_the_fused_sampler_a_new_specialisation(kernel):
    for name in SHAPE_ARGUMENTS[kernel]:
        keys = {str(specialisation(kernel, **{name: value})) for value in SHAPE_VALUES}
        assert len(keys) == 1, (name, keys)
        # the control: Triton's default would have compiled anew for a 1 or a multiple of 16
        defaults = {str(specialisation(kernel, unspecialised_off=True, **{name: value})) for value in SHAPE_VALUES}
        assert len(defaults) > 1, name
    # what one server keeps (its vocabulary) stays specialised: the binder tells values apart here
    assert specialisation(kernel, vocab=49152) != specialisation(kernel, vocab=49153)


def test_the_compile_line_names_what_triton_specialises_each_argument_on():
    """``launch.specialisation_text``, the line a compilation prints, read against Triton's own binder: a
    tensor viewed 4 bytes into its storage is not 16-byte aligned, a length of 49152 is a multiple of 16,
    and the walk's shape integers carry no mark (do_not_specialize) where Triton's default marks a 1."""
    from sglang_eagle_ext.kernels.launch import specialisation_text

    kernel = walk._walk_kernel
    torch.manual_seed(0)
    binder, function = binder_of(kernel)
    arguments = {}
    for param in function.params:
        if param.is_constexpr:
            arguments[param.name] = 16
        elif param.name.endswith("_ptr"):
            arguments[param.name] = torch.rand(64)
        elif param.name.startswith("threshold"):
            arguments[param.name] = 0.5
        else:
            arguments[param.name] = 4097
    arguments.update(coins_ptr=torch.rand(65)[1:], vocab=49152, max_accepts=1, n=2)
    parts = specialisation_text(function, (), arguments, binder=binder).split(", ")
    assert "coins_ptr *fp32" in parts and "final_coins_ptr *fp32/16" in parts
    assert "vocab i32/16" in parts and "num_chunks i32" in parts
    assert "max_accepts i32" in parts and "n i32" in parts
    assert not any(part.startswith(("BLOCK_V", "CHUNKS", "SLOTS")) for part in parts)  # constexprs left out
    control, _ = binder_of(kernel, unspecialised_off=True)
    assert "max_accepts constexpr=1" in specialisation_text(function, (), arguments, binder=control).split(", ")


@pytest.mark.parametrize("entry", [lambda binder: ({}, {}, None, None, binder),
                                   lambda binder: ({}, None, None, binder)],
                         ids=["Triton 3.5+ (five items)", "Triton 3.3-3.4 (four)"])
def test_the_compile_line_reads_the_binder_triton_keeps_for_the_current_device(monkeypatch, entry):
    """Without a binder given, the line reads the current device's from the kernel's ``device_caches``
    (the last item of its entry in every Triton the launcher serves)."""
    from sglang_eagle_ext.kernels.launch import specialisation_text

    binder, function = binder_of(walk._walk_kernel)
    arguments = {param.name: 16 if param.is_constexpr else torch.rand(64) if param.name.endswith("_ptr") else
                 0.5 if param.name.startswith("threshold") else 4097 for param in function.params}
    function.device_caches = {3: entry(binder)}
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    text = specialisation_text(function, (), arguments)
    assert text == specialisation_text(function, (), arguments, binder=binder)
    assert "predicts_ptr *fp32/16" in text.split(", ")
