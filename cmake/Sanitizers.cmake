# Sanitizer and fuzzing builds.
#
#   -DPARAFAB_SANITIZE=address,undefined   ASan + UBSan on every target
#   -DPARAFAB_SANITIZE=thread              TSan on every target
#   -DPARAFAB_FUZZ=ON                      clang only: tests/fuzz's libFuzzer
#                                          targets, with ASan + UBSan
#
# The flags go on every target of the tree (add_compile_options, not a
# target_* call): a sanitizer must see all the code that shares memory, and
# the generated protobuf library, the kernels and the tests are built here
# too. Only CXX sources get them; nvcc cannot take -fsanitize.
set(PARAFAB_SANITIZE "" CACHE STRING
    "Sanitizers for every target, as -fsanitize takes them: address,undefined or thread (empty: none)")
option(PARAFAB_FUZZ "Build the libFuzzer targets of tests/fuzz (clang only; adds address,undefined)" OFF)
set(PARAFAB_FUZZ_SECONDS 20 CACHE STRING "Seconds of each bounded fuzz run that ctest starts (tests/fuzz)")

set(_parafab_sanitize "${PARAFAB_SANITIZE}")
if(PARAFAB_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "PARAFAB_FUZZ=ON needs clang (libFuzzer); this is ${CMAKE_CXX_COMPILER_ID}. "
                        "Configure with -DCMAKE_CXX_COMPILER=clang++.")
  endif()
  if(_parafab_sanitize MATCHES "thread|memory")
    message(FATAL_ERROR "PARAFAB_FUZZ=ON runs with address,undefined; it cannot be combined with "
                        "PARAFAB_SANITIZE=${PARAFAB_SANITIZE}")
  endif()
  if(_parafab_sanitize STREQUAL "")
    set(_parafab_sanitize "address,undefined")
  endif()
endif()

if(NOT _parafab_sanitize STREQUAL "")
  if(_parafab_sanitize MATCHES "thread" AND _parafab_sanitize MATCHES "address")
    message(FATAL_ERROR "PARAFAB_SANITIZE=${_parafab_sanitize}: thread and address cannot be combined")
  endif()
  if(PARAFAB_CUDA)
    message(FATAL_ERROR "PARAFAB_SANITIZE needs the host backend: nvcc-compiled kernels cannot be sanitized "
                        "(configure without -DPARAFAB_CUDA=ON)")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_parafab_sanitize}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${_parafab_sanitize})
  message(STATUS "parafab: sanitizers ${_parafab_sanitize}")
endif()

if(PARAFAB_FUZZ)
  # Coverage feedback for libFuzzer from all project code, not only the
  # fuzz targets' own files; only the targets link libFuzzer's main
  # (-fsanitize=fuzzer, tests/fuzz/CMakeLists.txt). The other binaries run
  # as usual: the sanitizer runtimes supply the coverage callbacks.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
  message(STATUS "parafab: libFuzzer targets, ${PARAFAB_FUZZ_SECONDS} s per bounded run")
endif()
