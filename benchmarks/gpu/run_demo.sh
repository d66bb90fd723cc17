#!/usr/bin/env bash
# The README's main command on a GPU: `python -m sglang_eagle_ext demo` with stock SGLang from
# SITE (shared/gpu-sglang's installer) and this checkout staged as an install; the transcript goes
# to OUTDIR/demo-<sglang version>.txt with the device, versions and wall time.
#   usage: SITE=/tmp/s16 bash benchmarks/gpu/run_demo.sh OUTDIR [demo options]
set -euo pipefail
OUTDIR="$1"; shift
source "$(dirname "$0")/stage_package.sh"
mkdir -p "$OUTDIR"
VERSION=$(python3 -c "import importlib.metadata as m; print(m.version('sglang'))")
LOG="$OUTDIR/demo-$VERSION.txt"
{
  echo "\$ python -m sglang_eagle_ext demo --workdir /tmp/demo $*"
  echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)," \
       "sglang $VERSION, torch $(python3 -c 'import torch; print(torch.__version__)'), commit ${DEMO_COMMIT:-unknown}"
  start=$(date +%s)
  status=0
  timeout "${DEMO_TIMEOUT:-560}" python3 -m sglang_eagle_ext demo --workdir /tmp/demo "$@" || status=$?
  echo "# exit status $status, wall time $(( $(date +%s) - start )) s"
} 2>&1 | tee "$LOG"
