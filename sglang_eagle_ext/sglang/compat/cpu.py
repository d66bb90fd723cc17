"""Import hooks that let stock SGLang run on a CPU-only host (tests and the CPU demo).

What stock SGLang lacks on a machine without CUDA (docs/serving.md, "CPU"):

* the PyPI ``torchvision`` wheel is a CUDA build; with a CPU-only torch its import fails in
  ``_meta_registrations`` because the ``torchvision::nms``/``qnms`` operators were never defined.
  SGLang (and transformers' image utilities) import torchvision unconditionally, so we define the
  two schemas before torchvision loads; its C++ ops stay unavailable, which nothing here uses;
* SGLang's rotary embedding imports ``vllm`` on platforms it does not recognise; marking the
  module as CPU makes it use its native torch path. Under ``TRITON_INTERPRET=1`` the EAGLE tree
  kernels and the verify step's KV-cache slot assignment are likewise routed to SGLang's Triton
  implementations (its XPU path): on a platform it does not recognise, SGLang's
  ``assign_extend_cache_locs_func`` returns None, which tree drafting (top-k > 1) uses as the
  verify batch's cache locations;
* SGLang's sampled EAGLE verify (temperature > 0) calls renorm and tree-sampling ops that are
  None without CUDA; :mod:`.cpu_sampling` supplies them in plain torch where they are None.

:func:`install` is idempotent and does nothing on a CUDA build of torch.
"""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys

from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.patch import Target, after_import

# Folder to put on PYTHONPATH so that every SGLang process (spawned schedulers too) installs these.
SITE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cpu_site")

_TORCHVISION_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
# SGLang's options for a CPU-only host: its defaults assume CUDA (bf16 kernels, FlashInfer, graphs);
# CUDA graphs off as the release spells it (:func:`engine_options`). One KV split: Triton's interpreter
# runs every program of a grid in turn, and a CPU's decode attention gets SGLang's fixed 8 splits (no
# core count to schedule by), 8 programs per sequence and head where 1 does the same work (a CPU
# server's sampled steps at batch 24 ran 2.6x faster with one).
CPU_OPTIONS = dict(device="cpu", dtype="float32", attention_backend="triton", sampling_backend="pytorch",
                   triton_attention_num_kv_splits=1)
# 0.5.14+: per phase (--disable-cuda-graph is deprecated for these there); before: the one switch
NO_CUDA_GRAPHS = dict(cuda_graph_backend_decode="disabled", cuda_graph_backend_prefill="disabled")
LEGACY_NO_CUDA_GRAPHS = dict(disable_cuda_graph=True)
# The per-phase backends those options select (its DISABLED is "disabled")
GRAPH_BACKENDS = Target(releases.CUDA_GRAPH_BACKEND_FLAGS.releases, "sglang.srt.model_executor.cuda_graph_config",
                        "Backend", absent_elsewhere=True)
_keepalive: list = []  # torch.library registrations live as long as their Library object


def _define_torchvision_schemas() -> None:
    import torch

    library = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _TORCHVISION_SCHEMAS:
        try:
            library.define(schema)
        except RuntimeError:  # already defined (a working torchvision, or a second call)
            pass
    _keepalive.append(library)


def _mark_rotary_cpu(module) -> None:
    if not getattr(module, "_is_cuda", False):
        module._is_cpu = True


def _route_speculative_ops_to_triton(module) -> None:
    # TRITON_INTERPRET is Triton's variable: read as Triton reads it (the ops then run in its interpreter)
    from triton import knobs

    if not getattr(module, "_is_cuda", False) and knobs.runtime.interpret:
        module._is_xpu = True


def _supply_verify_sampling(module) -> None:
    """Bind :mod:`.cpu_sampling`'s ops to the names of SGLang's verify module that the platform
    left None (0.5.23's ``eagle_utils`` holds all three; a release without them gets nothing)."""
    from sglang_eagle_ext.sglang.compat import cpu_sampling, releases

    ops = {"top_k_renorm_prob": cpu_sampling.top_k_renorm_prob,
           "top_p_renorm_prob": cpu_sampling.top_p_renorm_prob,
           "tree_speculative_sampling_target_only": functools.partial(
               cpu_sampling.tree_speculative_sampling_target_only,
               strict_acceptance=releases.STRICT_ACCEPTANCE.holds(releases.installed_release()))}
    supplied = [name for name in ops if hasattr(module, name) and getattr(module, name) is None]
    for name in supplied:
        setattr(module, name, ops[name])
    if supplied:
        print(f"sglang-eagle-ext: sampled EAGLE verify on this host by {cpu_sampling.__name__} (plain torch; "
              f"SGLang has no {', '.join(supplied)} here; pid {os.getpid()})", file=sys.stderr, flush=True)


_POST_IMPORT = {
    "sglang.srt.layers.rotary_embedding.base": _mark_rotary_cpu,
    "sglang.kernels.ops.speculative.spec_tree": _route_speculative_ops_to_triton,
    "sglang.kernels.ops.speculative.cache_locs": _route_speculative_ops_to_triton,
    "sglang.srt.speculative.eagle_utils": _supply_verify_sampling,
}


class _TorchvisionSchemaFinder(importlib.abc.MetaPathFinder):
    """Defines the torchvision schemas just before torchvision is first imported, then steps aside."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            _define_torchvision_schemas()
        return None


def install() -> bool:
    """Install the hooks in this interpreter; return True when they are active."""
    import torch

    if torch.version.cuda is not None:
        return False
    if not any(isinstance(finder, _TorchvisionSchemaFinder) for finder in sys.meta_path):
        if "torchvision" in sys.modules:
            raise RuntimeError("install() must run before torchvision is imported")
        sys.meta_path.insert(0, _TorchvisionSchemaFinder())
        for name, patch in _POST_IMPORT.items():
            after_import(name, patch)
    return True


def process_environment(env: dict) -> dict:
    """``env`` for an SGLang process tree on a CPU-only host: the shims' folder on ``PYTHONPATH``
    (SGLang's schedulers are fresh processes) and Triton's interpreter for its kernels."""
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [SITE_DIR, env.get("PYTHONPATH")])),
            "TRITON_INTERPRET": "1"}


def process_variables(env: dict) -> dict:
    """The variables :func:`process_environment` sets or changes in ``env``."""
    return {name: value for name, value in process_environment(env).items() if env.get(name) != value}


def engine_options(release) -> dict:
    """SGLang's options (``Engine`` keywords, ``ServerArgs`` fields) for a CPU-only host on SGLang
    ``release``: none it deprecates."""
    graphs = NO_CUDA_GRAPHS if releases.CUDA_GRAPH_BACKEND_FLAGS.holds(release) else LEGACY_NO_CUDA_GRAPHS
    return {**CPU_OPTIONS, **graphs}


def flag_given(flag: str, given: list[str]) -> bool:
    """Whether ``given`` (a user's server arguments) sets ``flag`` (``--flag V`` or ``--flag=V``)."""
    return any(arg == flag or arg.startswith(flag + "=") for arg in given)


def server_flags(given: list[str], kv_tokens: int, release) -> list[str]:
    """:func:`engine_options` of ``release`` and a KV pool of ``kv_tokens`` as server flags
    (``sglang serve``), leaving out any in ``given``. Without ``--max-total-tokens`` SGLang sizes
    the pool from the host's free memory (a CPU server of the demo's tiny models took 6.4 million
    tokens, about 15 GB of a 24 GB machine)."""
    flags = []
    for name, value in {**engine_options(release), "max_total_tokens": kv_tokens}.items():
        flag = "--" + name.replace("_", "-")
        if flag_given(flag, given):
            continue
        flags += [flag] if value is True else [flag, str(value)]
    return flags


# KV-pool tokens a CPU server gets unless told otherwise: several requests of a few thousand tokens.
DEFAULT_KV_TOKENS = 16384
FLOAT32_BYTES = 4


def kv_pool_bytes(layers: int, kv_heads: int, head_dim: int, tokens: int) -> int:
    """Bytes of one model's float32 KV pool: keys and values of every layer for ``tokens``."""
    return 2 * layers * kv_heads * head_dim * tokens * FLOAT32_BYTES
