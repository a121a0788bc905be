#include "worker/dataset.h"

#include <stdexcept>

namespace parafab::worker {

void append_rows(DatasetArrays& into, const DatasetView& rows) {
  const size_t n = rows.rows();
  if (rows.row_ptr.size() != n + 1 || rows.values.size() != rows.keys.size() || rows.row_ptr[0] > rows.row_ptr[n] ||
      rows.row_ptr[n] > rows.keys.size()) {
    throw std::invalid_argument("append_rows: the view's arrays do not fit together");
  }
  if (into.row_ptr.empty()) into.row_ptr.push_back(0);
  const uint64_t first = rows.row_ptr[0];
  const uint64_t last = rows.row_ptr[n];
  const uint64_t base = into.keys.size();
  into.labels.insert(into.labels.end(), rows.labels.begin(), rows.labels.end());
  into.row_ptr.reserve(into.row_ptr.size() + n);
  for (size_t i = 1; i <= n; ++i) into.row_ptr.push_back(base + (rows.row_ptr[i] - first));
  into.keys.insert(into.keys.end(), rows.keys.begin() + static_cast<ptrdiff_t>(first),
                   rows.keys.begin() + static_cast<ptrdiff_t>(last));
  into.values.insert(into.values.end(), rows.values.begin() + static_cast<ptrdiff_t>(first),
                     rows.values.begin() + static_cast<ptrdiff_t>(last));
}

}  // namespace parafab::worker
