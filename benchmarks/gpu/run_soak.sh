#!/usr/bin/env bash
# The soak (benchmarks/soak.py) on a GPU machine where shared/gpu-sglang's installer has put SGLang into
# SITE (default /tmp/site), with this checkout's package staged there as an install; run from the
# repository root, in two calls that each fit the device's per-command limit:
#   start  launches the soak in its own session (setsid nohup: it outlives the call): the demo's models,
#          built on the first run (their config says float32: --dtype bfloat16 is passed), served by
#          `sglang-eagle serve` in bf16 with tree 4/3/8, the fused sampler
#          on (SGLANG_EAGLE_EXT_FUSED_VERIFY=1), decode CUDA graphs up to batch 64; the sequential greedy
#          pass; then SOAK_CLIENTS (64) clients for SOAK_DURATION_S (630) seconds. It prints the soak's
#          progress and returns START_HOLD_S (540) seconds after it began, or as soon as the soak ends.
#   wait   blocks until the soak ends (at most WAIT_LIMIT_S, 590 s), then copies the results JSON, the
#          soak's output and the server log's compressed tail into $OUT.
#   usage: [SOAK_COMMIT=sha] bash benchmarks/gpu/run_soak.sh start; bash benchmarks/gpu/run_soak.sh wait
set -euo pipefail
WORK=/tmp/soak
START_HOLD_S="${START_HOLD_S:-540}"
WAIT_LIMIT_S="${WAIT_LIMIT_S:-590}"
SERVER_LOG_TAIL_LINES=20000

alive() { kill -0 "$(cat "$WORK/pid")" 2>/dev/null; }

# print the soak's new output lines until $1 seconds have passed since $2 or the soak ends
follow() {
  local until=$(( $2 + $1 )) shown=0
  while alive && [ "$(date +%s)" -lt "$until" ]; do
    sleep 10
    local lines; lines=$(wc -l < "$WORK/soak.log")
    if [ "$lines" -gt "$shown" ]; then sed -n "$((shown + 1)),${lines}p" "$WORK/soak.log"; shown=$lines; fi
  done
  sed -n "$((shown + 1)),\$p" "$WORK/soak.log"
}

case "${1:-}" in
  start)
    began=$(date +%s)
    source "$(dirname "$0")/stage_package.sh"
    if ! python3 -c "import jsonschema, openai, psutil, httpx"; then
      echo "run_soak: the soak needs jsonschema, openai, psutil and httpx in SITE" >&2; exit 2
    fi
    if [ -f "$WORK/pid" ] && alive; then
      echo "run_soak: a soak is already running (pid $(cat "$WORK/pid"))" >&2; exit 2
    fi
    rm -rf "$WORK/run" && mkdir -p "$WORK/run"
    nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
    export SGLANG_EAGLE_EXT_FUSED_VERIFY=1 SGL_KERNEL_USE_FLASHINFER=1 SGLANG_KERNEL_USE_FLASHINFER=1
    setsid nohup python3 benchmarks/soak.py --out "$WORK/run/soak.json" --workdir "$WORK/models" --device cuda \
      --clients "${SOAK_CLIENTS:-64}" --duration-s "${SOAK_DURATION_S:-630}" --topk 4 --num-steps 3 \
      --num-draft-tokens 8 --commit "${SOAK_COMMIT:-unknown}" \
      -- --dtype bfloat16 --attention-backend triton --cuda-graph-max-bs-decode 64 --disable-prefill-cuda-graph \
      --mem-fraction-static 0.7 --max-total-tokens 131072 > "$WORK/soak.log" 2>&1 < /dev/null &
    echo $! > "$WORK/pid"
    follow "$START_HOLD_S" "$began"
    if alive; then echo "run_soak: the soak is running; now: bash benchmarks/gpu/run_soak.sh wait"
    else echo "run_soak: the soak has ended (its output is above); wait copies its files"; fi
    ;;
  wait)
    [ -f "$WORK/pid" ] || { echo "run_soak: no soak was started here" >&2; exit 2; }
    follow "$WAIT_LIMIT_S" "$(date +%s)"
    if alive; then echo "run_soak: the soak is still running after ${WAIT_LIMIT_S} s; call wait again" >&2; fi
    cp "$WORK/soak.log" "$OUT/soak_output.txt"
    if [ -f "$WORK/run/soak.json" ]; then
      version=$(python3 -c "import json; print(json.load(open('$WORK/run/soak.json'))['sglang'])")
      gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | awk '{print tolower($NF)}')
      cp "$WORK/run/soak.json" "$OUT/${gpu}_sglang-$version.json"
    fi
    if [ -f "$WORK/run/soak.server.log" ]; then
      tail -n "$SERVER_LOG_TAIL_LINES" "$WORK/run/soak.server.log" | gzip > "$OUT/server_log_tail.txt.gz"
    fi
    if alive; then exit 3; fi
    ;;
  *)
    echo "usage: bash benchmarks/gpu/run_soak.sh start|wait" >&2
    exit 2
    ;;
esac
