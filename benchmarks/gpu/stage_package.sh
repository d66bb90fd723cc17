# Source this on a GPU machine where shared/gpu-sglang's installer has put SGLang into SITE
# (default /tmp/site): it lays this checkout's package out in SITE as `pip install` would and
# registers its `sglang.srt.plugins` entry point by writing the distribution metadata, so the
# plugin activates in every SGLang process exactly as after an install.
#   usage: SITE=/tmp/s16 source benchmarks/gpu/stage_package.sh
SITE="${SITE:-/tmp/site}"
source "$SITE/env.sh"
DIST="$SITE/sglang_eagle_ext-0.1.0.dist-info"
mkdir -p "$DIST"
printf 'Metadata-Version: 2.1\nName: sglang-eagle-ext\nVersion: 0.1.0\n' > "$DIST/METADATA"
printf '[sglang.srt.plugins]\neagle3_ext = sglang_eagle_ext.sglang.plugin:load\n' > "$DIST/entry_points.txt"
STAGE="$SITE/sglang_eagle_ext_src"
# re-staged only when the checkout's package differs: runs started side by side source this too, and
# removing the copy under a starting engine would break its imports
STAMP=$(tar c --sort=name --mtime=@0 --exclude=__pycache__ sglang_eagle_ext | sha256sum | cut -c1-16)
if [ "$(cat "$STAGE/.stamp" 2>/dev/null)" != "$STAMP" ]; then
  rm -rf "$STAGE" && mkdir -p "$STAGE" && cp -r sglang_eagle_ext "$STAGE/" && echo "$STAMP" > "$STAGE/.stamp"
fi
export PYTHONPATH="$STAGE:$PYTHONPATH" PYTHONUNBUFFERED=1
python3 -P -c "from importlib.metadata import entry_points as e; print([x.value for x in e(group='sglang.srt.plugins')])"
