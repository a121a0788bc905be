# Finds every third-party dependency. All of them come from Debian packages
# installed by scripts/setup; Thrust may instead come from the CUDA toolkit.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBFABRIC REQUIRED IMPORTED_TARGET libfabric>=1.17)
find_package(Boost 1.74 REQUIRED)
find_package(Protobuf REQUIRED)
find_package(OpenMP REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
set(BLA_VENDOR OpenBLAS)  # host GEMM (kernels/mlp.cpp); Debian's libopenblas-dev
find_package(BLAS REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# Compressed data files (worker/compressed_input.h): gzip, bzip2, xz.
find_package(ZLIB REQUIRED)
find_package(BZip2 REQUIRED)
find_package(LibLZMA REQUIRED)
find_package(Threads REQUIRED)
if(PARAFAB_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(PARAFAB_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# --- Thrust / CCCL ----------------------------------------------------------
# The CUDA toolkit's CCCL when present (required for PARAFAB_CUDA), else
# Debian's libthrust-dev. Both ship thrust-config.cmake with
# thrust_create_target(), which we use to pick the device system.
find_package(CUDAToolkit QUIET)
if(PARAFAB_CUDA AND NOT CUDAToolkit_FOUND)
  message(FATAL_ERROR "PARAFAB_CUDA=ON needs the CUDA toolkit (nvcc and its CCCL); none was found")
endif()
if(PARAFAB_CUDA AND PARAFAB_THRUST_SOURCE STREQUAL "system")
  message(FATAL_ERROR "PARAFAB_CUDA=ON needs the toolkit's Thrust; PARAFAB_THRUST_SOURCE=system cannot work with it")
endif()

set(_parafab_thrust_from_toolkit OFF)
if(PARAFAB_THRUST_SOURCE STREQUAL "toolkit" OR (PARAFAB_THRUST_SOURCE STREQUAL "auto" AND CUDAToolkit_FOUND))
  if(NOT CUDAToolkit_FOUND)
    message(FATAL_ERROR "PARAFAB_THRUST_SOURCE=toolkit but no CUDA toolkit was found")
  endif()
  find_package(Thrust CONFIG REQUIRED
    HINTS "${CUDAToolkit_LIBRARY_DIR}/cmake" "${CUDAToolkit_LIBRARY_ROOT}/lib/cmake"
    NO_DEFAULT_PATH)
  set(_parafab_thrust_from_toolkit ON)
  set(PARAFAB_THRUST_ORIGIN "CUDA toolkit CCCL ${Thrust_VERSION}")
elseif(PARAFAB_THRUST_SOURCE STREQUAL "system" OR PARAFAB_THRUST_SOURCE STREQUAL "auto")
  # Skip PATH-derived prefixes so /usr/local/cuda/bin on PATH does not pull in the toolkit copy.
  find_package(Thrust CONFIG REQUIRED NO_SYSTEM_ENVIRONMENT_PATH)
  set(PARAFAB_THRUST_ORIGIN "system Thrust ${Thrust_VERSION}")
else()
  message(FATAL_ERROR "PARAFAB_THRUST_SOURCE must be auto, toolkit or system, not '${PARAFAB_THRUST_SOURCE}'")
endif()
set(PARAFAB_HAVE_CCCL ${_parafab_thrust_from_toolkit})

if(PARAFAB_CUDA)
  thrust_create_target(parafab_thrust HOST CPP DEVICE CUDA)
else()
  thrust_create_target(parafab_thrust HOST CPP DEVICE OMP)
endif()
message(STATUS "parafab: Thrust from ${PARAFAB_THRUST_ORIGIN}, CUDA backend ${PARAFAB_CUDA}")

# OpenSSL's libcrypto (libssl-dev): HMAC-SHA256, constant-time compare and
# the CSPRNG for the job token's challenge-response (ps/job_token.h). Nothing
# else in the tree offers a vetted HMAC; libcrypto is on every Linux host.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
