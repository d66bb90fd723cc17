#!/usr/bin/env bash
# Regenerate tests/producer_files/angelslim/ with AngelSlim's own code (angelslim==0.5.0).
#
# The venv lives outside the repository (${PRODUCER_VENVS:-/tmp/producer-venvs}/angelslim) and is
# reused when it already holds the pinned versions. angelslim is installed with --no-deps: its
# published requirements pull triton, lm_eval, ray, tiktoken, torchvision, pyarrow, ... (none used
# by the EAGLE-3 draft model, its draft-model factory or Eagle3Trainer.save_model), and the wheel's
# top-level import is broken anyway (compressor/qad/qad.py imports compressor/qat, which the wheel
# does not ship; angelslim_write.py imports the EAGLE-3 modules past the package __init__s).
# The hand list is what those modules import: torch, transformers (<= 5.18: the trial found newer
# ones break it; pinned to 5.18.0), accelerate (transformers.Trainer), datasets (angelslim.utils,
# imported by the draft model's data_utils), safetensors and huggingface_hub (via transformers).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${PRODUCER_VENVS:-/tmp/producer-venvs}/angelslim"
OUT="$REPO/tests/producer_files/angelslim"

want_ok() {
  "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
pins = {"torch": "2.13.0", "transformers": "5.18.0", "angelslim": "0.5.0"}
for name, version in pins.items():
    assert m.version(name).split("+")[0] == version, name
for name in ("accelerate", "datasets", "safetensors"):
    m.version(name)
PY
}

if [ ! -x "$VENV/bin/python" ] || ! want_ok; then
  mkdir -p "$(dirname "$VENV")"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu
  "$VENV/bin/pip" install --quiet "transformers==5.18.0" accelerate datasets safetensors
  "$VENV/bin/pip" install --quiet --no-deps "angelslim==0.5.0"
  want_ok || { echo "angelslim venv at $VENV lacks the pinned versions" >&2; exit 1; }
fi

mkdir -p "$OUT"
"$VENV/bin/python" "$REPO/scripts/producers/angelslim_write.py" "$OUT"
