"""What the model class asks of the running SGLang, whichever release it is: tensor- and
pipeline-parallel state, the draft attention window, the draft's parallel layout.

Each accessor looks for the newer API first (``hasattr``) and falls back to the older one."""

from __future__ import annotations

import importlib

from packaging.specifiers import SpecifierSet

from sglang_eagle_ext.sglang.compat.patch import Target

_CONTEXT = "sglang.srt.runtime_context"
# 0.5.14+ keep the server's state in the runtime context, whose getters came one release at a time
GET_PARALLEL = Target(SpecifierSet(">=0.5.14"), _CONTEXT, "get_parallel")
GET_SERVER_ARGS = Target(SpecifierSet(">=0.5.15"), _CONTEXT, "get_server_args")
GET_SPEC = Target(SpecifierSet(">=0.5.17"), _CONTEXT, "get_spec")
# what the accessors fall back to on releases without the context's getter
TP_WORLD_SIZE = Target(SpecifierSet("<0.5.14"), "sglang.srt.distributed", "get_tensor_model_parallel_world_size")
PP_GROUP = Target(SpecifierSet("<0.5.14"), "sglang.srt.distributed", "get_pp_group")
GLOBAL_SERVER_ARGS = Target(SpecifierSet("<0.5.15"), "sglang.srt.server_args", "get_global_server_args")
# 0.5.23 resolves the draft's tensor-parallel layout from a class attribute; None before
DRAFT_PARALLEL_SPEC = Target(SpecifierSet(">=0.5.23"), "sglang.srt.configs.draft_parallel", "DraftParallelSpec",
                             absent_elsewhere=True)


def _runtime_context():
    """The runtime context module (0.5.14+), None before."""
    try:
        return importlib.import_module(_CONTEXT)
    except ImportError:
        return None


def context_getter(target: Target):
    """The runtime context's getter ``target``, None on a release without it."""
    return getattr(_runtime_context(), target.name, None)


def module_attribute(target: Target):
    """``target.module.name`` of the running SGLang."""
    return getattr(importlib.import_module(target.module), target.name)


def tp_world_size() -> int:
    get_parallel = context_getter(GET_PARALLEL)
    if get_parallel is not None:
        return get_parallel().tp_size
    return module_attribute(TP_WORLD_SIZE)()


def pp_group():
    get_parallel = context_getter(GET_PARALLEL)
    if get_parallel is not None:
        return get_parallel().pp_group
    return module_attribute(PP_GROUP)()


def eagle3_draft_parallel_spec():
    """The draft's layout on 0.5.23+ (:data:`DRAFT_PARALLEL_SPEC`), None before."""
    try:
        module = importlib.import_module(DRAFT_PARALLEL_SPEC.module)
    except ImportError:
        return None
    return getattr(module, DRAFT_PARALLEL_SPEC.name)(tp_execution=module.DraftTPExecution.SINGLE_GROUP)


def draft_window_size() -> int | None:
    """``--speculative-draft-window-size`` (0.5.12+), None where the option does not exist: the
    runtime context's bags (0.5.15+), else the global server args (0.5.11 - 0.5.14; from 0.5.20
    ``get_global_server_args`` raises, but the context answers first there)."""
    for target in (GET_SPEC, GET_SERVER_ARGS):
        getter = context_getter(target)
        if getter is not None:
            return getattr(getter(), "speculative_draft_window_size", None)
    server_args = importlib.import_module(GLOBAL_SERVER_ARGS.module)
    if not hasattr(server_args, GLOBAL_SERVER_ARGS.name):
        return None
    return getattr(getattr(server_args, GLOBAL_SERVER_ARGS.name)(), "speculative_draft_window_size", None)


def server_option_names() -> frozenset[str]:
    """The options this release's ``ServerArgs`` takes (a dataclass up to 0.5.19, a msgspec
    Struct from 0.5.20); their names move between releases."""
    from sglang.srt.server_args import ServerArgs

    fields = getattr(ServerArgs, "__dataclass_fields__", None) or getattr(ServerArgs, "__struct_fields__", ())
    return frozenset(fields)


def decode_graph_options(batch_sizes) -> dict:
    """Options for decode CUDA graphs of exactly ``batch_sizes`` and no prefill graphs (0.5.11:
    piecewise; 0.5.16+: the prefill phase), whose capture lengthens every start; the names moved
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


def init_single_process_distributed(port: int) -> None:
    """SGLang's distributed state for one process (gloo, world size 1, every parallel size 1),
    which its layers need even at tensor-parallel size 1 (the stock check, the layout scripts):
    SGLang's own helper where the release ships it (``sglang.test.layer_ut_utils``, which also
    publishes the build topology newer releases ask for), else the two calls it makes."""
    import os

    import torch

    try:
        from sglang.test.layer_ut_utils import init_single_process_dist
    except ImportError:  # releases before the helper (0.5.16 and older)
        init_single_process_dist = None
    if init_single_process_dist is not None:
        init_single_process_dist(master_port=port)
        return
    from sglang.srt.distributed.parallel_state import (init_distributed_environment, initialize_model_parallel,
                                                       model_parallel_is_initialized)

    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port)), ("RANK", "0"),
                       ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(key, value)
    if not torch.distributed.is_initialized():
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo")
    if not model_parallel_is_initialized():
        initialize_model_parallel(backend="gloo")
