// SeenRequests against a set of every id seen: the same answer for every
// id, in order, out of order, across the window's edge, after a jump and
// after a trip through its window (a checkpoint).
#include "ps/seen_requests.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

namespace parafab::ps {
namespace {

using Arrival = SeenRequests::Arrival;
constexpr uint64_t kW = SeenRequests::kWindow;

// The rule with no window to slide: every id remembered.
struct Reference {
  std::set<uint64_t> seen;
  uint64_t highest = 0;
  Arrival note(uint64_t id) {
    if (id == 0) return Arrival::kFirst;
    if (id > highest) {
      highest = id;
      seen.insert(id);
      return Arrival::kFirst;
    }
    if (highest - id >= kW) return Arrival::kSeen;  // too old to be a request sent again
    return seen.insert(id).second ? Arrival::kLate : Arrival::kSeen;
  }
};

TEST(SeenRequests, InOrderIdsAreFirstAndRepeatsSeen) {
  SeenRequests s;
  EXPECT_EQ(s.note(1), Arrival::kFirst);
  EXPECT_EQ(s.note(2), Arrival::kFirst);
  EXPECT_EQ(s.note(2), Arrival::kSeen);
  EXPECT_EQ(s.note(5), Arrival::kFirst);  // 3 and 4 went to other servers, or were lost
  EXPECT_EQ(s.note(4), Arrival::kLate);   // sent again
  EXPECT_EQ(s.note(4), Arrival::kSeen);
  EXPECT_EQ(s.note(3), Arrival::kLate);
  EXPECT_EQ(s.note(1), Arrival::kSeen);
  EXPECT_EQ(s.note(0), Arrival::kFirst);  // unnumbered, every time
  EXPECT_EQ(s.note(0), Arrival::kFirst);
  EXPECT_EQ(s.highest(), 5u);
}

TEST(SeenRequests, TheWindowsEdge) {
  SeenRequests s;
  EXPECT_EQ(s.note(10), Arrival::kFirst);
  EXPECT_EQ(s.note(10 + kW - 1), Arrival::kFirst);
  EXPECT_EQ(s.note(11), Arrival::kLate);   // kW - 2 back: inside
  EXPECT_EQ(s.note(10), Arrival::kSeen);   // kW - 1 back: inside, and seen
  EXPECT_EQ(s.note(9), Arrival::kSeen);    // kW back: outside, counted seen
  EXPECT_EQ(s.note(10 + kW), Arrival::kFirst);
  // Slot 10 % kW now stands for 10 + kW, and 10 fell out of the window.
  EXPECT_EQ(s.note(10), Arrival::kSeen);
  EXPECT_EQ(s.note(12), Arrival::kLate);   // kW - 2 back, never seen: its slot was cleared
  // A jump of more than the window forgets the whole bitmap.
  EXPECT_EQ(s.note(10 + 5 * kW), Arrival::kFirst);
  EXPECT_EQ(s.note(11 + 4 * kW), Arrival::kLate);
  EXPECT_EQ(s.note(10 + 4 * kW), Arrival::kSeen);  // out of the window
}

TEST(SeenRequests, RestoreCountsEveryIdUpToTheHighestAsSeen) {
  SeenRequests s;
  EXPECT_EQ(s.note(3), Arrival::kFirst);
  s.restore(100);
  for (uint64_t id : {1u, 50u, 99u, 100u}) EXPECT_EQ(s.note(id), Arrival::kSeen) << id;
  EXPECT_EQ(s.note(102), Arrival::kFirst);
  EXPECT_EQ(s.note(101), Arrival::kLate);
  EXPECT_EQ(s.note(100), Arrival::kSeen);
}

TEST(SeenRequests, AgreesWithASetOnRandomArrivals) {
  for (const uint64_t seed : {1u, 2u, 3u}) {
    std::mt19937_64 rng(seed);
    SeenRequests s;
    Reference ref;
    uint64_t next = 1;
    for (int i = 0; i < 400000; ++i) {
      uint64_t id = 0;
      const uint64_t r = rng() % 100;
      if (r < 60) {
        id = next;
        next += 1 + rng() % 3;  // the ids the other servers got
      } else if (r < 62) {
        next += rng() % (2 * kW);  // a jump, sometimes past the window
        id = next++;
      } else if (ref.highest > 0) {
        // Back: mostly inside the window, sometimes just outside it.
        const uint64_t back = r < 95 ? rng() % 64 : rng() % (kW + 64);
        id = ref.highest > back ? ref.highest - back : 1;
      }
      ASSERT_EQ(s.note(id), ref.note(id)) << "seed " << seed << " step " << i << " id " << id;
      if (i % 50000 == 49999) {
        // Through a checkpoint: a fresh one restored from the window goes on
        // exactly as the old one would.
        SeenRequests back;
        back.restore(s.highest(), s.window());
        s = back;
      }
    }
  }
}

TEST(SeenRequests, AWindowOfAnotherSizeIsRefused) {
  SeenRequests s;
  const std::vector<uint64_t> short_window(SeenRequests::kWindowWords - 1, 0);
  EXPECT_THROW(s.restore(5, short_window), std::invalid_argument);
}

}  // namespace
}  // namespace parafab::ps
