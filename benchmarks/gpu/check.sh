#!/usr/bin/env bash
# The GPU checks, for a lent machine with one NVIDIA GPU (H200, sm_90, 16
# cores): run the kernel tests and rdma/'s device-memory tests on the GPU,
# `parafab bench kernels` with its JSON output, and `train --model lr` with
# AdaGrad and with plain SGD on a planted problem (Hogwild on the GPU).
# Everything it writes, logs included, lands in $OUT (default
# ./gpu-results). Exits non-zero when a step fails; each step has its own
# time limit so the whole stays under 5 min.
#
# Two ways to get the CUDA binaries:
# - gpu-bundle.tar.xz in the repository root (or $BUNDLE), made here by
#   benchmarks/gpu/bundle.sh: the binaries and their libraries, built on the
#   Debian machine. The lent machines' image lacks this project's Debian
#   packages and cannot fetch them, so this is the way there; carry the
#   archive (device `run`, carry ["gpu-bundle.tar.xz"]). Their own glibc runs
#   the binaries when it is new enough, else the bundle's loader and glibc.
# - no bundle: configure and build the CUDA variant in $BUILD (a machine
#   with the packages of scripts/setup).
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
BUNDLE=${BUNDLE:-$ROOT/gpu-bundle.tar.xz}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}  # the rdma tests talk over loopback only
command -v nvidia-smi > /dev/null 2>&1 || { log "missing nvidia-smi: no GPU driver here"; exit 2; }
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
nvcc --version > "$OUT/nvcc-version.txt" 2>&1 || true
git -C "$ROOT" rev-parse HEAD > "$OUT/git-head.txt" 2>/dev/null || true
git -C "$ROOT" status --short > "$OUT/git-status.txt" 2>/dev/null || true

# True when version $1 >= version $2 (dotted numbers).
version_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$2" ]; }

RUNNER=()  # what runs each binary: nothing (built here), or the bundle's library path
if [ -f "$BUNDLE" ]; then
  UNPACKED=$(mktemp -d)
  trap 'rm -rf "$UNPACKED"' EXIT
  run unpack 60 tar -C "$UNPACKED" -xJf "$BUNDLE" || exit 1
  B=$UNPACKED/gpu-bundle
  [ "$(cat "$B/git-head.txt")" = "$(cat "$OUT/git-head.txt" 2>/dev/null)" ] ||
    log "note: the bundle was built at $(cat "$B/git-head.txt"), the tree is at $(cat "$OUT/git-head.txt" 2>/dev/null)"
  # The GPU machine's CUDA libraries (cuBLAS, and the driver's): the
  # toolkit's, the pip wheels' (PyTorch images) and the driver's folders.
  CUDA_DIRS=""
  if command -v nvcc > /dev/null 2>&1; then
    t=$(dirname "$(readlink -f "$(command -v nvcc)")")/..
    CUDA_DIRS="$t/lib64:$t/lib:$t/targets/x86_64-linux/lib"
  fi
  for d in /usr/local/cuda/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
           $(python3 -c 'import glob, os, nvidia; print(" ".join(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib"))))' 2>/dev/null); do
    [ -d "$d" ] && CUDA_DIRS="$CUDA_DIRS:$d"
  done
  LIBPATH="$B/lib:${CUDA_DIRS#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  HAVE=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  NEED=$(cat "$B/GLIBC_NEEDED")
  if [ -n "$HAVE" ] && version_ge "$HAVE" "$NEED"; then
    log "bundle $BUNDLE: this machine's glibc $HAVE (>= $NEED)"
    RUNNER=(env LD_LIBRARY_PATH="$LIBPATH")
  else
    log "bundle $BUNDLE: this machine's glibc ${HAVE:-unknown} is older than $NEED: the bundle's loader and glibc"
    RUNNER=("$B/glibc/$(ls "$B/glibc" | grep '^ld-linux' | head -1)" --library-path "$B/glibc:$LIBPATH")
  fi
  TESTS=("$B"/bin/kernels_*_test "$B"/bin/rdma_*_gpu_test)
  PARAFAB=$B/bin/parafab
else
  for tool in cmake nvcc; do
    command -v "$tool" > /dev/null 2>&1 || { log "missing $tool (and no $BUNDLE: see benchmarks/gpu/bundle.sh)"; exit 2; }
  done
  run configure 90 cmake -S "$ROOT" -B "$BUILD" -DPARAFAB_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" || exit 1
  # Every kernels/ test (tests_kernels) and the GPU tests of rdma/ (tests_gpu),
  # which CI also compiles for sm_90 (scripts/build --cuda-check), so a test
  # added there runs here too.
  run build 240 cmake --build "$BUILD" -j "$JOBS" --target tests_kernels tests_gpu parafab || exit 1
  cp "$BUILD/CMakeCache.txt" "$OUT/CMakeCache.txt" 2>/dev/null || true
  TESTS=("$BUILD"/tests/kernels_*_test "$BUILD"/tests/rdma_*_gpu_test)
  PARAFAB=$BUILD/bin/parafab
fi

for bin in "${TESTS[@]}"; do
  t=$(basename "$bin")
  run "$t" 60 "${RUNNER[@]}" "$bin" --gtest_output="xml:$OUT/$t.xml"
done

run bench_kernels 120 "${RUNNER[@]}" "$PARAFAB" bench kernels --json "$OUT/bench_kernels.json"
[ -f "$OUT/bench_kernels.log" ] && cat "$OUT/bench_kernels.log"

# Hogwild's dynamics on the GPU, where a batch's rows step at once (see
# kernels/hogwild_sgd.h): held-out log loss over the planted model's, after
# `train --model lr` with AdaGrad (the whole batch in flight) and plain SGD
# (16 rows in flight). The host, one thread, on the same files: 1.214 and
# 1.346; the model of the GPU in hogwild_sgd.h: 1.220 and 1.356.
DATA=$OUT/hogwild-data
mkdir -p "$DATA"
if run gen_data 60 "${RUNNER[@]}" "$PARAFAB" gen-data --out "$DATA/train.svm" --test-out "$DATA/test.svm" \
     --weights-out "$DATA/planted.txt" --examples 200000 --test-examples 20000 --threads "$JOBS"; then
  for opt in adagrad:1.25 sgd:1.45; do
    name=${opt%%:*} limit=${opt##*:}
    run "train_$name" 120 "${RUNNER[@]}" "$PARAFAB" train --train "$DATA/train.svm" --test "$DATA/test.svm" \
      --model lr --optimizer "$name" --planted "$DATA/planted.txt" || continue
    ratio=$(sed -n 's/.*learned \/ planted = \([0-9.]*\).*/\1/p' "$OUT/train_$name.log" | tail -1)
    if [ -z "$ratio" ] || ! awk -v r="$ratio" -v l="$limit" 'BEGIN { exit !(r <= l) }'; then
      log "train_$name: learned / planted = ${ratio:-missing}, above $limit"
      FAILED+=("train_$name")
    else
      log "train_$name: learned / planted = $ratio (at most $limit)"
    fi
  done
fi
rm -rf "$DATA"
if [ ${#FAILED[@]} -ne 0 ]; then
  log "FAILED: ${FAILED[*]} ($((SECONDS - START))s)"
  exit 1
fi
log "all passed ($((SECONDS - START))s)"
