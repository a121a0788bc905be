// Key partitioning: server i of S owns the i-th of S equal ranges of
// mix64(key) (DESIGN.md, "Data model"). The ranges travel in the cluster map,
// so a later change of S can move whole ranges.
//
//   ps::KeyPartition part(4);
//   uint32_t server = part.server_of(key);
#pragma once

#include <cstdint>
#include <vector>

#include "ps/key_hash.h"

namespace parafab::ps {

// Half-open range [begin, end) of mixed keys; the last range ends at 2^64,
// written as end == 0 with last == true.
struct KeyRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  bool last = false;
  bool contains(uint64_t mixed) const { return mixed >= begin && (last || mixed < end); }
};

class KeyPartition {
 public:
  // Throws std::invalid_argument when servers == 0.
  explicit KeyPartition(uint32_t servers);

  uint32_t servers() const { return static_cast<uint32_t>(ranges_.size()); }
  const KeyRange& range(uint32_t server) const { return ranges_.at(server); }
  uint32_t server_of(uint64_t key) const { return server_of_mixed(mix64(key)); }
  uint32_t server_of_mixed(uint64_t mixed) const;

 private:
  std::vector<KeyRange> ranges_;
};

}  // namespace parafab::ps
