#!/usr/bin/env bash
# ModelOpt's own EAGLE-3 exports -> tests/producer_files/modelopt/ (format: scripts/producers/record.py).
# A venv at ${PRODUCER_VENVS:-/tmp/producer-venvs}/modelopt with nvidia-modelopt==0.47.0 (its core
# dependencies; of its `hf` extra only transformers, within its pin <5.15, and accelerate: the rest is
# training/data tooling the export path never imports) and torch 2.13.0 (CPU build), then
# scripts/producers/modelopt_write.py in it. Idempotent (a complete venv is reused), any cwd.
# ModelOpt's Megatron export is not run: it needs megatron-core with an initialised model-parallel
# state and Transformer Engine modules (modelopt/torch/speculative/plugins/megatron_eagle.py:29).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${PRODUCER_VENVS:-/tmp/producer-venvs}/modelopt"
PYTHON="${PYTHON:-python3}"
ready() {
    "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
want = {"nvidia-modelopt": "0.47.0", "torch": "2.13.0"}
ok = all(m.version(k).split("+")[0] == v for k, v in want.items())
ok = ok and m.version("transformers").startswith("5.") and m.version("requests")
sys.exit(0 if ok else 1)
PY
}
if [ ! -x "$VENV/bin/python" ]; then
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON" -m venv "$VENV"
fi
if ! ready; then
    "$VENV/bin/pip" install --quiet --upgrade pip
    # --retries 0: where PyTorch's CPU index is unreachable, fall back to the configured indexes at once
    "$VENV/bin/pip" install --quiet --retries 0 torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu
    # requests: modelopt.torch.utils imports it (dataset_utils.py) without declaring it; torch stays pinned
    "$VENV/bin/pip" install --quiet nvidia-modelopt==0.47.0 "transformers>=4.57,<5.15" accelerate requests torch==2.13.0
    ready || { echo "modelopt.sh: $VENV lacks nvidia-modelopt 0.47.0 / torch 2.13.0 / transformers 5.x" >&2; exit 1; }
fi
cd "$ROOT"
"$VENV/bin/python" -W ignore scripts/producers/modelopt_write.py
