// Several rounds of one benchmark, each measuring its figures and their
// ceilings afresh, merged into one report of medians.
//
// This machine's speed swings by half between runs a minute apart (the
// same tcp ping-pong: 1.9 or 4.2 GB/s), so a figure measured once beside a
// ceiling measured once, tens of seconds earlier, can land at half or at
// twice its real ratio. Rounds pair each figure with a ceiling of the same
// minute, and the median of three rounds is the figure reported:
//
//   std::vector<BenchReport> rounds(3);
//   for (BenchReport& r : rounds) measure_once(r);   // the same cases, in the same order
//   BenchReport merged = merge_rounds(rounds);
//
// A merged record has the median value and the median ceiling of its
// rounds, the ratio of those two (value / ceiling, or ceiling / value when
// the record's field "better" is "lower", as with_latency_ceiling writes
// it), and the fields rounds, ratio_min and ratio_max: the spread of the
// rounds' own ratios. Its other fields are merged by kind: numbers to their
// median (integers stay integers), a text equal in every round to itself,
// "verified" to the worst round's ("failed" over "no" over "yes"), and any
// other differing texts to their distinct values joined by "|".
#pragma once

#include <vector>

#include "benchmarks/bench_report.h"

namespace parafab::benchmarks {

// The median of v: the middle value, or the mean of the middle two. 0 for none.
double median_of(std::vector<double> v);

// One case's records, one per round, into one (see above). Throws
// std::invalid_argument for no records or records of different cases
// (bench, case or unit).
BenchRecord merge_round_records(const std::vector<BenchRecord>& rounds);

// Reports of rounds that ran the same cases in the same order, merged record
// by record. Throws std::invalid_argument, naming the first difference, when
// the reports differ in their cases; one report is returned as it is.
BenchReport merge_rounds(const std::vector<BenchReport>& rounds);

}  // namespace parafab::benchmarks
