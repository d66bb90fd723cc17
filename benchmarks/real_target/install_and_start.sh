#!/usr/bin/env bash
# Issue 38's install-and-start call on a GPU machine whose earlier calls left the kit's bundles in /tmp/wh_b,
# FA3's first parts in /tmp/fa3p, vLLM's bundles in /tmp/wv_b and the carry (smol_a, smol_b, the drafters'
# first pieces) in /tmp/rtc; this call carries the rest (README.md, "Device calls"). Run from the checkout:
#   bash benchmarks/real_target/install_and_start.sh LEFT COMMIT
# LEFT: the device seconds `budget_left_s` gave at RT_LEASE_START (default: this call's start; the lease's first
# call can write its end time to a file and the install call, sent in the same batch as the carrying calls,
# count from it); COMMIT: the checkout's commit (the device's copy has no .git). The lease's end goes to
# /tmp/lease_end for the `wait` calls to size themselves by.
# RT_PHASES (default "setup serve vllm": the engines one after the other on one GPU). "setup vllm+serve" runs
# them side by side, SGLang on the first half of the cores and vLLM on the second half (RT_CPUS_* of run_gpu.sh):
# on a two-GPU machine SGLang on GPU 0 and vLLM on GPU 1 (RT_GPU_*), on one GPU both on it, taking turns
# (turns.py: their starts overlap, each measures alone) with KV pools of a set size (RT_GPUS: the GPUs lent, else
# nvidia-smi's count). A phase "adaptive" after them runs
# issue 39's diagnostic arms (docs/adaptive-shape.md sections 14-17) on GPU 0 with the whole host. Without vllm,
# vLLM is not installed (its bundles need not be on the machine).
# Every arm must end before the lease does: the last phase's --deadline is the lease's end less RT_TAIL (default
# 45 s, for the last `wait` to pack and return); an earlier phase's is that less the shares of the phases after
# it: RT_VLLM_SHARE (default 690 s, vLLM's five arms, when vLLM runs after SGLang) and RT_ADAPTIVE_SHARE
# (default 480 s). Arms: RT_SERVE_ARMS, RT_VLLM_ARMS, RT_ADAPTIVE_ARMS (defaults: every arm the issues name, the
# least needed last); RT_SERVE_EXTRA adds serve_bench.py arguments (issue 39's real-target run: "--batches
# 1,16,64 --drift"), RT_ADAPTIVE_EXTRA the adaptive phase's. RT_DRY_RUN=1 prints the phases, each phase's deadline
# (seconds from now), GPU, CPU list and arms, and stops there. Run one after the other, serve must come before vllm
# (refused otherwise); a phase whose deadline is less than 120 s away is warned about (its arms will not start).
# The drafters and their data come from RT_BACK (default gpu_carry/back, what an earlier machine sent back; its
# last pieces travel in this call). Without them the machine trains them first: "regen specforge+speculators" goes
# after setup (about 500 s of the lease before any arm) and the first `wait` after the trainers sends them back.
set -uo pipefail
START=$(date +%s); LEFT="$1"; COMMIT="$2"
LEASE_END=$(( ${RT_LEASE_START:-$START} + LEFT )); END=$(( LEASE_END - ${RT_TAIL:-45} ))
PHASES="${RT_PHASES:-setup serve vllm}"
BACK="${RT_BACK:-gpu_carry/back}"
has_phase() { [[ " ${PHASES//+/ } " == *" $1 "* ]]; }
# the 8B-geometry phases (zipf, serve8b) write their own target and drafter: without a phase that serves the real
# target, the trained drafters are neither carried nor trained
if ! has_phase serve && ! has_phase vllm && ! has_phase adaptive && ! has_phase profile && ! has_phase demo; then
  DRAFTERS=none
elif [ -e "$BACK/SHA256SUMS" ]; then DRAFTERS=carried
else DRAFTERS=trained; [[ " $PHASES " == *" regen "* ]] || PHASES="${PHASES/setup/setup regen specforge+speculators}"
fi
side_by_side() { [[ " $PHASES " == *" vllm+serve "* || " $PHASES " == *" serve+vllm "* ]]; }
halves() { has_phase adaptive2; }  # the adaptive arms in two halves taking turns (RT_PHASES "... adaptive+adaptive2")
VLLM_SHARE=0; ADAPTIVE_SHARE=0
has_phase vllm && ! side_by_side && VLLM_SHARE="${RT_VLLM_SHARE:-690}"
has_phase adaptive && ADAPTIVE_SHARE="${RT_ADAPTIVE_SHARE:-480}"
if has_phase serve && has_phase vllm && ! side_by_side && [[ " $PHASES " != *" serve "*"vllm "* ]]; then
  echo "RT_PHASES=\"$PHASES\": vLLM's share is kept after SGLang's arms, so serve must come before vllm" >&2; exit 2
fi
# GPUs lent (RT_GPUS, else nvidia-smi's count; where it counts none, a dry run plans for two, a run for one)
GPUS="${RT_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}"
[ "${GPUS:-0}" -gt 0 ] 2>/dev/null || GPUS=$([ -n "${RT_DRY_RUN:-}" ] && echo 2 || echo 1)
# the CPUs this process may use (a container's may not start at 0), in two halves, for two engines side by side
cpu_halves() { read -r FIRST_HALF SECOND_HALF < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0))
h = len(c) // 2; print(",".join(map(str, c[:h])), ",".join(map(str, c[h:])))'); }
SHARED_KV_TOKENS=262144  # an SGLang engine's KV pool where another engine shares its GPU (see below)
TURNS=""; KV_ARGS_SERVE=""; KV_ARGS_VLLM=""
if side_by_side; then
  cpu_halves
  # one GPU: both engines on it, taking turns (turns.py: their starts overlap, each measures alone), each KV pool
  # of a set size (SGLang 262,144 tokens, vLLM 8 GiB: each at least five times what 64 requests of the cells hold),
  # so that neither sizes its pool from memory the other is allocating as it starts; vLLM's memory share then only
  # sets the free memory it asks for at its start (vllm/v1/worker/utils.py request_memory): 0.3 of the GPU's
  [ "$GPUS" -lt 2 ] && { TURNS=/tmp/rt/turns.lock; KV_ARGS_SERVE="--kv-tokens $SHARED_KV_TOKENS"
                         KV_ARGS_VLLM="--kv-cache-bytes $(( 8 << 30 )) --memory 0.3"; }
  export RT_GPU_SERVE="${RT_GPU_SERVE:-0}" RT_GPU_VLLM="${RT_GPU_VLLM:-$([ -n "$TURNS" ] && echo 0 || echo 1)}" \
    RT_CPUS_SERVE="${RT_CPUS_SERVE:-$FIRST_HALF}" RT_CPUS_VLLM="${RT_CPUS_VLLM:-$SECOND_HALF}"
fi
export RT_GPU_ADAPTIVE="${RT_GPU_ADAPTIVE:-0}" RT_GPU_ADAPTIVE2="${RT_GPU_ADAPTIVE2:-0}"
# the speculators drafter's arms first (the issue's first drafter; vLLM's chain 3 was its best shape for it in 5 of
# 6 cells of the fourth run and the seventh run's deadline dropped it), the trees last
SERVE_ARMS="${RT_SERVE_ARMS:-plain,speculators/chain1/plugin,speculators/chain/plugin,specforge/chain1/plugin,specforge/chain/plugin,speculators/wide/plugin,specforge/wide/plugin}"
VLLM_ARMS="${RT_VLLM_ARMS:-plain,speculators/k3/vllm,speculators/k1/vllm,specforge/k1/vllm,specforge/k3/vllm}"
# docs/adaptive-shape.md section 17's order (sections 14-16's arms: RT_ADAPTIVE_ARMS): speculation off by the plain
# decode graphs, plain decoding (the off table's reference), the policy with them, then the other off paths
ADAPTIVE_ARMS="${RT_ADAPTIVE_ARMS:-speculators/off-graph/plugin,plain,speculators/adaptive/plugin,speculators/off-graph-skip/plugin,speculators/off-verify/plugin,speculators/off-eager/plugin,speculators/off-skip/plugin}"
# issue 39's 8B-geometry run: plain decoding, the policy with the deferred extend, every fixed shape of its set
# (chain 1, 3, 5), SGLang's default shape (tree 5/4/8) and stock's adaptive mode, the GPU audit of the deferral
SERVE8B_ARMS="${RT_SERVE8B_ARMS:-plain,zipf/adaptive-deferred/plugin,zipf/chain5/plugin,zipf/chain/plugin,zipf/stock-adaptive/plugin,zipf/tree/plugin,zipf/adaptive-deferred-audit/plugin,zipf/chain1/plugin}"
ADAPTIVE2_ARMS=""; KV_ARGS_ADAPTIVE=""; ADAPTIVE_TURNS_FILE=""
if halves; then  # every other arm to the second half; both on GPU 0, each on half of the cores, taking turns
  IFS=, read -ra all_arms <<< "$ADAPTIVE_ARMS"; ADAPTIVE_ARMS=""
  for i in "${!all_arms[@]}"; do
    if [ $(( i % 2 )) = 0 ]; then ADAPTIVE_ARMS="${ADAPTIVE_ARMS:+$ADAPTIVE_ARMS,}${all_arms[$i]}"
    else ADAPTIVE2_ARMS="${ADAPTIVE2_ARMS:+$ADAPTIVE2_ARMS,}${all_arms[$i]}"; fi
  done
  cpu_halves
  export RT_CPUS_ADAPTIVE="${RT_CPUS_ADAPTIVE:-$FIRST_HALF}" RT_CPUS_ADAPTIVE2="${RT_CPUS_ADAPTIVE2:-$SECOND_HALF}"
  KV_ARGS_ADAPTIVE="--kv-tokens $SHARED_KV_TOKENS"; ADAPTIVE_TURNS_FILE=/tmp/rt/adaptive_turns.lock
fi
ADAPTIVE_TURNS="${ADAPTIVE_TURNS_FILE:+--turns $ADAPTIVE_TURNS_FILE}"
SERVE_END=$(( END - ADAPTIVE_SHARE - VLLM_SHARE )); VLLM_END=$(( END - ADAPTIVE_SHARE )); ADAPTIVE_END=$END
ADAPTIVE2_END=$END; SERVE8B_END=$(( END - ADAPTIVE_SHARE ))
for phase in serve vllm serve8b adaptive adaptive2; do
  has_phase "$phase" || continue
  deadline="${phase^^}_END"; arms="${phase^^}_ARMS"; gpu="RT_GPU_${phase^^}"; cpus="RT_CPUS_${phase^^}"
  [ "${!deadline}" -le $(( START + 120 )) ] && \
    echo "warning: $phase's last arm must end $(( ${!deadline} - START )) s from now: its arms will not start" >&2
  [ -n "${RT_DRY_RUN:-}" ] && echo "$phase deadline=$(( ${!deadline} - START )) gpu=${!gpu:-} cpus=${!cpus:-} arms=${!arms}"
done
[ -n "${RT_DRY_RUN:-}" ] && { echo "run phases=${PHASES// /,} drafters=$DRAFTERS turns=${TURNS:-none}" \
                                   "adaptive_turns=${ADAPTIVE_TURNS_FILE:-none}" \
                                   "serve_kv=${KV_ARGS_SERVE// /=} vllm_kv=${KV_ARGS_VLLM// /=} adaptive_kv=${KV_ARGS_ADAPTIVE// /=}"; exit 0; }
TURN_ARGS="${TURNS:+--turns $TURNS}"
echo "$LEASE_END" > /tmp/lease_end
cp whb50/b10/* /tmp/wh_b/ && cp whfa3/p3/* /tmp/fa3p/ && cp -r gpu_carry/wheels gpu_carry/data /tmp/rtc/ || exit 1
if [ "$DRAFTERS" = carried ]; then
  mkdir -p /tmp/rtc/back && cp "$BACK"/drafters.tgz.partag "$BACK"/data.jsonl.gz "$BACK"/SHA256SUMS /tmp/rtc/back/ \
    && (cd /tmp/rtc/back && sha256sum -c --quiet SHA256SUMS) || exit 1
fi
(cd /tmp/wh_b && SKIP_SMOKE=1 bash install_on_gpu.sh /tmp/site > /tmp/inst.log 2>&1) || { tail -20 /tmp/inst.log; exit 1; }
echo "SGLang kit installed after $(( $(date +%s) - START )) s"
# vLLM's install needs the kit's site only; run one after the other, the run reaches its vLLM phase minutes later
if has_phase vllm; then
  (cd /tmp/wv_b && SKIP_SMOKE=1 bash install_vllm.sh /tmp/site_vllm > /tmp/instv.log 2>&1
   echo "vLLM install exit $? at $(date +%T)" >> /tmp/instv.log) &
fi
(source /tmp/site/env.sh && python3 benchmarks/gpu/fa3_ops.py install /tmp/fa3p /tmp/site) || exit 1
# later calls' checkouts lack what this one carried, and the run reads its scripts all along
rm -rf /tmp/src && mkdir /tmp/src \
  && tar cf - --exclude=./whb50 --exclude=./whfa3 --exclude=./gpu_carry --exclude=./wvb . | tar xf - -C /tmp/src
if side_by_side; then  # vLLM's phase begins with setup's end: its install first (about 60 s; at most 300)
  for _ in $(seq 150); do grep -q "vLLM install exit" /tmp/instv.log 2>/dev/null && break; sleep 2; done
  tail -1 /tmp/instv.log
fi
cd /tmp/src || exit 1
echo "run starts $(( $(date +%s) - START )) s into the call; the last arm's deadline in $(( END - $(date +%s) )) s"
CARRY=/tmp/rtc E2E_COMMIT="$COMMIT" RT_PHASES="$PHASES" \
  RT_SERVE_ARGS="--rounds 2 --attention-backend fa3 --arms $SERVE_ARMS --deadline $SERVE_END $KV_ARGS_SERVE $TURN_ARGS ${RT_SERVE_EXTRA:-}" \
  RT_VLLM_ARGS="--rounds 2 --arms $VLLM_ARMS --deadline $VLLM_END $KV_ARGS_VLLM $TURN_ARGS" \
  RT_SERVE8B_ARGS="--rounds 2 --attention-backend fa3 --batches 1,4,16,32,64 --drift --start-timeout 480 --arms $SERVE8B_ARMS --deadline $SERVE8B_END ${RT_SERVE8B_EXTRA:-}" \
  RT_TOKENIZER="${RT_TOKENIZER:-/tmp/rt/target}" \
  RT_ADAPTIVE_ARGS="--rounds 3 --batches 1,64 --attention-backend fa3 --arms $ADAPTIVE_ARMS --deadline $ADAPTIVE_END $KV_ARGS_ADAPTIVE $ADAPTIVE_TURNS ${RT_ADAPTIVE_EXTRA:-}" \
  RT_ADAPTIVE2_ARGS="--rounds 3 --batches 1,64 --attention-backend fa3 --arms $ADAPTIVE2_ARMS --deadline $ADAPTIVE2_END $KV_ARGS_ADAPTIVE $ADAPTIVE_TURNS ${RT_ADAPTIVE_EXTRA:-}" \
  bash benchmarks/real_target/run_gpu.sh start /tmp/rt
