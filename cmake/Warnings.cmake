# Warnings applied to every parafab target through parafab_warnings.
add_library(parafab_warnings INTERFACE)
target_compile_options(parafab_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wundef -Wno-unknown-pragmas>
  # GCC 12 reports impossible memcpy overlaps inside std::string's operator+
  # at -O2 (GCC bug 105329): a false positive in libstdc++, not in our code.
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wundef --extended-lambda --expt-relaxed-constexpr>)
