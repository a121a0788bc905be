// libFuzzer target: the binary cache reader (worker::open_binary_cache).
// The input is written to a temp file and opened. It must be refused with a
// DataError naming that path, or accepted as a well-formed dataset (row_ptr
// 0 .. nnz and non-decreasing, every array inside the mapping: ASan checks
// each byte read) that writes back and reopens to the same rows.
//
// The checksums would stop almost every mutation at the header, so the
// first byte can ask the harness to make some fields right before writing:
//   bit 0  magic and version
//   bit 1  the payload and header checksums (recomputed last)
// which lets the fuzzer reach the size and row-offset checks behind them.
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <xxhash.h>

#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_temp_file.h"
#include "worker/binary_cache.h"
#include "worker/data_error.h"

namespace {

using parafab::fuzz::check;
using parafab::fuzz::temp_path;
using parafab::fuzz::write_temp_file;

constexpr size_t kHeader = 72, kPayloadHashAt = 56, kHeaderHashAt = 64;

void fix_up(std::vector<unsigned char>& f, uint8_t how) {
  if (f.size() < kHeader) return;
  if (how & 1) {
    std::memcpy(f.data(), "PFABCSH1", 8);
    const uint32_t version = 2;
    std::memcpy(f.data() + 8, &version, 4);
  }
  if (how & 2) {
    const uint64_t payload = XXH64(f.data() + kHeader, f.size() - kHeader, 0);
    std::memcpy(f.data() + kPayloadHashAt, &payload, 8);
    const uint64_t header = XXH64(f.data(), kHeaderHashAt, 0);
    std::memcpy(f.data() + kHeaderHashAt, &header, 8);
  }
}

void check_view(const parafab::worker::DatasetView& v) {
  check(v.row_ptr.size() == v.rows() + 1, "row_ptr has not rows + 1 entries");
  check(v.row_ptr.front() == 0 && v.row_ptr.back() == v.nnz(), "row_ptr does not run 0 .. nnz");
  check(v.keys.size() == v.values.size(), "keys and values differ in length");
  // Touch every byte of every array (ASan: inside the mapping) and every row.
  uint64_t sum = 0;
  for (size_t i = 0; i < v.rows(); ++i) {
    check(v.row_ptr[i] <= v.row_ptr[i + 1], "row_ptr decreases");
    for (uint64_t k : v.row_keys(i)) sum += k;
    for (float x : v.row_values(i)) sum += std::bit_cast<uint32_t>(x);
    sum += std::bit_cast<uint32_t>(v.labels[i]);
  }
  if (sum == 0x5eed) std::fprintf(stderr, " ");  // keeps the reads
}

bool same_rows(const parafab::worker::DatasetView& a, const parafab::worker::DatasetView& b) {
  using parafab::fuzz::bytes_equal;
  return bytes_equal(a.labels, b.labels) && bytes_equal(a.row_ptr, b.row_ptr) && bytes_equal(a.keys, b.keys) &&
         bytes_equal(a.values, b.values);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace parafab::worker;
  std::vector<unsigned char> file(data + 1, data + size);
  fix_up(file, data[0]);
  static const std::string path = temp_path("cache.pfc");
  static const std::string copy = temp_path("copy.pfc");
  write_temp_file(path, file);
  try {
    SourceStamp stamp;
    uint64_t skipped = 0;
    const Dataset d = open_binary_cache(path, &stamp, &skipped);
    check_view(d.view());
    // What was accepted must survive the writer and the reader again.
    write_binary_cache(copy, d, stamp, skipped);
    SourceStamp stamp2;
    uint64_t skipped2 = 0;
    const Dataset again = open_binary_cache(copy, &stamp2, &skipped2);
    check(stamp2 == stamp && skipped2 == skipped, "stamp or skipped lines changed on a rewrite");
    check(same_rows(d.view(), again.view()), "rows changed on a rewrite");
  } catch (const DataError& e) {
    check(e.file() == path, "DataError names another file");
    check(std::string(e.what()).rfind(path, 0) == 0, "DataError message does not start with the path");
  }
  ::unlink(path.c_str());
  ::unlink(copy.c_str());
  return 0;
}
