#!/usr/bin/env bash
# Regenerate tests/producer_files/speculators/ with speculators' own code (speculators==0.9.0).
#
# The venv lives outside the repository (${PRODUCER_VENVS:-/tmp/producer-venvs}/speculators) and is
# reused when it already holds the pinned versions. speculators is installed with --no-deps: it
# requires torchvision and torchaudio (never imported by speculators; from PyPI they would replace
# the CPU torch 2.13.0 with the build they pin) and hs-connectors (installed, it only needs torch and
# safetensors). The hand list is speculators' other requirements, within its own bounds:
# transformers (<= 5.19.0), datasets, loguru, numpy, pydantic(-settings), safetensors, tqdm, typer,
# click, rich, huggingface-hub, pyyaml, psutil, and openai / httpx / aiohttp / protobuf (imported by
# speculators.train.data, which the eagle3 model imports). Python 3.11 (speculators needs >= 3.11).
# speculators_write.py converts the SpecForge producer files (tests/producer_files/specforge/eagle3):
# run scripts/producers/specforge.sh first when those are missing.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${PRODUCER_VENVS:-/tmp/producer-venvs}/speculators"
OUT="$REPO/tests/producer_files/speculators"

want_ok() {
  "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
pins = {"torch": "2.13.0", "speculators": "0.9.0", "hs-connectors": "0.9.0"}
for name, version in pins.items():
    assert m.version(name).split("+")[0] == version, name
for name in ("transformers", "datasets", "loguru", "numpy", "pydantic", "pydantic-settings", "safetensors",
             "tqdm", "typer", "click", "rich", "huggingface-hub", "pyyaml", "psutil", "openai", "httpx",
             "aiohttp", "protobuf"):
    m.version(name)
PY
}

if [ ! -x "$VENV/bin/python" ] || ! want_ok; then
  mkdir -p "$(dirname "$VENV")"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu
  "$VENV/bin/pip" install --quiet "transformers>=5.0.0,<=5.19.0" "datasets>=4.0.0,<=5.1.0" \
    "loguru>=0.7.2,<=0.7.3" "numpy>=2.0.0,<=2.5.4" "pydantic>=2.0.0" pydantic-settings safetensors \
    "tqdm>=4.66.3,<=4.70.1" "typer>=0.12.0" click rich huggingface-hub pyyaml psutil \
    "openai>=2.0.0" httpx aiohttp protobuf
  "$VENV/bin/pip" install --quiet --no-deps "speculators==0.9.0" "hs-connectors==0.9.0"
  want_ok || { echo "speculators venv at $VENV lacks the pinned versions" >&2; exit 1; }
fi

[ -f "$REPO/tests/producer_files/specforge/eagle3/drafter/model.safetensors" ] || {
  echo "tests/producer_files/specforge/eagle3 is missing: run scripts/producers/specforge.sh first" >&2; exit 1; }
mkdir -p "$OUT"
HF_HUB_OFFLINE=1 "$VENV/bin/python" "$REPO/scripts/producers/speculators_write.py" "$OUT"
