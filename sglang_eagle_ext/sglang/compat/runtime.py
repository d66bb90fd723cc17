"""What the model class asks of the running SGLang, whichever release it is: tensor- and
pipeline-parallel state, the draft attention window, the draft's parallel layout.

Each accessor looks for the newer API first (``hasattr``) and falls back to the older one."""

from __future__ import annotations

import importlib


def _runtime_context():
    """0.5.14+ keep the server's state in ``sglang.srt.runtime_context`` (``get_parallel`` from
    0.5.14, ``get_server_args`` from 0.5.15, ``get_spec`` from 0.5.17)."""
    try:
        return importlib.import_module("sglang.srt.runtime_context")
    except ImportError:
        return None


def tp_world_size() -> int:
    context = _runtime_context()
    if context is not None and hasattr(context, "get_parallel"):
        return context.get_parallel().tp_size
    from sglang.srt.distributed import get_tensor_model_parallel_world_size

    return get_tensor_model_parallel_world_size()


def pp_group():
    context = _runtime_context()
    if context is not None and hasattr(context, "get_parallel"):
        return context.get_parallel().pp_group
    from sglang.srt.distributed import get_pp_group

    return get_pp_group()


def eagle3_draft_parallel_spec():
    """0.5.23 resolves the draft's tensor-parallel layout from a class attribute; None before."""
    try:
        module = importlib.import_module("sglang.srt.configs.draft_parallel")
    except ImportError:
        return None
    return module.DraftParallelSpec(tp_execution=module.DraftTPExecution.SINGLE_GROUP)


def draft_window_size() -> int | None:
    """``--speculative-draft-window-size`` (0.5.12+), None where the option does not exist: the
    runtime context's bags (0.5.15+), else the global server args (0.5.11 - 0.5.14; from 0.5.20
    ``get_global_server_args`` raises, but the context answers first there)."""
    context = _runtime_context()
    for getter in ("get_spec", "get_server_args"):
        if context is not None and hasattr(context, getter):
            return getattr(getattr(context, getter)(), "speculative_draft_window_size", None)
    server_args = importlib.import_module("sglang.srt.server_args")
    if not hasattr(server_args, "get_global_server_args"):
        return None
    return getattr(server_args.get_global_server_args(), "speculative_draft_window_size", None)


def server_option_names() -> frozenset[str]:
    """The options this release's ``ServerArgs`` takes (a dataclass up to 0.5.19, a msgspec
    Struct from 0.5.20); their names move between releases."""
    from sglang.srt.server_args import ServerArgs

    fields = getattr(ServerArgs, "__dataclass_fields__", None) or getattr(ServerArgs, "__struct_fields__", ())
    return frozenset(fields)


def decode_graph_options(batch_sizes) -> dict:
    """Options for decode CUDA graphs of exactly ``batch_sizes`` and no prefill graphs (0.5.11:
    piecewise; 0.5.16+: the prefill phase), which add ~20 s to every start; the names moved
    between releases."""
    names = server_option_names()
    options = {}
    for name in ("cuda_graph_bs", "cuda_graph_bs_decode"):
        options[name] = list(batch_sizes)
    for name in ("cuda_graph_max_bs", "cuda_graph_max_bs_decode"):
        options[name] = max(batch_sizes)
    for name in ("disable_piecewise_cuda_graph", "disable_prefill_cuda_graph"):
        options[name] = True
    return {name: value for name, value in options.items() if name in names}
