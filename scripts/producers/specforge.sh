#!/usr/bin/env bash
# Regenerate tests/producer_files/specforge/ with SpecForge's own code (specforge==0.2.0).
#
# The venv lives outside the repository (${PRODUCER_VENVS:-/tmp/producer-venvs}/specforge) and is
# reused when it already holds the pinned versions. specforge is installed with --no-deps: it pins
# torch 2.11.0 (a CUDA build), sglang 0.5.14, wandb, tensorboard, yunchang, openai-harmony, ...;
# none of them is imported by what specforge_write.py runs (the EAGLE-3 draft model and config
# classes, the vocab-mapping generator, Eagle3TrainStrategy's checkpoint filter, CheckpointManager
# and `specforge export --to sglang`). The hand list is what those modules import: torch (2.13.0,
# CPU build, beside the 2.11.0 pin), transformers (its pin, 5.8.1), datasets and tqdm
# (specforge.data.preprocessing), pydantic and pyyaml (specforge.config, imported by the CLI),
# safetensors and numpy. Triton is not needed: only the trainer's loss imports it, and the recorded
# forward calls the draft module's methods in the trainer's order instead (specforge_write.py).
# TORCHDYNAMO_DISABLE=1: SpecForge wraps RMSNorm and RoPE in torch.compile; eager is exact on a CPU.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${PRODUCER_VENVS:-/tmp/producer-venvs}/specforge"
OUT="$REPO/tests/producer_files/specforge"

want_ok() {
  "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
pins = {"torch": "2.13.0", "transformers": "5.8.1", "specforge": "0.2.0"}
for name, version in pins.items():
    assert m.version(name).split("+")[0] == version, name
for name in ("datasets", "tqdm", "pydantic", "pyyaml", "safetensors", "numpy"):
    m.version(name)
PY
}

if [ ! -x "$VENV/bin/python" ] || ! want_ok; then
  mkdir -p "$(dirname "$VENV")"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu
  "$VENV/bin/pip" install --quiet "transformers==5.8.1" datasets tqdm pydantic pyyaml safetensors numpy
  "$VENV/bin/pip" install --quiet --no-deps "specforge==0.2.0"
  want_ok || { echo "specforge venv at $VENV lacks the pinned versions" >&2; exit 1; }
fi

mkdir -p "$OUT"
TORCHDYNAMO_DISABLE=1 "$VENV/bin/python" "$REPO/scripts/producers/specforge_write.py" "$OUT"
