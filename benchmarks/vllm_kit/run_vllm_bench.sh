#!/usr/bin/env bash
# vllm_bench.py on the GPU machine, in the background across device calls (a machine goes back ~30 s after
# a call ends, and one call runs 10 minutes at most). Needs the vLLM kit installed (/tmp/site_vllm) and the
# real-target run's target, drafters and prompts (benchmarks/real_target/run_gpu.sh: ROOT/target,
# ROOT/drafters/{speculators,specforge}, /tmp/rt_carry/data/mtbench.jsonl). Run from the repository root:
#   bash benchmarks/vllm_kit/run_vllm_bench.sh start ROOT [vllm_bench.py options...]   # returns at once
#   bash benchmarks/vllm_kit/run_vllm_bench.sh wait ROOT SECONDS   # until done or SECONDS; results into $OUT
# Results: ROOT/vllm/vllm_bench.json and one log per arm; `wait` packs them as $OUT/vllm_results.tgz.
# Environment: VLLM_SITE (default /tmp/site_vllm), PROMPTS (default /tmp/rt_carry/data/mtbench.jsonl),
# VB_LIMIT (seconds for the whole run, default 1500), E2E_COMMIT (the commit recorded).
set -uo pipefail
MODE="$1"; ROOT="$2"; shift 2
VLLM_SITE="${VLLM_SITE:-/tmp/site_vllm}"
PROMPTS="${PROMPTS:-/tmp/rt_carry/data/mtbench.jsonl}"
CODE=/tmp/vb_code
case "$MODE" in
  start)
    [ -f "$VLLM_SITE/env_vllm.sh" ] || { echo "no $VLLM_SITE/env_vllm.sh: install the vLLM kit first" >&2; exit 1; }
    for need in "$ROOT/target/config.json" "$PROMPTS"; do
      [ -e "$need" ] || { echo "missing $need (the real-target run's setup phase makes it)" >&2; exit 1; }
    done
    # a later call's checkout may differ: the run reads a copy of the code it needs
    rm -rf "$CODE" && mkdir -p "$CODE/benchmarks"
    cp -r benchmarks/real_target benchmarks/gpu "$CODE/benchmarks/" && cp -r sglang_eagle_ext "$CODE/"
    drafters=()
    for name in speculators specforge; do
      [ -e "$ROOT/drafters/$name/config.json" ] && drafters+=(--drafter "$name=$ROOT/drafters/$name")
    done
    mkdir -p "$ROOT/vllm"; rm -f "$ROOT/vllm/done"
    commit="${E2E_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
    # shellcheck disable=SC2016
    COMMIT="$commit" setsid nohup bash -c '. "$1/env_vllm.sh"; shift; cd "$1"; shift; out="$1"; limit="$2"; shift 2
      E2E_COMMIT="$COMMIT" PYTHONUNBUFFERED=1 timeout -k 20 "$limit" python3 benchmarks/real_target/vllm_bench.py "$out" "$@"
      echo "exit $?" > "$out/done"' _ "$VLLM_SITE" "$CODE" "$ROOT/vllm" "${VB_LIMIT:-1500}" \
      --target "$ROOT/target" --prompts "$PROMPTS" "${drafters[@]}" "$@" \
      > "$ROOT/vllm/driver.log" 2>&1 < /dev/null &
    echo "started vllm_bench (pid $!) into $ROOT/vllm with ${drafters[*]:-no drafters}" ;;
  wait)
    deadline=$(( $(date +%s) + ${1:-500} ))
    while [ ! -e "$ROOT/vllm/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
    if [ -e "$ROOT/vllm/done" ]; then echo "run finished: $(cat "$ROOT/vllm/done")"; else echo "run still going"; fi
    tail -n 25 "$ROOT/vllm/driver.log"
    OUT="${OUT:-/tmp/vb_out}"; mkdir -p "$OUT"
    (cd "$ROOT" && tar czf "$OUT/vllm_results.tgz" vllm) && ls -l "$OUT" ;;
  *) echo "usage: run_vllm_bench.sh start|wait ROOT [...]" >&2; exit 2 ;;
esac
