"""What the model class asks of the running SGLang, whichever release it is: tensor- and
pipeline-parallel state, the draft attention window, the draft's parallel layout.

Each accessor reads where the installed release keeps it (:mod:`.releases`)."""

from __future__ import annotations

import importlib

from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.patch import Target

_CONTEXT = "sglang.srt.runtime_context"
# 0.5.14+ keep the server's state in the runtime context, whose getters came one release at a time
GET_PARALLEL = Target(releases.RUNTIME_PARALLEL.releases, _CONTEXT, "get_parallel")
GET_SERVER_ARGS = Target(releases.RUNTIME_SERVER_ARGS.releases, _CONTEXT, "get_server_args")
GET_SPEC = Target(releases.RUNTIME_SPEC.releases, _CONTEXT, "get_spec")
# what the accessors read on releases without the context's getter
TP_WORLD_SIZE = Target(releases.DISTRIBUTED_GETTERS.releases, "sglang.srt.distributed",
                       "get_tensor_model_parallel_world_size")
PP_GROUP = Target(releases.DISTRIBUTED_GETTERS.releases, "sglang.srt.distributed", "get_pp_group")
GLOBAL_SERVER_ARGS = Target(releases.GLOBAL_SERVER_ARGS.releases, "sglang.srt.server_args", "get_global_server_args")
# 0.5.23 resolves the draft's tensor-parallel layout from a class attribute; None before
DRAFT_PARALLEL_SPEC = Target(releases.DRAFT_PARALLEL_SPEC.releases, "sglang.srt.configs.draft_parallel",
                             "DraftParallelSpec", absent_elsewhere=True)


def module_attribute(target: Target):
    """``target.module.name`` of the running SGLang."""
    return getattr(importlib.import_module(target.module), target.name)


def installed(target: Target) -> bool:
    """Whether the installed release has ``target``."""
    return target.covers(releases.installed_release())


def parallel():
    """The runtime context's parallel state (0.5.14+), None before."""
    return module_attribute(GET_PARALLEL)() if installed(GET_PARALLEL) else None


def tp_world_size() -> int:
    context = parallel()
    return module_attribute(TP_WORLD_SIZE)() if context is None else context.tp_size


def pp_group():
    context = parallel()
    return module_attribute(PP_GROUP)() if context is None else context.pp_group


def eagle3_draft_parallel_spec():
    """The draft's layout on 0.5.23+ (:data:`DRAFT_PARALLEL_SPEC`), None before."""
    if not installed(DRAFT_PARALLEL_SPEC):
        return None
    module = importlib.import_module(DRAFT_PARALLEL_SPEC.module)
    return getattr(module, DRAFT_PARALLEL_SPEC.name)(tp_execution=module.DraftTPExecution.SINGLE_GROUP)


def draft_window_size() -> int | None:
    """``--speculative-draft-window-size`` (0.5.12+), None where the option does not exist: the
    runtime context's bags (0.5.15+), else the global server args (0.5.11 - 0.5.14; from 0.5.20
    ``get_global_server_args`` raises)."""
    getter = next(target for target in (GET_SPEC, GET_SERVER_ARGS, GLOBAL_SERVER_ARGS) if installed(target))
    return getattr(module_attribute(getter)(), "speculative_draft_window_size", None)


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
