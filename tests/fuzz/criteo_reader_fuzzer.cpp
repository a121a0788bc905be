// libFuzzer target: the Criteo TSV reader (worker::parse_text_dataset with
// DataFormat::kCriteo, or kAuto). The first input byte picks the options,
// the rest is the text; text_reader_checks.h says what must hold, and every
// key of an accepted row carries the namespace of a Criteo column (1..39).
//
//   byte 0: bit 0 auto-detect the format, bits 1-2 parts - 1
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tests/fuzz/text_reader_checks.h"
#include "worker/feature_hashing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using parafab::worker::DataFormat;
  const uint8_t sel = data[0];
  parafab::worker::ReadOptions opt;
  opt.format = (sel & 1) ? DataFormat::kAuto : DataFormat::kCriteo;
  const uint32_t parts = 1 + ((sel >> 1) & 3);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  parafab::fuzz::check_text_reader(text, opt, parts);

  if (opt.format == DataFormat::kCriteo) {
    opt.skip_bad_lines = true;
    const parafab::fuzz::Outcome o = parafab::fuzz::parse(text, opt);
    for (uint64_t key : o.data->view().keys) {
      const uint32_t ns = parafab::worker::feature_namespace(key);
      parafab::fuzz::check(ns >= 1 && ns <= 39, "a Criteo key outside the columns' namespaces");
    }
  }
  return 0;
}
