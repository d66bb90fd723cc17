"""What the GPU-only kernel tests need: CUDA, and the tree ops the installed SGLang release calls.

SGLang moved its tree ops between releases (``sgl_kernel`` up to 0.5.20, its JIT ops since 0.5.21,
re-exported by ``spec_tree`` and ``eagle_utils`` in 0.5.23). The compat code declares where each
release looks them up (:mod:`sglang_eagle_ext.sglang.compat.tree_kernels`); the tests compare with
the op found there, so that they follow the release rather than a module name. Without SGLang
(``sgl_kernel`` alone) they compare with ``sgl_kernel``'s ops.
"""

import importlib
import importlib.metadata

import pytest
import torch

from sglang_eagle_ext.sglang.compat import releases, tree_kernels

CUDA = torch.cuda.is_available()


def _installed_release():
    try:
        return releases.installed_release()
    except importlib.metadata.PackageNotFoundError:
        return None


def _release_op(points, name):
    """The op of ``points`` that the installed release calls (the last declared point covering it
    that imports; later points are the newer homes), or ``sgl_kernel.<name>`` without SGLang."""
    if not CUDA:
        return None
    release = _installed_release()
    candidates = [("sgl_kernel", name)] if release is None else [
        (point.module, point.attribute) for point in reversed(points) if point.covers(release)]
    for module_name, attribute in candidates:
        try:
            module = importlib.import_module(module_name)
        except Exception:  # CPU builds, missing wheel or a release without the module: look further
            continue
        if hasattr(module, attribute):
            return getattr(module, attribute)
    return None


RELEASE = _installed_release()
# The acceptance test of the installed release's sampling op (False without SGLang: sgl_kernel's).
STRICT_ACCEPTANCE = RELEASE is not None and releases.STRICT_ACCEPTANCE.holds(RELEASE)
BUILD_OP = _release_op(tree_kernels.BUILD_POINTS, "build_tree_kernel_efficient")
GREEDY_OP = _release_op(tree_kernels.GREEDY_OP_POINTS, "verify_tree_greedy")
SAMPLING_OP = _release_op(tree_kernels.SAMPLING_POINTS, "tree_speculative_sampling_target_only")
SOURCE = f"SGLang {RELEASE}'s ops" if RELEASE is not None else "sgl_kernel's ops"

needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
needs_sgl = pytest.mark.skipif(None in (BUILD_OP, GREEDY_OP, SAMPLING_OP),
                               reason="needs a GPU and the installed SGLang's tree ops (or sgl_kernel)")
