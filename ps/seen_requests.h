// Which request ids of one worker a server has seen, so that a request sent
// twice changes its state once.
//
//   ps::SeenRequests seen;
//   switch (seen.note(header.request_id)) {
//     case ps::SeenRequests::Arrival::kFirst:  // above every id seen: new
//     case ps::SeenRequests::Arrival::kLate:   // below one seen, itself not: a request sent again
//       apply(...); break;                     //   after the transport lost it
//     case ps::SeenRequests::Arrival::kSeen:   // seen before: answer, change nothing
//       break;
//   }
//
// A worker numbers its requests 1, 2, 3, ... (worker::KvClient; one counter
// for every kind and server, so a server sees only some of the numbers).
// The server remembers the highest id seen and, of the kWindow ids up to it,
// which it has seen (a bitmap, 8 KiB a worker). An id further back counts as
// seen: the client sends a request again only while fewer than kWindow / 2
// newer requests have been numbered (KvClient::kResendWindow), so an id that
// old is never a request sent again, and arrived (the transport keeps a
// sender's order) or was lost for good.
//
// window() and restore(highest, window) carry the state through a
// checkpoint (ps::ShardCheckpoint), so that a push lost before it and sent
// again after a restore is still applied. restore(h): every id up to h
// counts as seen (a checkpoint of version 3 or older, which holds only the
// last push id).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace parafab::ps {

class SeenRequests {
 public:
  static constexpr uint64_t kWindow = uint64_t{1} << 16;
  enum class Arrival { kFirst, kLate, kSeen };

  // Id 0 (a requester that does not number its requests) is always kFirst
  // and not remembered.
  Arrival note(uint64_t id);
  void restore(uint64_t highest);
  // The bitmap of the window (kWindowWords words; bit id % kWindow of word
  // (id % kWindow) / 64 set: id seen), and the state from it again. Throws
  // std::invalid_argument for a window of another size.
  static constexpr size_t kWindowWords = kWindow / 64;
  std::span<const uint64_t> window() const { return bits_; }
  void restore(uint64_t highest, std::span<const uint64_t> window);
  uint64_t highest() const { return highest_; }

 private:
  bool test(uint64_t id) const { return (bits_[(id % kWindow) / 64] >> (id % 64)) & 1; }
  void set(uint64_t id) { bits_[(id % kWindow) / 64] |= uint64_t{1} << (id % 64); }
  void clear(uint64_t id) { bits_[(id % kWindow) / 64] &= ~(uint64_t{1} << (id % 64)); }

  uint64_t highest_ = 0;
  // Bit id % kWindow: id seen, for ids in (highest_ - kWindow, highest_].
  std::vector<uint64_t> bits_ = std::vector<uint64_t>(kWindow / 64, 0);
};

}  // namespace parafab::ps
