"""What the GPU-only kernel tests need: CUDA, and SGLang's CUDA ops (``sgl_kernel``) to compare with."""

import pytest
import torch

CUDA = torch.cuda.is_available()
try:
    import sgl_kernel  # SGLang's CUDA ops

    HAVE_SGL_KERNEL = CUDA
except Exception:  # CPU builds or missing wheel: any import failure means "not available"
    sgl_kernel = None
    HAVE_SGL_KERNEL = False

needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
needs_sgl = pytest.mark.skipif(not HAVE_SGL_KERNEL, reason="needs a GPU and sgl_kernel")
