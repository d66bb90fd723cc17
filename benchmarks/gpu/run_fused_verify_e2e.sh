#!/usr/bin/env bash
# The end-to-end fused-verify benchmark on a GPU machine where shared/gpu-sglang's installer has put
# SGLang into SITE (default /tmp/site), with this checkout's package staged there as an install, and
# the stock arm running flashinfer's renorm as a normal install does (run from the repository root).
#   usage: [E2E_COMMIT=sha] bash benchmarks/gpu/run_fused_verify_e2e.sh WORKDIR [--trees 0,1,2] [...]
# WORKDIR keeps the models (built once), results.json (one entry per tree) and the engines' logs.
set -euo pipefail
WORKDIR="$1"; shift
source "$(dirname "$0")/stage_package.sh"
export SGL_KERNEL_USE_FLASHINFER=1 SGLANG_KERNEL_USE_FLASHINFER=1  # 0.5.23 renamed the switch
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 benchmarks/gpu/fused_verify_e2e.py "$WORKDIR" "$@"
