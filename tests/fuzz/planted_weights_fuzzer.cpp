// libFuzzer target: the planted-weights text file that `parafab train
// --planted FILE` reads (worker::read_planted_model; gen-data --weights-out
// writes it: "bias B", then "index weight" lines). The input is written to a
// temp file and read. It must be refused with a std::runtime_error whose
// message starts with that path (nothing else may escape: no bad_alloc, no
// out-of-memory from an index alone), or come back as a finite bias and
// finite weights, no more of them than the file has lines; written back
// ("bias" first, then every index in order, to 17 digits) and read again it
// must give the same model, bit for bit.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_temp_file.h"
#include "worker/synthetic_data.h"

namespace {

using parafab::fuzz::check;
using parafab::fuzz::temp_path;
using parafab::fuzz::write_temp_file;
using parafab::worker::PlantedModel;

std::string text_of(const PlantedModel& m) {
  char num[64];
  std::snprintf(num, sizeof num, "bias %.17g\n", m.bias);
  std::string s = num;
  for (size_t j = 0; j < m.weights.size(); ++j) {
    std::snprintf(num, sizeof num, "%zu %.17g\n", j + 1, m.weights[j]);
    s += num;
  }
  return s;
}

bool same(const PlantedModel& a, const PlantedModel& b) {
  return parafab::fuzz::bytes_equal<double>(std::span(&a.bias, 1), std::span(&b.bias, 1)) &&
         parafab::fuzz::bytes_equal<double>(a.weights, b.weights);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = temp_path("planted.weights"), again = temp_path("again.weights");
  write_temp_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  PlantedModel m;
  try {
    m = parafab::worker::read_planted_model(path);
  } catch (const std::runtime_error& e) {
    check(std::string(e.what()).rfind(path, 0) == 0, "a refusal does not start with the path");
    ::unlink(path.c_str());
    return 0;
  }
  check(std::isfinite(m.bias), "a bias that is not finite");
  for (double w : m.weights) check(std::isfinite(w), "a weight that is not finite");
  size_t lines = 0;
  for (size_t i = 0; i < size; ++i) lines += data[i] == '\n';
  if (size > 0 && data[size - 1] != '\n') ++lines;
  check(m.weights.size() <= lines, "more weights than the file has lines");
  const std::string text = text_of(m);
  write_temp_file(again, text);
  check(same(m, parafab::worker::read_planted_model(again)), "an accepted model writes back and reads again differently");
  ::unlink(path.c_str());
  ::unlink(again.c_str());
  return 0;
}
