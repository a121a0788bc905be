#include "ps/table_schema.h"

#include <cmath>
#include <stdexcept>

#include "ps/key_hash.h"

namespace parafab::ps {

void TableSchema::validate() const {
  const std::string who = "table " + std::to_string(id) + ": ";
  if (width == 0 || width > (1u << 20)) {
    throw std::invalid_argument(who + "width = " + std::to_string(width) + " must be in [1, 2^20]");
  }
  if (kind == TableKind::kDense && rows == 0) throw std::invalid_argument(who + "a dense table needs rows > 0");
  if (init.kind == InitializerKind::kNormal && !(init.stddev >= 0.0f && std::isfinite(init.stddev))) {
    throw std::invalid_argument(who + "initializer stddev = " + std::to_string(init.stddev) +
                                " must be finite and >= 0");
  }
  try {
    updater.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(who + e.what());
  }
}

RowRange dense_rows_of(uint64_t rows, uint32_t server, uint32_t servers) {
  // 128-bit products: rows * server cannot overflow.
  const auto at = [&](uint32_t i) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(rows) * i / servers);
  };
  return {at(server), at(server + 1)};
}

void initialize_value(const Initializer& init, uint64_t key, float* value, uint32_t width) {
  if (init.kind == InitializerKind::kZeros) {
    for (uint32_t i = 0; i < width; ++i) value[i] = 0.0f;
    return;
  }
  // Box-Muller on a counter-based stream: uniforms from mix64(seed, key, i),
  // so the value depends on nothing but (seed, key).
  const uint64_t base = mix64(init.seed ^ mix64(key));
  constexpr double kTwoPi = 6.283185307179586;
  for (uint32_t i = 0; i < width; i += 2) {
    const uint64_t a = mix64(base + 2 * i + 1), b = mix64(base + 2 * i + 2);
    const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1p-53;  // (0, 1]
    const double u2 = static_cast<double>(b >> 11) * 0x1p-53;          // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1)) * init.stddev;
    value[i] = static_cast<float>(r * std::cos(kTwoPi * u2));
    if (i + 1 < width) value[i + 1] = static_cast<float>(r * std::sin(kTwoPi * u2));
  }
}

}  // namespace parafab::ps
