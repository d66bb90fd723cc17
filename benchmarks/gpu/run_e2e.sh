#!/usr/bin/env bash
# Run the end-to-end EAGLE-3 rows on a GPU machine where shared/gpu-sglang's installer has put
# SGLang into SITE (default /tmp/site), with this checkout's package staged there as an install
# (stage_package.sh; run from the repository root).
#   usage: [E2E_COMMIT=sha] bash benchmarks/gpu/run_e2e.sh OUTDIR [--throughput] [--only TASKS]
# OUTDIR keeps results.json, run.log and tasks.tgz (per-task JSON and logs).
set -euo pipefail
OUTDIR="$1"; shift
source "$(dirname "$0")/stage_package.sh"
mkdir -p "$OUTDIR"
export E2E_COMMIT="${E2E_COMMIT:-unknown}"
python3 -P -c "import sglang_eagle_ext.sglang.compat.tree_kernels as b; print('tree-kernel binding:', b.__name__)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUTDIR/device.txt"
timeout "${E2E_TIMEOUT:-560}" python3 benchmarks/gpu/e2e_sglang.py --out "$OUTDIR" "$@" 2>&1 \
  | tee "$OUTDIR/run.log" | grep -E "TASK|Error|Traceback" | cut -c1-1500 || true
rm -rf "$OUTDIR/models"
(cd "$OUTDIR" && tasks=$(ls ./*.json | grep -v '^./results.json$') \
  && tar czf tasks.tgz $tasks logs && rm -rf $tasks logs) || true
ls -l "$OUTDIR"
