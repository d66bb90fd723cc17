#!/usr/bin/env bash
# Regenerate tests/producer_files/nemo/ with NeMo Automodel's own code (nemo-automodel==0.7.0).
#
# The venv lives outside the repository (${PRODUCER_VENVS:-/tmp/producer-venvs}/nemo) and is reused
# when it already holds the pinned versions. nemo-automodel is installed with --no-deps: it pins
# CUDA-only kernels and training extras (quack-kernels, megatron-fsdp, flashoptim, mistral-common,
# tiktoken, ninja, a CUDA torch, ...) that nothing nemo_write.py runs imports on the CPU (the EAGLE-3
# recipe TrainEagle3Recipe, its draft/target/trainer modules, its chat dataset and checkpointer,
# and serve_sglang --print-only). The hand list is what those modules import: torch (2.13.0, CPU
# build), transformers (its pin, 5.18.0), datasets (the chat dataset loader), torchao and torchdata
# (imported at module level by the recipe's components), pillow and requests (imported by
# nemo_automodel's tokenizer/processor helpers), pyyaml (config.yaml) and safetensors.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${PRODUCER_VENVS:-/tmp/producer-venvs}/nemo"
OUT="$REPO/tests/producer_files/nemo"

want_ok() {
  "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
pins = {"torch": "2.13.0", "transformers": "5.18.0", "nemo-automodel": "0.7.0"}
for name, version in pins.items():
    assert m.version(name).split("+")[0] == version, name
for name in ("datasets", "torchao", "torchdata", "pillow", "requests", "pyyaml", "safetensors"):
    m.version(name)
PY
}

if [ ! -x "$VENV/bin/python" ] || ! want_ok; then
  mkdir -p "$(dirname "$VENV")"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu
  "$VENV/bin/pip" install --quiet "transformers==5.18.0" datasets torchao torchdata pillow requests pyyaml safetensors
  "$VENV/bin/pip" install --quiet --no-deps "nemo-automodel==0.7.0"
  want_ok || { echo "nemo venv at $VENV lacks the pinned versions" >&2; exit 1; }
fi

rm -rf "$OUT"
mkdir -p "$OUT"
"$VENV/bin/python" "$REPO/scripts/producers/nemo_write.py" "$OUT"
