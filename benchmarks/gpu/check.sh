#!/usr/bin/env bash
# The GPU checks of kernels/, for a lent machine with one NVIDIA GPU (H200,
# sm_90, 16 cores): build the CUDA backend, run the kernel tests on the GPU,
# and run `parafab bench kernels` with its JSON output. Everything it writes,
# logs included, lands in $OUT (default ./gpu-results). Exits non-zero when a
# step fails; each step has its own time limit so the whole stays under 5 min.
#
#   benchmarks/gpu/check.sh                      # from the repository root
#   OUT=/tmp/res BUILD=build-gpu JOBS=16 benchmarks/gpu/check.sh
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-./gpu-results}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
JOBS=${JOBS:-16}
START=$SECONDS
FAILED=()

log() { echo "[check.sh +$((SECONDS - START))s] $*" | tee -a "$OUT/check.log"; }

# run NAME LIMIT_S CMD...: runs CMD with a time limit, output to $OUT/NAME.log.
run() {
  local name=$1 limit=$2
  shift 2
  log "$name: $*"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    if [ $rc -eq 124 ]; then
      log "$name: TIMED OUT after ${limit}s"
    else
      log "$name: FAILED (exit $rc)"
    fi
    tail -n 40 "$OUT/$name.log" | sed 's/^/    /' | tee -a "$OUT/check.log"
    FAILED+=("$name")
    return $rc
  fi
  log "$name: ok"
}

: > "$OUT/check.log"
log "repository $ROOT, build $BUILD, results $OUT, $JOBS jobs"
if ! command -v nvcc > /dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
for tool in cmake nvcc nvidia-smi; do
  command -v "$tool" > /dev/null 2>&1 || { log "missing $tool"; exit 2; }
done
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
nvcc --version > "$OUT/nvcc-version.txt" 2>&1 || true
git -C "$ROOT" rev-parse HEAD > "$OUT/git-head.txt" 2>/dev/null || true
git -C "$ROOT" status --short > "$OUT/git-status.txt" 2>/dev/null || true

run configure 90 cmake -S "$ROOT" -B "$BUILD" -DPARAFAB_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" || exit 1

# Every kernels/ test: the tests_kernels target, which CI also compiles for
# sm_90 (scripts/build --cuda-check), so a test added there runs here too.
run build 240 cmake --build "$BUILD" -j "$JOBS" --target tests_kernels parafab || exit 1

for bin in "$BUILD"/tests/kernels_*_test; do
  t=$(basename "$bin")
  run "$t" 60 "$bin" --gtest_output="xml:$OUT/$t.xml"
done

run bench_kernels 120 "$BUILD/bin/parafab" bench kernels --json "$OUT/bench_kernels.json"
[ -f "$OUT/bench_kernels.log" ] && cat "$OUT/bench_kernels.log"

cp "$BUILD/CMakeCache.txt" "$OUT/CMakeCache.txt" 2>/dev/null || true
if [ ${#FAILED[@]} -ne 0 ]; then
  log "FAILED: ${FAILED[*]} ($((SECONDS - START))s)"
  exit 1
fi
log "all passed ($((SECONDS - START))s)"
