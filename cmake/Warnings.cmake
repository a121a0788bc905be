# Warnings applied to every parafab target through parafab_warnings.
add_library(parafab_warnings INTERFACE)
target_compile_options(parafab_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wundef -Wno-unknown-pragmas>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wundef --extended-lambda --expt-relaxed-constexpr>)
