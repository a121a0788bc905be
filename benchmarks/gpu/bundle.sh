#!/usr/bin/env bash
# Builds here, where no GPU is needed, what benchmarks/gpu/check.sh runs on a
# lent GPU machine: the CUDA variant of `parafab` and of every kernels/ test,
# with the shared libraries they need, in one archive (default
# ./gpu-bundle.tar.xz). The lent machines run an image of their own (CUDA,
# PyTorch, CMake) without this project's Debian packages (libfabric,
# protobuf, OpenBLAS, GoogleTest, ...) and cannot fetch them, so check.sh
# cannot build there; it runs this bundle instead, and saves the 4 minutes
# of building.
#
#   benchmarks/gpu/bundle.sh                     # then carry gpu-bundle.tar.xz
#   BUILD=build-gpu-bundle benchmarks/gpu/bundle.sh /tmp/b.tar.xz
#
# The archive's gpu-bundle/ holds bin/ (the executables, libstdc++ and libgcc
# linked in), lib/ (every other shared library they load, from this
# machine, except glibc's and the CUDA libraries the GPU machine has:
# cuBLAS and the driver), glibc/ (this machine's loader and glibc, for a GPU
# machine whose glibc is older than GLIBC_NEEDED says), GLIBC_NEEDED and
# git-head.txt.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/gpu-bundle.tar.xz}"
build="${BUILD:-$root/build-gpu-bundle}"
jobs="$(nproc)"
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH="$PATH:/usr/local/cuda/bin"; fi
command -v nvcc >/dev/null || { echo "bundle.sh: nvcc not found" >&2; exit 2; }
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi

cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPARAFAB_CUDA=ON \
  -DPARAFAB_BUILD_TESTS=ON -DPARAFAB_BUILD_BENCHMARKS=ON \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
cmake --build "$build" -j "$jobs" --target parafab tests_kernels tests_gpu

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
stage="$work/gpu-bundle"
mkdir -p "$stage/bin" "$stage/lib" "$stage/glibc"
cp "$build/bin/parafab" "$build"/tests/kernels_*_test "$build"/tests/rdma_*_gpu_test "$stage/bin/"
# Every shared library the executables load (ldd follows the chain).
for b in "$stage"/bin/*; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r lib; do
    case "$(basename "$lib")" in
      ld-linux*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*) cp -L "$lib" "$stage/glibc/" ;;
      libcuda.so.*|libcublas.so.*|libcublasLt.so.*) ;;  # the GPU machine's own, matching its driver
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
cp -L "$(ldd "$stage/bin/parafab" | awk '/ld-linux/ {print $1}')" "$stage/glibc/"
# The newest glibc symbol version anything in bin/ or lib/ needs: check.sh
# uses the GPU machine's glibc when it is at least this, else glibc/.
for f in "$stage"/bin/* "$stage"/lib/*; do objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' || true; done |
  sed 's/GLIBC_//' | sort -uV | tail -1 > "$stage/GLIBC_NEEDED"
git -C "$root" rev-parse HEAD > "$stage/git-head.txt" 2>/dev/null || echo unknown > "$stage/git-head.txt"
tar -C "$work" -cJf "$out" gpu-bundle
echo "bundle.sh: $out ($(du -h "$out" | cut -f1)): $(ls "$stage/bin" | wc -l) executables, $(ls "$stage/lib" | wc -l) libraries, glibc >= $(cat "$stage/GLIBC_NEEDED") or the one carried"
