#include "benchmarks/bench_rounds.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace parafab::benchmarks {
namespace {

bool lower_is_better(const BenchRecord& r) {
  const BenchField* f = r.field("better");
  return f != nullptr && std::holds_alternative<std::string>(*f) && std::get<std::string>(*f) == "lower";
}

// "yes" < "no" < "failed" < anything else: the worst round's word.
int verified_rank(const std::string& s) {
  if (s == "yes") return 0;
  if (s == "no") return 1;
  if (s == "failed") return 2;
  return 3;
}

std::string join_distinct(const std::vector<std::string>& texts) {
  std::vector<std::string> distinct;
  for (const std::string& t : texts) {
    if (std::find(distinct.begin(), distinct.end(), t) == distinct.end()) distinct.push_back(t);
  }
  std::string out;
  for (const std::string& t : distinct) out += (out.empty() ? "" : "|") + t;
  return out;
}

// The rounds' values of one field (those rounds that have it), merged.
BenchField merge_field(const std::string& key, const std::vector<const BenchField*>& values) {
  bool all_int = true;
  bool all_number = true;
  std::vector<double> numbers;
  std::vector<std::string> texts;
  for (const BenchField* f : values) {
    if (const auto* i = std::get_if<int64_t>(f)) {
      numbers.push_back(static_cast<double>(*i));
    } else if (const auto* d = std::get_if<double>(f)) {
      all_int = false;
      numbers.push_back(*d);
    } else {
      all_int = all_number = false;
      texts.push_back(std::get<std::string>(*f));
    }
  }
  if (all_number) {
    const double m = median_of(numbers);
    if (all_int) return static_cast<int64_t>(std::llround(m));
    return m;
  }
  if (key == "verified") {
    return *std::max_element(texts.begin(), texts.end(), [](const std::string& a, const std::string& b) {
      return verified_rank(a) < verified_rank(b);
    });
  }
  // Numbers mixed with texts (never written by one case): all as text.
  texts.clear();
  for (const BenchField* f : values) {
    if (const auto* i = std::get_if<int64_t>(f)) {
      texts.push_back(fmt::format("{}", *i));
    } else if (const auto* d = std::get_if<double>(f)) {
      texts.push_back(fmt::format("{}", *d));
    } else {
      texts.push_back(std::get<std::string>(*f));
    }
  }
  return join_distinct(texts);
}

std::string case_text(const BenchRecord& r) { return r.bench + " " + r.case_name + " (" + r.unit + ")"; }

}  // namespace

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

BenchRecord merge_round_records(const std::vector<BenchRecord>& rounds) {
  if (rounds.empty()) throw std::invalid_argument("merge_round_records: no rounds");
  const BenchRecord& first = rounds.front();
  for (const BenchRecord& r : rounds) {
    if (r.bench != first.bench || r.case_name != first.case_name || r.unit != first.unit) {
      throw std::invalid_argument("merge_round_records: " + case_text(r) + " among rounds of " + case_text(first));
    }
  }
  std::vector<double> values, ceilings, ratios;
  std::vector<std::string> sources;
  for (const BenchRecord& r : rounds) {
    values.push_back(r.value);
    if (r.ceiling) {
      ceilings.push_back(*r.ceiling);
      sources.push_back(r.ceiling_source);
    }
    if (r.ratio) ratios.push_back(*r.ratio);
  }
  BenchRecord out(first.bench, first.case_name, median_of(values), first.unit);
  // Fields in the order they first appear, round 0's first.
  std::vector<std::string> keys;
  for (const BenchRecord& r : rounds) {
    for (const auto& [k, v] : r.fields) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
  }
  for (const std::string& k : keys) {
    if (k == "rounds" || k == "ratio_min" || k == "ratio_max") continue;  // written below
    std::vector<const BenchField*> present;
    for (const BenchRecord& r : rounds) {
      if (const BenchField* f = r.field(k)) present.push_back(f);
    }
    out.with(k, merge_field(k, present));
  }
  if (!ceilings.empty()) {
    const double c = median_of(ceilings);
    out.ceiling = c;
    out.ceiling_source = join_distinct(sources);
    out.ratio.reset();
    if (c > 0.0 && out.value > 0.0) out.ratio = lower_is_better(out) ? c / out.value : out.value / c;
  }
  out.with("rounds", static_cast<int64_t>(rounds.size()));
  if (!ratios.empty()) {
    out.with("ratio_min", *std::min_element(ratios.begin(), ratios.end()))
        .with("ratio_max", *std::max_element(ratios.begin(), ratios.end()));
  }
  return out;
}

BenchReport merge_rounds(const std::vector<BenchReport>& rounds) {
  if (rounds.empty()) return {};
  if (rounds.size() == 1) return rounds.front();
  const std::vector<BenchRecord>& first = rounds.front().records();
  for (size_t r = 1; r < rounds.size(); ++r) {
    const std::vector<BenchRecord>& these = rounds[r].records();
    if (these.size() != first.size()) {
      throw std::invalid_argument(fmt::format("merge_rounds: round {} has {} records, round 1 has {}", r + 1,
                                              these.size(), first.size()));
    }
  }
  BenchReport out;
  for (size_t i = 0; i < first.size(); ++i) {
    std::vector<BenchRecord> same;
    for (const BenchReport& round : rounds) same.push_back(round.records()[i]);
    out.add(merge_round_records(same));
  }
  return out;
}

}  // namespace parafab::benchmarks
