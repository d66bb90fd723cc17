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

# What the stock check and the forward harness run SGLang's code with, outside a server.
# Whether an architecture has an SGLang class, as the model loader asks it (else the Transformers backend)
_REGISTRY = "sglang.srt.models.registry"
IS_ARCH_SUPPORTED = Target(releases.ARCH_SUPPORTED_QUERY.releases, _REGISTRY, "_ModelRegistry", "is_arch_supported",
                           params=("self", "architecture"), absent_elsewhere=True)
ASKED_BY_LOADER = Target(releases.ARCH_SUPPORTED_QUERY.releases, "sglang.srt.model_loader.utils",
                         "get_model_architecture", reads=("is_arch_supported",))
SUPPORTED_ARCHS = Target(releases.EVERY_RELEASE.releases, _REGISTRY, "_ModelRegistry", "get_supported_archs")
# The server args SGLang's layers read while built (up to 0.5.16: the rotary embedding, RMSNorm): a
# server publishes them; SGLang's own layer tests publish a dummy model's with this
PUBLISH_SERVER_ARGS = Target(releases.EVERY_RELEASE.releases, "sglang.srt.server_args",
                             "set_global_server_args_for_scheduler", params=("server_args",))
# Where SGLang's own EAGLE-3 draft class keeps its decoder layers: one midlayer up to 0.5.11
MIDLAYER = Target(releases.SINGLE_MIDLAYER_DRAFT.releases, "sglang.srt.models.llama_eagle3", "LlamaModel", "forward",
                  reads=("self.midlayer",), absent_elsewhere=True)
# SGLang's process-wide cache of rotary embeddings, shared by every model built after
ROPE_CACHE = Target(releases.EVERY_RELEASE.releases, "sglang.srt.layers.rotary_embedding.factory", "_ROPE_DICT")
# SGLang's attention-backend test kit: a mock model runner, its KV pools and forward batches
_KIT = "sglang.test.kits.attention_unittest.attention_methods.dense_attention"
ATTENTION_KIT = (
    Target(releases.ATTENTION_TEST_KIT.releases, _KIT, "MockModelRunner", "__init__",
           keywords=("case", "model_config", "dtype", "device", "max_context_len", "head_dim"), absent_elsewhere=True),
    Target(releases.ATTENTION_TEST_KIT.releases, _KIT, "TinyModelConfig", "__init__",
           keywords=("num_heads", "num_kv_heads", "head_dim", "hidden_size", "context_len")),
    Target(releases.ATTENTION_TEST_KIT.releases, _KIT, "_make_forward_batch", params=("case", "runner"),
           keywords=("max_context_len", "device")),
    Target(releases.ATTENTION_TEST_KIT.releases, _KIT, "DenseAttentionCase"),
)


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


def has_sglang_class(architecture: str) -> bool:
    """Whether the model loader takes ``architecture`` as one of SGLang's own classes (else it goes to
    the Transformers backend): the registry's :data:`IS_ARCH_SUPPORTED` (0.5.21+), before that
    membership in its :data:`SUPPORTED_ARCHS`, as each release's ``get_model_architecture`` asks."""
    from sglang.srt.models.registry import ModelRegistry

    if installed(IS_ARCH_SUPPORTED):
        return ModelRegistry.is_arch_supported(architecture)
    return architecture in ModelRegistry.get_supported_archs()


def publish_default_server_args() -> None:
    """Publish every server option's default (model path "dummy"), as SGLang's own layer tests do,
    before building SGLang's layers outside a server; up to 0.5.16 they read the server args when
    built, which raise until a process publishes them."""
    from sglang.srt.server_args import ServerArgs

    module_attribute(PUBLISH_SERVER_ARGS)(ServerArgs(model_path="dummy"))


def builtin_draft_layers(model) -> list:
    """The decoder layers of ``model``, built by SGLang's own EAGLE-3 draft class: its one
    ``model.midlayer`` (:data:`MIDLAYER`), else ``model.layers``."""
    return [model.model.midlayer] if installed(MIDLAYER) else list(model.model.layers)


def drop_meta_rotary_embeddings() -> None:
    """Drop from :data:`ROPE_CACHE` the rotary embeddings built on the meta device (a model sized
    there, never on a server): releases before 0.5.18 would hand them to the next model built."""
    cache = module_attribute(ROPE_CACHE)
    for key in [key for key, rope in cache.items() if any(buffer.is_meta for buffer in rope.buffers())]:
        del cache[key]


def attention_test_kit():
    """SGLang's dense-attention test kit module (:data:`ATTENTION_KIT`), None on releases without it."""
    return importlib.import_module(_KIT) if installed(ATTENTION_KIT[0]) else None


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
