"""Route SGLang's tree-kernel call sites to the Triton kernels of this package.

One switch, the environment variable ``SGLANG_EAGLE_EXT_TREE_KERNELS``:

* ``sglang`` (the default): leave SGLang's ops in place;
* ``triton``: bind our kernels.

Opt-in because, as bound here, they are drop-ins under SGLang's own Python (its argmax, softmax
and renorm passes stay): faster than SGLang's ops in the microbenchmarks, the drop-in sampling op
least (``benchmarks/results/tree_kernels.md``), they do not make a server measurably faster end to
end (``benchmarks/results/sglang_e2e.md``). Installing the plugin for a drafter should not change a
server's verify path unasked.

Binding points (SGLang looks every one of them up at call time), by feature detection: a point is
bound when its module imports and has the attribute, whatever the release (binding a point a
release never calls is harmless; missing one it calls would leave SGLang's op in place). Each is a
:class:`~.patch.Target` stating the releases whose code looks it up there (rows of :mod:`.releases`).
The binding is the ``tree-kernels`` row of the patch table (:data:`PATCH`), applied once SGLang's
scheduler is loaded.

* build (the leaf op under SGLang's ``build_tree_kernel_efficient`` wrapper):
  ``sglang.srt.speculative.eagle_utils.sgl_build_tree_kernel_efficient`` (0.5.11 - 0.5.22; from
  ``sgl_kernel`` up to 0.5.20, from the JIT ops 0.5.21 - 0.5.22),
  ``sglang.kernels.ops.speculative.spec_tree.sgl_build_tree_kernel_efficient`` (0.5.23, CUDA/ROCm),
  and the platform dispatcher ``build_tree_kernel_efficient_func`` that 0.5.23's wrapper calls
  (in ``eagle_utils`` and ``spec_tree``);
* greedy: ``verify_tree_greedy``, imported inside ``verify_tree_greedy_func`` from ``sgl_kernel``
  (up to 0.5.20) or from the JIT ops' ``sglang.kernels.ops.speculative.tree`` (0.5.21 - 0.5.22),
  NGRAM's module-level copy in ``ngram_info`` (up to 0.5.13), and ``verify_tree_greedy_func`` in
  ``eagle_utils`` and in the modules holding a copy (``eagle_info``, ``eagle_info_v2``, up to
  0.5.13; 0.5.23 imports it at module level);
* sampling: ``tree_speculative_sampling_target_only`` in ``eagle_info`` / ``eagle_info_v2`` /
  ``ngram_info`` (module-level imports up to 0.5.13), ``sgl_kernel`` (imported inside
  ``eagle_sample``, 0.5.14 - 0.5.20), ``sglang.kernels.ops.speculative.sampling`` (imported inside
  ``eagle_sample``, 0.5.21 - 0.5.22) and ``eagle_utils`` (module level, 0.5.23). The drop-in
  applies the installed release's acceptance test (:data:`~.releases.STRICT_ACCEPTANCE`).

Only the op-level drop-ins are bound here: SGLang still computes the argmax and the renormalised
probabilities itself. The fused sampler (:func:`~sglang_eagle_ext.kernels.sampling.
tree_sampling_from_logits`) serves sampled verify through :mod:`.fused_verify`, which wraps SGLang's
verify function rather than a kernel call site and has its own switch; the fused greedy op
(:func:`~sglang_eagle_ext.kernels.verify_greedy.verify_tree_greedy_from_logits`) is not wired into
SGLang.
"""

from __future__ import annotations

import functools
import importlib
from typing import Callable, Dict, List, Tuple

from sglang_eagle_ext import env
from sglang_eagle_ext.sglang.compat import releases
from sglang_eagle_ext.sglang.compat.patch import SCHEDULER_MODULE, Patch, Target

ENV_SWITCH = "SGLANG_EAGLE_EXT_TREE_KERNELS"
CHOICES = ("triton", "sglang")

_SPEC = "sglang.srt.speculative."
_EAGLE_UTILS = _SPEC + "eagle_utils"
_JIT = "sglang.kernels.ops.speculative."
_UP_TO_0_5_13 = releases.VERIFY_IN_WORKER_INPUTS.releases
_SPEC_TREE = releases.SPEC_TREE_DISPATCHERS.releases
_SAMPLING = "tree_speculative_sampling_target_only"
_IN_EAGLE_SAMPLE = (_EAGLE_UTILS + ".eagle_sample",)
# The functions that import the greedy op in their body (0.5.23: the platform dispatcher's)
_GREEDY_IMPORTERS = (_EAGLE_UTILS + ".verify_tree_greedy_func", _JIT + "spec_tree.verify_tree_greedy_func")
BUILD_POINTS = [
    Target(releases.TREE_BUILD_IN_EAGLE_UTILS.releases, _EAGLE_UTILS, "sgl_build_tree_kernel_efficient",
           absent_elsewhere=True),
    Target(_SPEC_TREE, _JIT + "spec_tree", "sgl_build_tree_kernel_efficient", absent_elsewhere=True),
]
BUILD_FUNC_POINTS = [
    Target(_SPEC_TREE, _EAGLE_UTILS, "build_tree_kernel_efficient_func", absent_elsewhere=True),
    Target(_SPEC_TREE, _JIT + "spec_tree", "build_tree_kernel_efficient_func", absent_elsewhere=True),
]
GREEDY_OP_POINTS = [
    Target(releases.EVERY_RELEASE.releases, "sgl_kernel", "verify_tree_greedy", imported_in=_GREEDY_IMPORTERS),
    Target(releases.JIT_TREE_OPS.releases, _JIT + "tree", "verify_tree_greedy", imported_in=_GREEDY_IMPORTERS,
           absent_elsewhere=True),
    Target(_UP_TO_0_5_13, _SPEC + "ngram_info", "verify_tree_greedy", absent_elsewhere=True),
]
GREEDY_FUNC_POINTS = [
    Target(releases.EVERY_RELEASE.releases, _EAGLE_UTILS, "verify_tree_greedy_func"),
    Target(_UP_TO_0_5_13, _SPEC + "eagle_info", "verify_tree_greedy_func", absent_elsewhere=True),
    Target(_UP_TO_0_5_13, _SPEC + "eagle_info_v2", "verify_tree_greedy_func", absent_elsewhere=True),
]
SAMPLING_POINTS = [
    Target(_UP_TO_0_5_13, _SPEC + "eagle_info", _SAMPLING, absent_elsewhere=True),
    Target(_UP_TO_0_5_13, _SPEC + "eagle_info_v2", _SAMPLING, absent_elsewhere=True),
    Target(_UP_TO_0_5_13, _SPEC + "ngram_info", _SAMPLING, absent_elsewhere=True),
    Target(releases.SGL_KERNEL_SAMPLING.releases, "sgl_kernel", _SAMPLING, imported_in=_IN_EAGLE_SAMPLE,
           absent_elsewhere=True),
    Target(releases.JIT_SAMPLING_OP.releases, _JIT + "sampling", _SAMPLING, imported_in=_IN_EAGLE_SAMPLE,
           absent_elsewhere=True),
    Target(_SPEC_TREE, _EAGLE_UTILS, _SAMPLING, absent_elsewhere=True),
]

_originals: Dict[Tuple[str, str], Callable] = {}


def _retrive_spelling(fn):
    """Accept SGLang's two keyword spellings (``retrive_*`` of the op schema, ``retrieve_*``)."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        for key in [k for k in kwargs if k.startswith("retrieve_")]:
            kwargs["retrive_" + key[len("retrieve_"):]] = kwargs.pop(key)
        return fn(*args, **kwargs)

    return call


def _build_op():
    from sglang_eagle_ext.kernels.tree_build import build_tree_kernel_efficient

    return _retrive_spelling(build_tree_kernel_efficient)


def _build_func():
    from sglang_eagle_ext.kernels.tree_build import build_tree_kernel_efficient

    def build_tree_kernel_efficient_func(parent_list, top_scores_index, seq_lens, tree_mask, positions,
                                         retrive_index, retrive_next_token, retrive_next_sibling, topk,
                                         spec_steps, num_verify_tokens, tree_mask_mode):
        """SGLang 0.5.23's ``build_tree_kernel_efficient_func`` contract (in place, returns None)."""
        build_tree_kernel_efficient(parent_list, top_scores_index, seq_lens, tree_mask, positions, retrive_index,
                                    retrive_next_token, retrive_next_sibling, topk, spec_steps,
                                    num_verify_tokens, int(tree_mask_mode))

    return _retrive_spelling(build_tree_kernel_efficient_func)


def _greedy_op():
    from sglang_eagle_ext.kernels.verify_greedy import verify_tree_greedy

    return _retrive_spelling(verify_tree_greedy)


def _greedy_func():
    from sglang_eagle_ext.kernels.verify_greedy import verify_tree_greedy

    def verify_tree_greedy_func(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                retrive_next_token, retrive_next_sibling, target_predict, topk=-1):
        """SGLang's ``verify_tree_greedy_func`` contract: run the op, return its three outputs."""
        del topk  # SGLang routes topk=1 to other platforms' kernels; ours handles every tree
        verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index,
                           retrive_next_token, retrive_next_sibling, target_predict)
        return predicts, accept_index, accept_token_num

    return _retrive_spelling(verify_tree_greedy_func)


def _sampling_op():
    from sglang_eagle_ext.kernels.sampling import tree_speculative_sampling_target_only

    strict = releases.STRICT_ACCEPTANCE.holds(releases.installed_release())

    @functools.wraps(tree_speculative_sampling_target_only)
    def release_sampling_op(*args, **kwargs):
        tree_speculative_sampling_target_only(*args, strict_acceptance=strict, **kwargs)

    return _retrive_spelling(release_sampling_op)


def selected_backend() -> str:
    """The switch's value: ``triton`` or ``sglang``."""
    return env.choice(ENV_SWITCH, CHOICES, "sglang")


def _bind(points: List[Target], make: Callable[[], Callable], patched: List[str]) -> None:
    replacement = None
    for point in points:
        try:
            module = importlib.import_module(point.module)
        except Exception:  # absent in this release, or not importable on this platform
            continue
        if not hasattr(module, point.name):
            continue
        replacement = replacement or make()
        _originals.setdefault((point.module, point.name), getattr(module, point.name))
        setattr(module, point.name, replacement)
        patched.append(f"{point.path} -> sglang_eagle_ext.kernels ({replacement.__name__})")


def apply(backend: str | None = None) -> List[str]:
    """Bind our kernels at every binding point present, per the switch; return what was bound.

    ``backend`` is the switch's value when the caller has read it already (the plugin reads it at
    start-up, where a bad value stops the server), else :func:`selected_backend` is read here.
    Idempotent. With ``SGLANG_EAGLE_EXT_TREE_KERNELS=sglang`` it binds nothing and undoes an
    earlier :func:`apply` of this process.
    """
    if (backend or selected_backend()) == "sglang":
        restore()
        return []
    patched: List[str] = []
    _bind(BUILD_POINTS, _build_op, patched)
    _bind(BUILD_FUNC_POINTS, _build_func, patched)
    _bind(GREEDY_OP_POINTS, _greedy_op, patched)
    _bind(GREEDY_FUNC_POINTS, _greedy_func, patched)
    _bind(SAMPLING_POINTS, _sampling_op, patched)
    return patched


def restore() -> List[str]:
    """Put back every SGLang function :func:`apply` replaced; return what was restored."""
    restored = []
    for (module_name, attr), original in list(_originals.items()):
        setattr(importlib.import_module(module_name), attr, original)
        restored.append(f"{module_name}.{attr}")
        del _originals[(module_name, attr)]
    return restored


def describe(points: list[str]) -> str:
    """What :func:`apply` returned, as the activation log's phrase."""
    if not points:
        return f"SGLang's ({ENV_SWITCH}=sglang)"
    sites = [point.split(" -> ")[0].replace("sglang.srt.speculative.", "") for point in points]
    return f"Triton, bound at {len(sites)} call sites ({', '.join(sites)})"


def _bind_once_scheduler_loads(_scheduler_module) -> str:
    return "tree kernels: " + describe(apply())


# Its SGLang code is the binding points above, bound wherever present.
PATCH = Patch("tree-kernels", releases.EVERY_RELEASE.releases, SCHEDULER_MODULE, _bind_once_scheduler_loads, (),
              switch=lambda release: selected_backend())
