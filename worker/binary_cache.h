// The binary cache of a parsed data set: written once, memory-mapped after.
//
// Layout (little-endian): a 72-byte header {char magic[8] "PFABCSH1",
// u32 version (3), u32 skipped lines, u64 rows, u64 nnz, u64 source size,
// i64 source mtime (ns), u32 classes (how the labels were read: 2 binary,
// K > 2 class ids), u32 0, u64 xxHash64 of the payload, u64 xxHash64 of the
// header's first 64 bytes} (both hashes seed 0), then the payload: labels
// (float[rows]), row_ptr (uint64[rows+1]), keys (uint64[nnz]), values
// (float[nnz]), each array starting 8-byte aligned (zero padding after labels
// and after values); the file is exactly that long. Opening checks, before it
// reads any array: the header fits, magic, version, header checksum, the
// sizes against the file length, the payload checksum, then row_ptr
// (0 .. nnz, non-decreasing). A cache whose recorded source size/mtime differ
// from the source is stale. The number of bad lines skipped while building it
// is recorded: load_dataset serves such a cache only to runs that skip bad
// lines too; so is the label mode, and a run that reads labels otherwise
// (--classes) gets the text parsed again. The format is not recorded
// (auto-detection decides it anyway).
//
// The mapping stays alive as long as any copy of the returned Dataset. It is
// safe against our own rewrites (they rename a new file over the old one), not
// against someone truncating the cache file in place while it is mapped.
//
//   worker::write_binary_cache("train.pfc", dataset, worker::source_stamp("train.svm"));
//   worker::Dataset d = worker::open_binary_cache("train.pfc");
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "worker/data_reader.h"
#include "worker/dataset.h"

namespace parafab::worker {

struct SourceStamp {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const SourceStamp&) const = default;
};

// Size and modification time of a file; throws DataError if it cannot stat it.
SourceStamp source_stamp(const std::string& path);

// Writes atomically (temp file, fsync, rename). Throws DataError on I/O errors.
// skipped_lines: bad lines the parse skipped (--skip-bad-lines), recorded so
// that a later run without the flag does not silently inherit the skips.
void write_binary_cache(const std::string& path, const Dataset& data, const SourceStamp& source,
                        uint64_t skipped_lines = 0, uint32_t classes = 2);

// Maps and validates a cache; throws DataError naming the path and what is
// wrong (bad magic, version, truncated, checksum mismatch).
Dataset open_binary_cache(const std::string& path, SourceStamp* source = nullptr,
                          uint64_t* skipped_lines = nullptr, uint32_t* classes = nullptr);

// The usual entry: if cache_path is non-empty and holds a valid cache of the
// current source, map it; otherwise parse the text and (when cache_path is
// non-empty) write the cache. *from_cache tells which happened. A missing,
// stale or damaged cache is rebuilt, not an error; a parse error, a missing
// source or a failure to write the cache throws DataError (no cache is
// written on a parse error), and so does a cache path that is the source
// itself or a file that is not a cache (not empty, no "PFABCSH" magic):
// such a file is never replaced. From a cache, *stats holds only `examples`.
// *rebuilt_because says why a cache file that was there was not used (it is
// empty when there was none, or it was used): "it cannot be used: <the check
// that failed>", "<path> changed since it was built", "it was built reading
// binary labels and this run reads labels as K class ids" (or the other way),
// or "it was built skipping N bad lines and this run does not skip them".
Dataset load_dataset(const std::string& path, const ReadOptions& options,
                     const std::string& cache_path, ReadStats* stats = nullptr,
                     bool* from_cache = nullptr, std::string* rebuilt_because = nullptr);

}  // namespace parafab::worker
