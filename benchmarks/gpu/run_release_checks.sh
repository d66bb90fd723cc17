#!/usr/bin/env bash
# A release's correctness checks on a GPU machine where shared/gpu-sglang's installer has put SGLang
# into SITE (default /tmp/site), one after another (none is timed; side by side on a cold machine
# they made no progress in 400 s): the end-to-end rows (run_e2e.sh), the demo (run_demo.sh) and the
# fused-verify server check (fused_verify_server.py, stock with flashinfer's renorm against the
# fused sampler). Run from the repository root.
#   usage: [E2E_COMMIT=sha] bash benchmarks/gpu/run_release_checks.sh OUTDIR
# OUTDIR gets rows.json (+ rows-run.log), demo-<version>.txt, server.json (+ server.log).
set -uo pipefail
OUTDIR="$1"
export E2E_COMMIT="${E2E_COMMIT:-unknown}" DEMO_COMMIT="${E2E_COMMIT:-unknown}"
source "$(dirname "$0")/stage_package.sh"
mkdir -p "$OUTDIR"
LIMIT="${CHECKS_TIMEOUT:-300}"  # per check
E2E_TIMEOUT=$LIMIT bash benchmarks/gpu/run_e2e.sh /tmp/checks-rows > "$OUTDIR/rows-run.log" 2>&1
cp /tmp/checks-rows/results.json "$OUTDIR/rows.json"
DEMO_TIMEOUT=$LIMIT bash benchmarks/gpu/run_demo.sh "$OUTDIR" > /dev/null 2>&1
SGL_KERNEL_USE_FLASHINFER=1 SGLANG_KERNEL_USE_FLASHINFER=1 timeout "$LIMIT" \
  python3 benchmarks/gpu/fused_verify_server.py /tmp/checks-server > "$OUTDIR/server.log" 2>&1
cp /tmp/checks-server/results.json "$OUTDIR/server.json"
grep -hE "TASK|lossless|identical|acceptance|exit status" "$OUTDIR"/rows-run.log "$OUTDIR"/demo-*.txt \
  "$OUTDIR"/server.log | cut -c1-300 | tail -n 40
ls -l "$OUTDIR"
