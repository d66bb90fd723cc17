"""Kernel tests run in Triton's interpreter on machines without a GPU.

``TRITON_INTERPRET`` is read when a ``@triton.jit`` function is defined, i.e. when a kernel module
is imported. The repository-level conftest already sets it before anything imports triton; this
one keeps the kernel tests independent of that, and fails loudly if a kernel module was compiled
for the GPU path before the variable was set.
"""

import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    kernel_modules = [m for name, m in list(sys.modules.items()) if name.startswith("sglang_eagle_ext.kernels.")]
    if kernel_modules:
        from triton.runtime.jit import JITFunction

        if any(isinstance(v, JITFunction) for m in kernel_modules for v in vars(m).values()):
            raise RuntimeError("a kernel module was imported before TRITON_INTERPRET=1 was set")
