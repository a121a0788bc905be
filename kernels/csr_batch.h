// A minibatch of sparse examples in CSR form, as the kernels see it.
//
// All pointers address memory of the active backend: host memory for the
// OpenMP backend, device memory when built with PARAFAB_CUDA (see
// kernels/device_array.h). Columns are *local slots* [0, n_slots): the worker
// maps 64-bit keys to the slots of the parameters it pulled.
#pragma once

#include <cstdint>

namespace parafab::kernels {

struct CsrBatch {
  const uint64_t* row_ptr = nullptr;  // n_rows + 1 offsets into cols/vals
  const uint32_t* cols = nullptr;     // local slot of each nonzero
  const float* vals = nullptr;        // value of each nonzero; nullptr means every value is 1
  const float* labels = nullptr;      // n_rows labels in {0, 1}
  int64_t n_rows = 0;
  // Slot of an implicit bias feature of value 1 in every row (liblinear's -B 1),
  // or -1 for none. It takes part in L2 like any other slot.
  int64_t bias_slot = -1;
};

enum class Loss : int {
  kLogistic = 0,  // log(1 + exp(-y m)) with y in {-1, +1}
  kHinge = 1,     // max(0, 1 - y m), linear SVM
};

}  // namespace parafab::kernels
