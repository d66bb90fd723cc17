# Phases of a GPU run that works in the background across device calls (a machine goes back 30 s after
# a call ends, so a run outlives its calls): sourced by benchmarks/gpu/run_tp2.sh and
# benchmarks/real_target/run_gpu.sh, which set ROOT and define their phases.

run_phase_command() {  # NAME COMMAND LIMIT: COMMAND in its own session, ended (its whole group) at LIMIT s
  local name="$1" command="$2" limit="$3" started pid watchdog rc
  started=$(date +%s)
  echo "# $(date -u +%FT%TZ) phase $name (limit $limit s): $command" | tee -a "$ROOT/status.txt"
  setsid bash -c "$command" > "$ROOT/$name.log" 2>&1 < /dev/null &
  pid=$!
  ( sleep "$limit"; kill -TERM -- -"$pid" 2>/dev/null; sleep 15; kill -KILL -- -"$pid" 2>/dev/null ) &
  watchdog=$!
  wait "$pid"; rc=$?
  kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null
  kill -KILL -- -"$pid" 2>/dev/null  # engine processes the phase left behind
  echo "# $(date -u +%FT%TZ) phase $name: exit $rc after $(( $(date +%s) - started )) s" | tee -a "$ROOT/status.txt"
  return "$rc"
}

run_phases() {  # "a b+c": a, then b and c side by side, each by the caller's run_phase NAME; then ROOT/done
  local step part parts
  for step in $1; do
    IFS=+ read -ra parts <<< "$step"
    for part in "${parts[@]}"; do run_phase "$part" & done
    wait
  done
  touch "$ROOT/done"
}

wait_until_done() {  # SECONDS: until ROOT/done or SECONDS pass; prints which, and the status so far
  local deadline=$(( $(date +%s) + ${1:-500} ))
  while [ ! -e "$ROOT/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
  [ -e "$ROOT/done" ] && echo "run finished" || echo "run still going"
  cat "$ROOT/status.txt" 2>/dev/null
}
