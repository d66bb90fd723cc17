#!/usr/bin/env bash
# Install the offline vLLM bundles (made by benchmarks/vllm_kit/build.sh) into their own --target
# folder NEXT TO the SGLang kit's install, then run a smoke test.  Run it from the folder that holds
# vllm-bundle-1.tar ... vllm-bundle-N.tar, after the SGLang kit's install_on_gpu.sh:
#     bash install_vllm.sh [SITE_VLLM]            (default /tmp/site_vllm)
#     source /tmp/site_vllm/env_vllm.sh           (the SGLang kit's env.sh, then SITE_VLLM first)
#
# A vLLM process sees PYTHONPATH=SITE_VLLM:SGLANG_SITE:(image): vLLM's own pins (lark, xgrammar,
# openai, fastapi, ...) come first; torch 2.14.1, triton 3.8.0, NCCL 2.30.7, transformers 5.19.0 and
# the other versions vLLM accepts come from the SGLang site (role `sglang` in the pins).  SGLang
# processes never see SITE_VLLM: nothing under SGLANG_SITE changes.
#
# Knobs (environment):
#   PYTHON=...        interpreter (default /opt/torch/.venv/bin/python3 if present, else python3)
#   SGLANG_SITE=DIR   the SGLang kit's site (default /tmp/site; it must hold env.sh)
#   NO_FALLBACK=1     never install the small fallback wheels
#   SKIP_SMOKE=1      skip the smoke test;  SMOKE_TRACEBACK=1 prints its tracebacks
#   WV_WORK=DIR       unpack folder (default /tmp/wv_unpack)
# Exit status: 0 ok; 1 install failed; 3 smoke test found problems (env_vllm.sh is written anyway).
set -euo pipefail

SITE="${1:-/tmp/site_vllm}"
SGLANG_SITE="${SGLANG_SITE:-/tmp/site}"
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3
else PY="$(command -v python3)"; fi
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUNDLE_DIR="$(pwd)"
WORK="${WV_WORK:-/tmp/wv_unpack}"
# exact local wheels: a machine-wide pip constraint file must not veto them
pipi() { PIP_CONSTRAINT=/dev/null "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade \
           --disable-pip-version-check --target "$SITE" "$@"; }
echo "[vllm-install] python: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
echo "[vllm-install] target: $SITE   SGLang site: $SGLANG_SITE   bundles in: $BUNDLE_DIR"

# 0. the SGLang kit's install must be there: vLLM shares its torch, triton, NCCL, transformers, ...
if [ ! -f "$SGLANG_SITE/env.sh" ]; then
  echo "[vllm-install] no $SGLANG_SITE/env.sh: install the SGLang kit first (shared/gpu-sglang, install_on_gpu.sh)" >&2
  exit 1
fi

# 1. all bundles here, and whole?
shopt -s nullglob
# shellcheck disable=SC1091
. "$HERE/vllm-bundle-info.env"
miss=0
for i in $(seq 1 "$KIT_VLLM_BUNDLES"); do
  f="$BUNDLE_DIR/vllm-bundle-$i.tar"
  if [ ! -f "$f" ]; then
    echo "[vllm-install] MISSING $f: copy it again (a machine that went cold lost /tmp: redo every call)" >&2
    miss=1; continue
  fi
  want="KIT_VLLM_BUNDLE_${i}_SHA256"
  if [ "$(sha256sum "$f" | cut -d' ' -f1)" != "${!want}" ]; then
    echo "[vllm-install] $f: sha256 mismatch (partial copy, or a bundle of another build)" >&2; miss=1
  fi
done
[ "$miss" = 0 ] || exit 1
rm -rf "$WORK"; mkdir -p "$WORK"
for i in $(seq 1 "$KIT_VLLM_BUNDLES"); do tar -xf "$BUNDLE_DIR/vllm-bundle-$i.tar" -C "$WORK"; done
WH="$WORK/wh"
for p0 in $(find "$WH" -name '*.part000' | sort); do  # files larger than a bundle travel in parts
  base="${p0%.part000}"
  cat "$base".part[0-9][0-9][0-9] > "$base"
  rm -f "$base".part[0-9][0-9][0-9]
done
# shellcheck disable=SC1091
. "$WH/kit.env"
"$PY" -c "import lzma, zipfile" 2>/dev/null || { echo "[vllm-install] $PY has no lzma module (LZMA-packed wheels)" >&2; exit 1; }

# 2. every file as built; the SGLang site holds the versions this kit shares
"$PY" - "$WH" "$SGLANG_SITE" <<'PYEOF'
import glob, hashlib, os, re, sys
wh, sgl = sys.argv[1:3]
bad = []
for line in open(os.path.join(wh, "MANIFEST.sha256")):
    digest, rel = line.rstrip("\n").split("  ", 1)
    p = os.path.join(wh, rel)
    if not os.path.exists(p):
        bad.append("missing " + rel)
        continue
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() != digest:
        bad.append("sha256 mismatch " + rel)
have = {}
for d in glob.glob(os.path.join(sgl, "*.dist-info")):
    m = re.match(r"(.+)-([^-]+)\.dist-info$", os.path.basename(d))
    if m:
        have[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
for line in open(os.path.join(wh, "sglang_site.txt")):
    name, version = line.split()
    if have.get(name) != version:
        bad.append("SGLang site: %s %s wanted, %s found (install the SGLang kit for pins-0.5.23 first)" % (
            name, version, have.get(name, "nothing")))
if bad:
    print("\n".join(bad))
    sys.exit("[vllm-install] check FAILED (%d problems)" % len(bad))
print("[vllm-install] manifest OK; the SGLang site has the %d shared versions" % sum(1 for _ in open(
    os.path.join(wh, "sglang_site.txt"))))
PYEOF

# 3. the wheels (a site left by an earlier run of this kit is replaced)
if [ -f "$SITE/.gpu-vllm-kit" ]; then rm -rf "$SITE"; fi
mkdir -p "$SITE"
echo "vllm $KIT_VLLM_VERSION" > "$SITE/.gpu-vllm-kit"
wheels=("$WH"/vllm/*.whl "$WH"/wheels/*.whl)
echo "[vllm-install] pip install --target $SITE: ${#wheels[@]} wheels (vllm $KIT_VLLM_VERSION sm90 trim)"
pipi "${wheels[@]}"

# 4. image (or SGLang site) packages that violate a requirement of a carried wheel -> fallback wheels
"$PY" - "$WH" "$SITE" "$SGLANG_SITE" > "$WORK/fallback_choice.txt" <<'PYEOF'
import glob, os, sys
from importlib.metadata import PackageNotFoundError, version
try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name
wh, site, sgl = sys.argv[1:4]
sys.path[:0] = [site, sgl]  # the order a vLLM process sees
fallback = {canonicalize_name(os.path.basename(w).split("-")[0]): w for w in glob.glob(os.path.join(wh, "fallback", "*.whl"))}
expected = dict(line.split() for line in open(os.path.join(wh, "deviations.txt")) if line.strip())
pick, bad = set(), {}
for line in open(os.path.join(wh, "requirements_outside.txt")):
    spec, _, owner = line.strip().partition("#")
    if not spec.strip():
        continue
    r = Requirement(spec.strip())
    try:
        v = version(r.name)
    except PackageNotFoundError:
        v = None
    if v is not None and r.specifier.contains(v, prereleases=True):
        continue
    n = canonicalize_name(r.name)
    bad.setdefault((n, v), []).append("%s (%s)" % (r.specifier or "any", owner.strip()))
    if n in fallback:
        pick.add(fallback[n])
for (n, v), wants in sorted(bad.items()):
    sys.stderr.write("[vllm-install] %-8s %s %s; wanted: %s\n" % (
        "FALLBACK" if n in fallback else expected.get(n, "note"), n, v or "missing", ", ".join(wants)))
print("\n".join(sorted(pick)))
PYEOF
fb=()
while IFS= read -r line; do [ -n "$line" ] && fb+=("$line"); done < "$WORK/fallback_choice.txt"
if [ "${NO_FALLBACK:-0}" != "1" ] && [ ${#fb[@]} -gt 0 ]; then
  echo "[vllm-install] installing ${#fb[@]} fallback wheel(s)"
  pipi "${fb[@]}"
fi
# torchao-style top-level `test` packages would shadow the stdlib's
if [ -d "$SITE/test" ] && [ ! -f "$SITE/test/__init__.py" ]; then rm -rf "$SITE/test"; fi

# 5. env file
cat > "$SITE/env_vllm.sh" <<EOF
# source me: offline vllm $KIT_VLLM_VERSION in $SITE, next to the SGLang kit's site $SGLANG_SITE
. "$SGLANG_SITE/env.sh"          # torch 2.14.1 and NCCL 2.30.7 (LD_LIBRARY_PATH), offline hub, cuDNN check off
export PYTHONPATH="$SITE\${PYTHONPATH:+:\$PYTHONPATH}"   # vLLM's own pins before the SGLang site's
export PATH="$SITE/bin:\$PATH"
export SGLANG_SHIM=0              # the SGLang kit's sitecustomize patches sglang / sgl_kernel only: off here
export VLLM_USE_FLASHINFER_SAMPLER=0   # flashinfer's sampler JIT-compiles (no flashinfer-cubin carried)
export VLLM_USE_DEEP_GEMM=0       # fp8 only; the SGLang site's deep_gemm would otherwise be found
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export VLLM_KIT_SITE="$SITE" VLLM_KIT_TORCH="$KIT_TORCH_VERSION" VLLM_KIT_VERSION="$KIT_VLLM_VERSION"
EOF
echo "[vllm-install] wrote $SITE/env_vllm.sh"

# 6. smoke test
[ "${SKIP_SMOKE:-0}" = "1" ] && { echo "[vllm-install] done (smoke test skipped).  Next: source $SITE/env_vllm.sh"; exit 0; }
cp "$WH/smoke_vllm.py" "$WORK/smoke_vllm.py"
set +e
( # shellcheck disable=SC1091
  . "$SITE/env_vllm.sh"
  "$PY" -W ignore::SyntaxWarning "$WORK/smoke_vllm.py" --sglang-site "$SGLANG_SITE" )
rc=$?
set -e
if [ $rc -ne 0 ]; then
  echo "[vllm-install] smoke test reported problems (rc=$rc); $SITE/env_vllm.sh is written.  SMOKE_TRACEBACK=1 shows tracebacks."
  exit 3
fi
echo "[vllm-install] done.  Next: source $SITE/env_vllm.sh"
