// A labelled sparse data set in CSR form with 64-bit keys, in host memory.
//
// Either owns its arrays (parsed from text, or joined from several files by
// append_rows) or views a memory-mapped binary cache (worker/binary_cache.h);
// readers of the data see one DatasetView.
//
//   worker::Dataset d = worker::read_text_dataset("train.svm", {});
//   worker::DatasetView v = d.view();
//   for (size_t i = 0; i < v.rows(); ++i) { auto keys = v.row_keys(i); ... }
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace parafab::worker {

struct DatasetView {
  std::span<const float> labels;      // rows() labels, each 0 or 1
  std::span<const uint64_t> row_ptr;  // rows() + 1 offsets into keys/values
  std::span<const uint64_t> keys;     // feature keys (libsvm: the index; Criteo: hashed)
  std::span<const float> values;      // feature values, same length as keys

  size_t rows() const { return labels.size(); }
  size_t nnz() const { return keys.size(); }
  std::span<const uint64_t> row_keys(size_t i) const {
    return keys.subspan(row_ptr[i], row_ptr[i + 1] - row_ptr[i]);
  }
  std::span<const float> row_values(size_t i) const {
    return values.subspan(row_ptr[i], row_ptr[i + 1] - row_ptr[i]);
  }
};

// Owned arrays, filled by the text readers.
struct DatasetArrays {
  std::vector<float> labels;
  std::vector<uint64_t> row_ptr{0};
  std::vector<uint64_t> keys;
  std::vector<float> values;
};

class Dataset {
 public:
  Dataset() : arrays_(std::make_shared<DatasetArrays>()) { refresh(); }
  explicit Dataset(DatasetArrays arrays)
      : arrays_(std::make_shared<DatasetArrays>(std::move(arrays))) { refresh(); }
  // A view over memory kept alive by keepalive (e.g. a mapping).
  Dataset(DatasetView view, std::shared_ptr<const void> keepalive)
      : view_(view), keepalive_(std::move(keepalive)) {}

  const DatasetView& view() const { return view_; }
  size_t rows() const { return view_.rows(); }
  size_t nnz() const { return view_.nnz(); }

 private:
  void refresh() {
    view_ = DatasetView{arrays_->labels, arrays_->row_ptr, arrays_->keys, arrays_->values};
  }
  std::shared_ptr<DatasetArrays> arrays_;
  DatasetView view_;
  std::shared_ptr<const void> keepalive_;
};

// Appends the rows of `rows` after those of `into`, in order (several files
// read as one data set). Throws std::invalid_argument when the view's arrays
// do not fit together.
void append_rows(DatasetArrays& into, const DatasetView& rows);

}  // namespace parafab::worker
