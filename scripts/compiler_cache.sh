# Sourced by scripts/build, scripts/test and scripts/sanitize: compile through
# ccache when it is installed (scripts/setup installs it). Sets
# `compiler_cache` to the CMake options that say so (empty without ccache).
#
# A clean clone is a cold build for CMake, but most of its compilations are
# the same as the last clone's: with CCACHE_BASEDIR at the repository root,
# ccache rewrites the clone's absolute paths to relative ones, so a clone in
# another folder finds the objects of the last one (CCACHE_NOHASHDIR: the
# -g builds do not hash the working directory either). The cache lives in
# ccache's own folder (~/.cache/ccache), outside every clone.
compiler_cache=()
if command -v ccache >/dev/null; then
  compiler_cache=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
                  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
fi
