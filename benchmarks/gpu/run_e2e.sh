#!/usr/bin/env bash
# Run the end-to-end EAGLE-3 rows on a GPU machine where shared/gpu-sglang's installer has put
# SGLang into SITE (default /tmp/site). This package is used from the checkout (repository root =
# the current directory); its `sglang.srt.plugins` entry point is registered by writing the
# distribution metadata into SITE, exactly what `pip install` would record.
#   usage: bash benchmarks/gpu/run_e2e.sh OUTDIR [--throughput]
set -euo pipefail
SITE="${SITE:-/tmp/site}"
OUTDIR="$1"; shift
source "$SITE/env.sh"
DIST="$SITE/sglang_eagle_ext-0.1.0.dist-info"
mkdir -p "$DIST" "$OUTDIR"
printf 'Metadata-Version: 2.1\nName: sglang-eagle-ext\nVersion: 0.1.0\n' > "$DIST/METADATA"
printf '[sglang.srt.plugins]\neagle3_ext = sglang_eagle_ext.sglang_plugin:load\n' > "$DIST/entry_points.txt"
export PYTHONPATH="$PWD:$PYTHONPATH" PYTHONUNBUFFERED=1
python3 -c "from importlib.metadata import entry_points as e; print([x.value for x in e(group='sglang.srt.plugins')])"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 560 python3 benchmarks/gpu/e2e_sglang.py --out "$OUTDIR" "$@" 2>&1 | tee "$OUTDIR/run.log" \
  | grep -v "^\[20" | grep -E "TASK|SPEED|BASELINE|sglang-eagle-ext|Error" | cut -c1-600
grep -m3 "sglang-eagle-ext:" "$OUTDIR/run.log" > "$OUTDIR/log_line.txt" || true
rm -rf "$OUTDIR/models"
