#include "ps/key_partition.h"

#include <stdexcept>

namespace parafab::ps {

KeyPartition::KeyPartition(uint32_t servers) {
  if (servers == 0) throw std::invalid_argument("KeyPartition: the number of servers must be at least 1");
  ranges_.resize(servers);
  // begin_i = floor(i * 2^64 / S), computed in 128 bits so every range has
  // the same size to within one key.
  for (uint32_t i = 0; i < servers; ++i) {
    auto begin = static_cast<uint64_t>((static_cast<unsigned __int128>(i) << 64) / servers);
    ranges_[i].begin = begin;
    if (i > 0) ranges_[i - 1].end = begin;
  }
  ranges_.back().end = 0;
  ranges_.back().last = true;
}

uint32_t KeyPartition::server_of_mixed(uint64_t mixed) const {
  // The inverse of begin_i: the largest i with begin_i <= mixed.
  const auto s = static_cast<unsigned __int128>(ranges_.size());
  auto i = static_cast<uint32_t>((static_cast<unsigned __int128>(mixed) * s) >> 64);
  // Rounding of begin_i (a floor) can put mixed one range too low.
  if (i + 1 < ranges_.size() && mixed >= ranges_[i + 1].begin) ++i;
  return i;
}

}  // namespace parafab::ps
