#!/usr/bin/env bash
# Build ./.venv-newest: this package with the newest release of every dependency a resolver picks
# today, for CI's short second job (docs/install.md, "What CI runs"). torch stays at 2.13.0, the CPU
# build: every newer torch on PyPI is a multi-GB CUDA build. SGLang is left out: each release pins
# its own dependency set, which `scripts/setup-cpu.sh` tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv-newest/bin/python ]; then
    "$PYTHON" -m venv .venv-newest
fi
.venv-newest/bin/pip install --quiet --upgrade pip
.venv-newest/bin/pip install --quiet --retries 0 --upgrade --upgrade-strategy eager \
    --extra-index-url https://download.pytorch.org/whl/cpu ".[test]" "torch==2.13.0"
echo "newest dependencies:" $(.venv-newest/bin/pip list --format=freeze 2>/dev/null \
    | grep -iE '^(torch|transformers|huggingface.hub|httpx2?|safetensors|packaging|tokenizers)==')
