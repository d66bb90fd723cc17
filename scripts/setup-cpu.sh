#!/usr/bin/env bash
# Build ./.venv on a CPU-only machine: this package with its `cpu` extra (torch 2.13 CPU and what
# SGLang 0.5.23 imports on the CPU path; its full dependency set is several GB of CUDA wheels that
# a CPU never uses), SGLang 0.5.23 without its dependencies, and the test tools. No torchvision:
# PyPI's wheel is a CUDA build that cannot be imported with torch+cpu, and neither SGLang's text
# serving path nor transformers' Llama / Qwen classes need it (an environment built before keeps
# one, so it is removed).
# Idempotent: a second run only re-installs this package (a regular install: every editable mode
# of setuptools prints a warning on each run).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
installed() { .venv/bin/python -c "import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in sys.argv[1:]))" "$@"; }
if ! installed sglang torch triton pytest hypothesis transformers; then
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet ".[cpu,test]"
    .venv/bin/pip install --quiet --no-deps sglang==0.5.23
fi
if installed torchvision; then
    .venv/bin/pip uninstall --quiet --yes torchvision
fi
.venv/bin/pip install --quiet --no-deps --force-reinstall .
# Without this package's CPU shims: the environment itself must import what the demo and tests use.
.venv/bin/python -c "import sglang, sglang.srt.server_args, transformers; from transformers import LlamaConfig; print('environment ready: sglang', sglang.__version__)"
