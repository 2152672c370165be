#!/usr/bin/env bash
# One GPU session of about 9 minutes: the checks of benchmarks/gpu_checks.py (CUDA losses
# against the CPU, bfloat16 training steps, step times and peak memory on Amazon-Photo,
# Coauthor-CS and Coauthor-Physics, each loss's step alone on an Amazon-Photo-sized batch,
# an ogbn-arxiv-sized epoch, tests/library/test_cuda.py), each part
# in its own time budget; results in OUT/gpu_checks.json and OUT/gpu_checks.md; then the
# compiled loss step beside the eager one (OUT/compiled.md, COMPILE_SECONDS, default 120).
#
#   PYG_PROGCL_DATA=DATA bash benchmarks/gpu_session.sh --prepare  # the datasets' raw files -> .gpu_data/ (46 MB)
#   bash benchmarks/gpu_session.sh .gpu_data OUT [SECONDS]         # on the GPU machine, from the repository root
#
# Copy the checkout with .gpu_data/ to the GPU machine first. SECONDS (default 540) is the
# budget of all parts together; the whole script is stopped 30 s after it in any case.
# A dry run without a GPU (tiny graphs, about a minute):
#   DEVICE=cpu QUICK=1 bash benchmarks/gpu_session.sh .gpu_data /tmp/gpu_dry_run
set -u
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--prepare" ]; then
    src=${PYG_PROGCL_DATA:?set PYG_PROGCL_DATA to the data root (grouped layout)}
    for d in amazon/Photo coauthor/CS coauthor/Physics; do
        mkdir -p ".gpu_data/$d" && cp -r "$src/$d/raw" ".gpu_data/$d/" || exit 1
    done
    chmod -R u+w .gpu_data && du -sh .gpu_data && exit 0
fi

DATA=${1:?data root (.gpu_data after --prepare)}
OUT=${2:?output folder}
BUDGET=${3:-540}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYG_PROGCL_CACHE=${PYG_PROGCL_CACHE:-$(mktemp -d)}
PY=${PYTHON:-python3}
args=(--data "$DATA" --out "$OUT" --budget "$BUDGET" --device "${DEVICE:-cuda}")
[ -n "${QUICK:-}" ] && args+=(--quick)
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
timeout --kill-after=10 $((BUDGET + 30)) $PY benchmarks/gpu_checks.py "${args[@]}" 2>&1 |
    tee "$OUT/session.log"
echo "exit ${PIPESTATUS[0]}; results: $OUT/gpu_checks.json, $OUT/gpu_checks.md" | tee -a "$OUT/session.log"
# The compiled loss step beside the eager one (2 minutes at most).
nodes=7650; [ -n "${QUICK:-}" ] && nodes=300
timeout --kill-after=10 ${COMPILE_SECONDS:-120} $PY benchmarks/compiled.py --device "${DEVICE:-cuda}" \
    --nodes $nodes --rounds 2 --out "$OUT/compiled.md" >>"$OUT/session.log" 2>&1
echo "compiled: exit $?; $OUT/compiled.md" | tee -a "$OUT/session.log"
