#!/usr/bin/env bash
# Run the end-to-end EAGLE-3 rows on a GPU machine where shared/gpu-sglang's installer has put
# SGLang into SITE (default /tmp/site). This package is laid out from the checkout (repository
# root = the current directory) as a wheel installs it, and its `sglang.srt.plugins` entry point is registered by writing the
# distribution metadata into SITE, exactly what `pip install` would record.
#   usage: [E2E_COMMIT=sha] bash benchmarks/gpu/run_e2e.sh OUTDIR [--throughput] [--only TASKS]
# OUTDIR keeps results.json, run.log and tasks.tgz (per-task JSON and logs).
set -euo pipefail
SITE="${SITE:-/tmp/site}"
OUTDIR="$1"; shift
source "$SITE/env.sh"
DIST="$SITE/sglang_eagle_ext-0.1.0.dist-info"
mkdir -p "$DIST" "$OUTDIR"
printf 'Metadata-Version: 2.1\nName: sglang-eagle-ext\nVersion: 0.1.0\n' > "$DIST/METADATA"
printf '[sglang.srt.plugins]\neagle3_ext = sglang_eagle_ext.sglang.plugin:load\n' > "$DIST/entry_points.txt"
STAGE="$SITE/sglang_eagle_ext_src"
rm -rf "$STAGE" && mkdir -p "$STAGE" && cp -r sglang_eagle_ext "$STAGE/"
export PYTHONPATH="$STAGE:$PYTHONPATH" PYTHONUNBUFFERED=1 E2E_COMMIT="${E2E_COMMIT:-unknown}"
python3 -P -c "from importlib.metadata import entry_points as e; print([x.value for x in e(group='sglang.srt.plugins')])"
python3 -P -c "import sglang_eagle_ext.sglang.compat.tree_kernels as b; print('tree-kernel binding:', b.__name__)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUTDIR/device.txt"
timeout "${E2E_TIMEOUT:-560}" python3 benchmarks/gpu/e2e_sglang.py --out "$OUTDIR" "$@" 2>&1 \
  | tee "$OUTDIR/run.log" | grep -E "TASK|Error|Traceback" | cut -c1-1500 || true
rm -rf "$OUTDIR/models"
(cd "$OUTDIR" && tasks=$(ls ./*.json | grep -v '^./results.json$') \
  && tar czf tasks.tgz $tasks logs && rm -rf $tasks logs) || true
ls -l "$OUTDIR"
