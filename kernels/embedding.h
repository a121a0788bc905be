// Per-field embedding bags (DLRM-style) on the active backend.
//
// Row i's input vector is the concatenation over fields f in [0, n_fields) of
//   sum over nonzeros k of row i with fields[k] == f of  vals[k] * E[cols[k] * d .. + d)
// where E is n_slots x d, row-major, indexed by local slots (the batch's
// keys, as in kernels/csr_batch.h). A field no nonzero of the row names
// contributes zeros. embedding_scatter_add is the transpose: the gradient of
// E given the gradient of that input.
//
//   kernels::FieldCsr b{row_ptr, cols, vals, fields, n_rows, n_fields};   // backend memory
//   kernels::embedding_gather(b, E, d, x);                   // x: n_rows x (n_fields * d)
//   ...                                                      // dx = d loss / d x
//   kernels::embedding_scatter_add(b, dx, d, n_slots, 1.0f, grad_E);   // n_slots x d
//
// Preconditions the caller checks on the host (the kernels cannot report a
// violation from a device): fields[k] < n_fields and cols[k] < n_slots. A
// nonzero that breaks them is skipped where the kernel knows the bound (fields
// always, slots in the scatter), so bad input never writes out of bounds; the
// gather cannot bound cols[k] and reads E there.
#pragma once

#include <cstdint>

namespace parafab::kernels {

struct FieldCsr {
  const uint64_t* row_ptr = nullptr;  // n_rows + 1 offsets (row_ptr[0] need not be 0)
  const uint32_t* cols = nullptr;     // local slot of each nonzero
  const float* vals = nullptr;        // value of each nonzero; nullptr means every value is 1
  const uint8_t* fields = nullptr;    // field of each nonzero, < n_fields
  int64_t n_rows = 0;
  int n_fields = 0;
};

// out (n_rows x (n_fields * d), row-major) is overwritten. Throws
// std::invalid_argument for d < 1, n_rows < 0 or n_fields outside [0, 256].
void embedding_gather(const FieldCsr& batch, const float* E, int d, float* out);

// grad_E (n_slots x d, row-major) is overwritten with
//   grad_E[s] = scale * sum over nonzeros k with cols[k] == s of
//               vals[k] * d_out[i(k), fields[k] * d .. + d)
// where i(k) is the row of nonzero k and d_out is n_rows x (n_fields * d).
// Slots no nonzero names get zeros. An empty batch gives grad_E = 0.
void embedding_scatter_add(const FieldCsr& batch, const float* d_out, int d, int64_t n_slots,
                           float scale, float* grad_E);

}  // namespace parafab::kernels
