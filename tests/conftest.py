"""Session-wide setup for CPU test runs.

Both steps must happen before anything imports torchvision or triton:
* the CPU import shims let stock SGLang (and transformers, whose image utilities import the
  CUDA torchvision wheel) import on a CPU-only host;
* without a GPU, Triton kernels can only run in the interpreter.
"""

import os

import torch

from sglang_eagle_ext import cpu_shims

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
cpu_shims.install()
