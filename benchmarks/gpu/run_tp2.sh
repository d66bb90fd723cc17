#!/usr/bin/env bash
# Issue 37's GPU work on a two-GPU machine where shared/gpu-sglang's installer has put SGLang into SITE
# (default /tmp/site), this checkout staged as an install (stage_package.sh); run from the repository root.
#   bash benchmarks/gpu/run_tp2.sh start ROOT          # every phase in the background (its own session), returns
#   bash benchmarks/gpu/run_tp2.sh wait ROOT SECONDS   # until the run ends or SECONDS pass; packs ROOT into $OUT
#   bash benchmarks/gpu/run_tp2.sh run ROOT            # the phases in the foreground
# Phases, one after another (TP2_PHASES picks; "a+b" runs a and b side by side, both untimed):
#   rows        e2e_sglang.py --tp 2: the end-to-end rows at TP 2, with a TP-1 baseline beside them
#   server      fused_verify_server.py with FUSED_VERIFY_TP=2: stock against the fused sampler, two GPUs
#   acceptance  tp_acceptance.py: the demo's trained drafter at TP 1 and TP 2 (models in TP2_DEMO_MODELS)
#   speed       tp_speed.py: tokens/s at TP 1 and TP 2, EAGLE-3 and plain decoding, 8B geometry
#   fused       fused_verify_e2e.py --tp 2: tree 4/3/8, batches 16 and 64, with its A/A control
# Each phase's limit is TP2_LIMIT_<PHASE> seconds; its whole process group is ended after it.
# TP2_DRY=1: each phase runs its script's --dry-run (no GPU needed). E2E_COMMIT names the commit.
set -uo pipefail
MODE="$1"; ROOT="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/phases.sh"
PHASES="${TP2_PHASES:-rows server+acceptance speed fused}"
DEMO_MODELS="${TP2_DEMO_MODELS:-.tp2/demo}"
# NVLink multicast stays off in every process SGLang starts (KINDS.md)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export E2E_COMMIT="${E2E_COMMIT:-unknown}" PYTHONUNBUFFERED=1

phase_command() {  # the shell command of one phase
  local dry=""; [ -n "${TP2_DRY:-}" ] && dry="--dry-run"
  case "$1" in
    rows) echo "E2E_TASK_TIMEOUT=\${TP2_TASKS_S:-300} python3 benchmarks/gpu/e2e_sglang.py --out $ROOT/rows --tp 2 $dry" ;;
    server) if [ -n "$dry" ]; then echo "echo server: FUSED_VERIFY_TP=2 python3 benchmarks/gpu/fused_verify_server.py $ROOT/server";
            else echo "SGL_KERNEL_USE_FLASHINFER=1 SGLANG_KERNEL_USE_FLASHINFER=1 FUSED_VERIFY_TP=2 python3 benchmarks/gpu/fused_verify_server.py $ROOT/server"; fi ;;
    acceptance) echo "while [ ! -e $ROOT/demo.done ]; do sleep 2; done; python3 benchmarks/gpu/tp_acceptance.py $ROOT/acceptance --models \${TP2_DEMO_MODELS:-$DEMO_MODELS} $dry" ;;
    speed) echo "python3 benchmarks/gpu/tp_speed.py $ROOT/speed --rounds \${TP2_SPEED_ROUNDS:-4} $dry" ;;
    fused) if [ -n "$dry" ]; then echo "echo fused: run_fused_verify_e2e.sh $ROOT/fused --trees 1 --batches 16,64 --rounds 6 --control --tp 2";
           else echo "bash benchmarks/gpu/run_fused_verify_e2e.sh $ROOT/fused --trees 1 --batches 16,64 --rounds \${TP2_FUSED_ROUNDS:-6} --control --tp 2"; fi ;;
    *) echo "unknown phase $1" >&2; return 1 ;;
  esac
}

limit_of() {
  local default; case "$1" in rows) default=360;; server) default=480;; acceptance) default=420;;
    speed) default=560;; fused) default=560;; esac
  local var="TP2_LIMIT_${1^^}"; echo "${!var:-$default}"
}

run_phase() { local command; command=$(phase_command "$1") || return 1; run_phase_command "$1" "$command" "$(limit_of "$1")"; }

case "$MODE" in
  start)
    mkdir -p "$ROOT"
    setsid nohup bash "$HERE/run_tp2.sh" run "$ROOT" > "$ROOT/driver.log" 2>&1 < /dev/null &
    echo "started run $! into $ROOT" ;;
  run)
    mkdir -p "$ROOT"
    if [ -z "${TP2_DRY:-}" ]; then
      source "$HERE/stage_package.sh"
      nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$ROOT/device.txt"
      nvidia-smi topo -m > "$ROOT/topology.txt" 2>&1 || true
      python3 -c "import sglang, torch; print('sglang', sglang.__version__, 'torch', torch.__version__, 'gpus', torch.cuda.device_count())" | tee -a "$ROOT/device.txt"
    fi
    echo "# $(date -u +%FT%TZ) commit $E2E_COMMIT phases: $PHASES" | tee "$ROOT/status.txt"
    # tiny targets built on the CPU machine and carried (their build takes minutes of CPU time):
    # target_std2.0 is e2e_sglang's (rows, and the speed task's tokenizer), target_std1.0 the server check's;
    # build_tiny_target reuses a directory built with the same settings
    PREBUILT="${TP2_PREBUILT:-.tp2/prebuilt}"
    for pair in rows:target_std2.0 speed:target_std2.0 server:target_std1.0; do
      if [ -e "$PREBUILT/${pair#*:}/config.json" ] && [ ! -e "$ROOT/${pair%%:*}/models/target" ]; then
        mkdir -p "$ROOT/${pair%%:*}/models" && cp -r "$PREBUILT/${pair#*:}" "$ROOT/${pair%%:*}/models/target" \
          && echo "# carried tiny target ${pair#*:} -> ${pair%%:*}/models/target" | tee -a "$ROOT/status.txt"
      fi
    done
    if [ -z "${TP2_DRY:-}" ] && [[ " $PHASES " == *acceptance* ]] && [ ! -e "$DEMO_MODELS/drafter-2layer/config.json" ]; then
      # the demo's models, built here in the demo's pinned CPU process while the first phases run
      export TP2_DEMO_MODELS="$ROOT/demo"
      echo "# demo models not carried: building them into $TP2_DEMO_MODELS" | tee -a "$ROOT/status.txt"
      (python3 -m sglang_eagle_ext.demo.build "$TP2_DEMO_MODELS" sglang > "$ROOT/demo_build.log" 2>&1; touch "$ROOT/demo.done") &
    else
      touch "$ROOT/demo.done"
    fi
    run_phases "$PHASES" ;;
  wait)
    wait_until_done "${3:-500}"
    OUT="${OUT:-/tmp/tp2_out}"; mkdir -p "$OUT"
    for name in rows server acceptance speed fused; do
      [ -d "$ROOT/$name" ] || [ -e "$ROOT/$name.log" ] || continue
      (cd "$ROOT" && tar czf "$OUT/$name.tgz" --exclude=models --exclude=plugin --exclude='*.safetensors' \
        $( [ -d "$name" ] && echo "$name" ) $( [ -e "$name.log" ] && echo "$name.log" ))
    done
    (cd "$ROOT" && tar czf "$OUT/driver.tgz" status.txt driver.log device.txt topology.txt demo_build.log 2>/dev/null)
    for name in rows server acceptance speed fused; do
      [ -e "$ROOT/$name.log" ] && { echo "== $name"; grep -hE "TASK|identical|accept|batch|ready|tree |Error|error|Traceback" "$ROOT/$name.log" | cut -c1-400 | tail -n 12; }
    done
    ls -l "$OUT" ;;
  *) echo "usage: run_tp2.sh start|run|wait ROOT [SECONDS]" >&2; exit 2 ;;
esac
