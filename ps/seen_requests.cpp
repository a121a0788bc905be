#include "ps/seen_requests.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace parafab::ps {

SeenRequests::Arrival SeenRequests::note(uint64_t id) {
  if (id == 0) return Arrival::kFirst;
  if (id > highest_) {
    // The ids between the old highest and this one slide into the window
    // unseen (a worker's ids reach a server a few apart).
    if (id - highest_ >= kWindow) {
      std::fill(bits_.begin(), bits_.end(), 0);
    } else {
      for (uint64_t k = highest_ + 1; k < id; ++k) clear(k);
    }
    set(id);
    highest_ = id;
    return Arrival::kFirst;
  }
  if (highest_ - id >= kWindow) return Arrival::kSeen;
  if (test(id)) return Arrival::kSeen;
  set(id);
  return Arrival::kLate;
}

void SeenRequests::restore(uint64_t highest, std::span<const uint64_t> window) {
  if (window.size() != kWindowWords) {
    throw std::invalid_argument("a window of request ids has " + std::to_string(kWindowWords) + " words, not " +
                                std::to_string(window.size()));
  }
  highest_ = highest;
  bits_.assign(window.begin(), window.end());
}

void SeenRequests::restore(uint64_t highest) {
  highest_ = highest;
  std::fill(bits_.begin(), bits_.end(), ~uint64_t{0});
}

}  // namespace parafab::ps
