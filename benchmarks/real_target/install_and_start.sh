#!/usr/bin/env bash
# Issue 38's install-and-start call on a GPU machine whose earlier calls left the kit's bundles in /tmp/wh_b,
# FA3's first parts in /tmp/fa3p, vLLM's bundles in /tmp/wv_b and the carry (smol_a, smol_b, the drafters'
# first pieces) in /tmp/rtc; this call carries the rest (README.md, "Device calls"). Run from the checkout:
#   bash benchmarks/real_target/install_and_start.sh LEFT COMMIT
# LEFT: the device seconds `budget_left_s` gave before this call; COMMIT: the checkout's commit (the device's
# copy has no .git). Each engine's last arm must end before the lease does: vLLM's --deadline is this call's
# start + LEFT - RT_TAIL (default 45 s, for the last `wait` to pack and return), SGLang's RT_VLLM_SHARE
# (default 690 s: vLLM's five arms) before that. Arms: RT_SERVE_ARMS and RT_VLLM_ARMS (defaults: every arm
# issue 38 names, the least needed last). RT_PHASES (default "setup serve vllm"): without vllm, vLLM is not
# installed (its bundles need not be on the machine) and RT_VLLM_SHARE defaults to 0; RT_SERVE_EXTRA adds
# serve_bench.py arguments (issue 39's real-target run: "--batches 1,16,64 --drift").
# RT_LEASE_START: the epoch LEFT was read at (default: this call's start). The lease's first call can write its
# end time to a file and the install call, sent in the same batch as the carrying calls, count from it; the
# lease's end (START + LEFT) goes to /tmp/lease_end for the `wait` calls to size themselves by.
set -uo pipefail
START=$(date +%s); LEFT="$1"; COMMIT="$2"
LEASE_END=$(( ${RT_LEASE_START:-$START} + LEFT )); echo "$LEASE_END" > /tmp/lease_end
PHASES="${RT_PHASES:-setup serve vllm}"
case " $PHASES " in *" vllm "*) VLLM_SHARE="${RT_VLLM_SHARE:-690}" ;; *) VLLM_SHARE="${RT_VLLM_SHARE:-0}" ;; esac
SERVE_ARMS="${RT_SERVE_ARMS:-plain,specforge/chain1/plugin,speculators/chain1/plugin,specforge/chain/plugin,speculators/chain/plugin,speculators/wide/plugin,specforge/wide/plugin}"
VLLM_ARMS="${RT_VLLM_ARMS:-plain,speculators/k1/vllm,specforge/k1/vllm,specforge/k3/vllm,speculators/k3/vllm}"
cp whb50/b10/* /tmp/wh_b/ && cp whfa3/p3/* /tmp/fa3p/ && cp -r gpu_carry/wheels gpu_carry/data /tmp/rtc/ \
  && cp gpu_carry/back/drafters.tgz.partag gpu_carry/back/data.jsonl.gz gpu_carry/back/SHA256SUMS /tmp/rtc/back/ \
  || exit 1
(cd /tmp/rtc/back && sha256sum -c --quiet SHA256SUMS) || exit 1
(cd /tmp/wh_b && SKIP_SMOKE=1 bash install_on_gpu.sh /tmp/site > /tmp/inst.log 2>&1) || { tail -20 /tmp/inst.log; exit 1; }
echo "SGLang kit installed after $(( $(date +%s) - START )) s"
# vLLM's install needs the kit's site only; the run reaches its vLLM phase minutes later
case " $PHASES " in *" vllm "*)
  (cd /tmp/wv_b && SKIP_SMOKE=1 bash install_vllm.sh /tmp/site_vllm > /tmp/instv.log 2>&1
   echo "vLLM install exit $? at $(date +%T)" >> /tmp/instv.log) & ;; esac
(source /tmp/site/env.sh && python3 benchmarks/gpu/fa3_ops.py install /tmp/fa3p /tmp/site) || exit 1
# later calls' checkouts lack what this one carried, and the run reads its scripts all along
rm -rf /tmp/src && mkdir /tmp/src \
  && tar cf - --exclude=./whb50 --exclude=./whfa3 --exclude=./gpu_carry --exclude=./wvb . | tar xf - -C /tmp/src
cd /tmp/src || exit 1
END=$(( LEASE_END - ${RT_TAIL:-45} ))
echo "run starts $(( $(date +%s) - START )) s into the call; the last arm's deadline in $(( END - $(date +%s) )) s"
CARRY=/tmp/rtc E2E_COMMIT="$COMMIT" RT_PHASES="$PHASES" \
  RT_SERVE_ARGS="--rounds 2 --attention-backend fa3 --arms $SERVE_ARMS --deadline $(( END - VLLM_SHARE )) ${RT_SERVE_EXTRA:-}" \
  RT_VLLM_ARGS="--rounds 2 --arms $VLLM_ARMS --deadline $END" \
  bash benchmarks/real_target/run_gpu.sh start /tmp/rt
