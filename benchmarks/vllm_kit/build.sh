#!/usr/bin/env bash
# Build the offline vLLM bundles for the lent GPU machine (CPU side, PyPI reachable).
#
#   bash benchmarks/vllm_kit/build.sh [OUTDIR] [--cache DIR] [--cap MIB] [--repin]
#
# OUTDIR (default wvb, in the checkout; it MUST be git-ignored: echo /wvb/ >> .git/info/exclude) gets
#   OUTDIR/b1/vllm-bundle-1.tar ... OUTDIR/bN/vllm-bundle-N.tar   (each <= --cap MiB, default 50)
#   OUTDIR/bN/install_vllm.sh, OUTDIR/bN/vllm-bundle-info.env    (the last folder)
#   OUTDIR/manifest.txt                                         (what is in which bundle)
# Each bN folder is what one device call carries, beside the checkout (~12 MiB): see README.md.
#   --cache DIR  download / repack cache (default $VLLM_KIT_CACHE or ~/.cache/gpu-vllm-kit)
#   --repin      re-resolve pins-0.33.0.txt first (uv pip compile; rewrites the file)
# Needs the SGLang kit (../shared/gpu-sglang or $SGLANG_KIT): its tools/kit.py repacks the wheels
# (LZMA, CUDA fatbins cut to sm_90) and its pins are the install this one sits beside.  A cold build
# downloads ~0.5 GB and takes ~10 min on 2 cores (the vLLM wheel's LZMA); a warm one seconds.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION=0.33.0
OUTDIR=wvb
CACHE="${VLLM_KIT_CACHE:-$HOME/.cache/gpu-vllm-kit}"
CAP=50
REPIN=0
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then OUTDIR="$1"; shift; fi
while [ $# -gt 0 ]; do
  case "$1" in
    --cache) CACHE="$2"; shift 2 ;;
    --cap) CAP="$2"; shift 2 ;;
    --repin) REPIN=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done
PY="${PYTHON:-python3}"
PINS="$HERE/pins-$VERSION.txt"
mkdir -p "$CACHE" "$OUTDIR"
CACHE="$(cd "$CACHE" && pwd)"; OUTDIR="$(cd "$OUTDIR" && pwd)"
if git -C "$HERE" rev-parse --show-toplevel >/dev/null 2>&1 && ! git -C "$HERE" check-ignore -q "$OUTDIR/b1/x.tar"; then
  echo "[build] WARNING: $OUTDIR is not git-ignored; add it to .git/info/exclude before a device call carries it" >&2
fi
if [ "$REPIN" = 1 ] || [ ! -f "$PINS" ]; then
  "$PY" "$HERE/kit_vllm.py" pins "$VERSION" "$PINS" --cache "$CACHE"
fi
t0=$(date +%s)
STAGE="$CACHE/stage"   # outside OUTDIR: the carried folder holds no .py files
"$PY" "$HERE/kit_vllm.py" stage "$PINS" --cache "$CACHE" --stage "$STAGE"
"$PY" "$HERE/kit_vllm.py" pack "$STAGE" "$OUTDIR" --cap "$CAP" --installer "$HERE/install_vllm.sh"
rm -rf "$STAGE"
echo "[build] done in $(( $(date +%s) - t0 ))s; see $OUTDIR/manifest.txt and benchmarks/vllm_kit/README.md"
