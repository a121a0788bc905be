// libFuzzer target: the libsvm text reader (worker::parse_text_dataset with
// DataFormat::kLibsvm, or kAuto). The first input byte picks the options,
// the rest is the text; text_reader_checks.h says what must hold.
//
//   byte 0: bits 0-1 classes (2, 2, 3, 5), bit 2 auto-detect the format
//           (two classes only: Criteo has no others), bits 3-4 parts - 1
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tests/fuzz/text_reader_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using parafab::worker::DataFormat;
  const uint8_t sel = data[0];
  constexpr int kClasses[4] = {2, 2, 3, 5};
  parafab::worker::ReadOptions opt;
  opt.classes = kClasses[sel & 3];
  opt.format = (sel & 4) && opt.classes == 2 ? DataFormat::kAuto : DataFormat::kLibsvm;
  const uint32_t parts = 1 + ((sel >> 3) & 3);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  parafab::fuzz::check_text_reader(text, opt, parts);
  return 0;
}
