// The Criteo generator: parameters and calibration in the model's
// constructor, then fixed blocks of examples, each from its own counter-based
// stream, generated in rounds of `threads` blocks and written in block order.
#include "worker/synthetic_criteo.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "ps/key_hash.h"
#include "worker/synthetic_sampling.h"

namespace parafab::worker {
namespace {

using detail::Stream;
using detail::ZipfSampler;

constexpr uint64_t kBlock = 4096;  // examples per independently seeded block
constexpr uint64_t kParamStream = 1ULL << 62;
constexpr uint64_t kTestStream = 1ULL << 61;
constexpr uint64_t kCalibrationStream = 1ULL << 60;
constexpr uint64_t kCalibrationExamples = 1 << 16;
constexpr int kMaxCrosses = kSyntheticCriteoCats * (kSyntheticCriteoCats - 1) / 2;
constexpr uint32_t kMaxVocab = 1u << 24;

// The integer columns' log-normal parameters: ln of a typical count and its
// spread (I5 and I9 are the wide ones, I10 is nearly always 0 or 1).
constexpr std::array<double, kSyntheticCriteoInts> kIntMu = {1.0, 2.5, 1.5, 2.0, 5.0, 3.0, 1.0,
                                                             2.5, 4.0, 0.3, 1.2, 0.5, 2.0};
constexpr std::array<double, kSyntheticCriteoInts> kIntSigma = {1.0, 1.5, 1.0, 1.2, 2.0, 1.5, 1.0,
                                                                1.0, 1.5, 0.6, 1.0, 0.8, 1.2};

// murmur3's 32-bit finalizer and its inverse: a bijection of 32 bits, so the
// ids of a column map to distinct strings and the strings back to the ids.
constexpr uint32_t inverse_odd(uint32_t a) {  // a * x == 1 mod 2^32, by Newton
  uint32_t x = a;
  for (int i = 0; i < 5; ++i) x *= 2u - a * x;
  return x;
}
constexpr uint32_t kFmixC1 = 0x85ebca6bu, kFmixC2 = 0xc2b2ae35u;
constexpr uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= kFmixC1;
  h ^= h >> 13;
  h *= kFmixC2;
  h ^= h >> 16;
  return h;
}
constexpr uint32_t unfmix32(uint32_t h) {
  h ^= h >> 16;
  h *= inverse_odd(kFmixC2);
  h ^= (h >> 13) ^ (h >> 26);
  h *= inverse_odd(kFmixC1);
  h ^= h >> 16;
  return h;
}
static_assert(unfmix32(fmix32(0)) == 0 && unfmix32(fmix32(12345)) == 12345 &&
              unfmix32(fmix32(0xdeadbeefu)) == 0xdeadbeefu);
// Independent of the seed: a value's string is a property of (column, id).
constexpr uint32_t column_key(int field) {
  return static_cast<uint32_t>(ps::mix64(0xc217e0c217e0ULL + static_cast<uint64_t>(field)));
}

double sigmoid(double m) { return m >= 0 ? 1.0 / (1.0 + std::exp(-m)) : std::exp(m) / (1.0 + std::exp(m)); }
// -log sigmoid(s), stable for any s.
double neg_log_sigmoid(double s) { return s >= 0 ? std::log1p(std::exp(-s)) : -s + std::log1p(std::exp(s)); }

void check_rate(double r, const char* flag) {
  if (!(r >= 0 && r <= 1)) throw std::invalid_argument(fmt::format("{} must be in [0, 1], got {}", flag, r));
}
void check_sigma(double s, const char* flag) {
  if (!(s >= 0) || !std::isfinite(s)) throw std::invalid_argument(fmt::format("{} must be finite and >= 0, got {}", flag, s));
}

// Validates and returns the options with vocab expanded to 26 sizes.
CriteoSyntheticOptions validated(CriteoSyntheticOptions o) {
  if (o.examples == 0) throw std::invalid_argument("--examples must be >= 1, got 0");
  if (o.vocab.size() == 1) o.vocab.assign(kSyntheticCriteoCats, o.vocab[0]);
  if (o.vocab.size() != static_cast<size_t>(kSyntheticCriteoCats))
    throw std::invalid_argument(
        fmt::format("--vocab needs 1 or {} sizes (C1..C26), got {}", kSyntheticCriteoCats, o.vocab.size()));
  for (size_t f = 0; f < o.vocab.size(); ++f) {
    if (o.vocab[f] < 1 || o.vocab[f] > kMaxVocab)
      throw std::invalid_argument(fmt::format("--vocab: C{} has {} values, must be in [1, {}]", f + 1, o.vocab[f], kMaxVocab));
  }
  if (o.zipf_exponent < 0 || !std::isfinite(o.zipf_exponent))
    throw std::invalid_argument(fmt::format("--zipf must be >= 0, got {}", o.zipf_exponent));
  check_rate(o.empty_rate, "--empty-rate");
  check_rate(o.int_empty_rate, "--int-empty-rate");
  if (!(o.label_rate > 0 && o.label_rate < 1))
    throw std::invalid_argument(fmt::format("--label-rate must be in (0, 1) (the bias is solved for it), got {}", o.label_rate));
  if (o.crosses < 0 || o.crosses > kMaxCrosses)
    throw std::invalid_argument(fmt::format("--crosses must be in [0, {}] (the pairs of {} categorical fields), got {}",
                                            kMaxCrosses, kSyntheticCriteoCats, o.crosses));
  if (o.crosses > 0 && (o.cross_dim < 1 || o.cross_dim > 64))
    throw std::invalid_argument(fmt::format("--cross-dim must be in [1, 64], got {}", o.cross_dim));
  check_sigma(o.cross_sigma, "--cross-sigma");
  check_sigma(o.main_sigma, "--main-sigma");
  if (o.int_terms < 0 || o.int_terms > kSyntheticCriteoInts)
    throw std::invalid_argument(fmt::format("--int-terms must be in [0, {}], got {}", kSyntheticCriteoInts, o.int_terms));
  if (!std::isfinite(o.int_weight)) throw std::invalid_argument(fmt::format("--int-weight must be finite, got {}", o.int_weight));
  o.threads = std::max(1, o.threads);
  return o;
}

// The bias b with mean sigmoid(b + m_i) == rate: Newton steps kept inside a
// shrinking bracket (the mean is increasing in b).
double calibrate_bias(const std::vector<double>& margins, double rate) {
  double lo = -60, hi = 60, b = std::log(rate / (1 - rate));
  double mean_m = 0;
  for (double m : margins) mean_m += m;
  b -= mean_m / static_cast<double>(margins.size());
  for (int it = 0; it < 100; ++it) {
    double p = 0, dp = 0;
    for (double m : margins) {
      const double q = sigmoid(b + m);
      p += q;
      dp += q * (1 - q);
    }
    p = p / static_cast<double>(margins.size()) - rate;
    dp /= static_cast<double>(margins.size());
    if (std::fabs(p) < 1e-12) break;
    (p > 0 ? hi : lo) = b;
    double next = dp > 0 ? b - p / dp : 0.5 * (lo + hi);
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    if (hi - lo < 1e-12) break;
    b = next;
  }
  return b;
}

void append_int(std::string& out, uint64_t v) {
  char num[24];
  auto [p, ec] = std::to_chars(num, num + sizeof num, v);
  out.append(num, p);
}

void append_hex8(std::string& out, uint32_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  char s[8];
  for (int i = 7; i >= 0; --i, v >>= 4) s[i] = kDigits[v & 15];
  out.append(s, 8);
}

}  // namespace

double CriteoFileStats::cat_empty_rate() const {
  return examples ? static_cast<double>(cat_empty) / (static_cast<double>(examples) * kSyntheticCriteoCats) : 0;
}
double CriteoFileStats::int_empty_rate() const {
  return examples ? static_cast<double>(int_empty) / (static_cast<double>(examples) * kSyntheticCriteoInts) : 0;
}
void CriteoFileStats::add(const CriteoFileStats& o) {
  examples += o.examples;
  positives += o.positives;
  cat_empty += o.cat_empty;
  int_empty += o.int_empty;
  planted_loss += o.planted_loss;
  additive_loss += o.additive_loss;
  planted_prob += o.planted_prob;
}

std::vector<uint32_t> default_criteo_vocab() {
  return {1000, 500, 2000, 1500, 200, 20,  1000, 100, 10,  2000, 800, 1500, 300,
          30,   1200, 1800, 10,  600, 400, 15,  2000, 50,  12,  1000, 80,  700};
}

struct CriteoPlantedModel::Impl {
  CriteoSyntheticOptions o;                       // vocab expanded to 26 sizes
  std::vector<ZipfSampler> zipf;                  // by field
  std::vector<std::vector<double>> w;             // [f][c]
  std::vector<std::vector<double>> w_additive;    // [f][c]: w plus the crosses' main effects
  std::vector<std::vector<double>> e;             // [f][c * k + t]; empty for fields in no cross
  std::vector<std::pair<int, int>> crosses;
  std::array<double, kSyntheticCriteoInts> beta{};  // 0 past int_terms
  double bias = 0, additive_bias = 0;

  static double int_feature(int j, int64_t v) {
    return std::clamp((std::log1p(static_cast<double>(v)) - kIntMu[j]) / kIntSigma[j], -3.0, 3.0);
  }
  double int_part(const CriteoExample& x) const {
    double m = 0;
    for (int j = 0; j < o.int_terms; ++j)
      if (x.ints[j] >= 0) m += beta[j] * int_feature(j, x.ints[j]);
    return m;
  }
  // The margins without their biases.
  double raw_margin(const CriteoExample& x) const {
    double m = int_part(x);
    for (int f = 0; f < kSyntheticCriteoCats; ++f)
      if (x.cat[f] != CriteoExample::kEmpty) m += w[f][x.cat[f]];
    const size_t k = static_cast<size_t>(o.cross_dim);
    for (const auto& [f, g] : crosses) {
      if (x.cat[f] == CriteoExample::kEmpty || x.cat[g] == CriteoExample::kEmpty) continue;
      const double* a = e[f].data() + x.cat[f] * k;
      const double* b = e[g].data() + x.cat[g] * k;
      for (size_t t = 0; t < k; ++t) m += a[t] * b[t];
    }
    return m;
  }
  double raw_additive_margin(const CriteoExample& x) const {
    double m = int_part(x);
    for (int f = 0; f < kSyntheticCriteoCats; ++f)
      if (x.cat[f] != CriteoExample::kEmpty) m += w_additive[f][x.cat[f]];
    return m;
  }

  // Draws one example; the stream advances by the same amount every time.
  void draw(Stream& rng, CriteoExample& x) const {
    for (int f = 0; f < kSyntheticCriteoCats; ++f) {
      const double u_empty = rng.uniform(), u_value = rng.uniform();
      x.cat[f] = u_empty < o.empty_rate ? CriteoExample::kEmpty : static_cast<uint32_t>(zipf[f].sample(u_value));
    }
    for (int j = 0; j < kSyntheticCriteoInts; ++j) {
      const double u_empty = rng.uniform();
      const double z = std::clamp(rng.normal(), -6.0, 6.0);
      x.ints[j] = u_empty < o.int_empty_rate ? -1 : static_cast<int64_t>(std::floor(std::exp(kIntMu[j] + kIntSigma[j] * z)));
    }
  }

  // One example's share of the statistics.
  void account(const CriteoExample& x, bool label, CriteoFileStats& st) const {
    const double m = bias + raw_margin(x), a = additive_bias + raw_additive_margin(x);
    ++st.examples;
    st.positives += label;
    for (uint32_t c : x.cat) st.cat_empty += c == CriteoExample::kEmpty;
    for (int64_t v : x.ints) st.int_empty += v < 0;
    st.planted_loss += neg_log_sigmoid(label ? m : -m);
    st.additive_loss += neg_log_sigmoid(label ? a : -a);
    st.planted_prob += sigmoid(m);
  }
};

CriteoPlantedModel::CriteoPlantedModel(const CriteoSyntheticOptions& options) {
  auto impl = std::make_shared<Impl>();
  Impl& m = *impl;
  m.o = validated(options);
  const CriteoSyntheticOptions& o = m.o;
  const size_t k = static_cast<size_t>(o.cross_dim);

  // Crossed pairs: the fewest fields that have `crosses` pairs (a seeded
  // draw of the 26), then a seeded draw of `crosses` of their pairs. Crosses
  // that share fields, as a shared latent vector per value makes them, are
  // what a factorization machine of small dimension can represent.
  Stream pair_rng(o.seed, kParamStream);
  auto draw_prefix = [&](auto& v, size_t n) {  // the first n of a seeded shuffle
    for (size_t i = 0; i < n; ++i) std::swap(v[i], v[i + pair_rng.next() % (v.size() - i)]);
  };
  std::vector<int> fields(kSyntheticCriteoCats);
  for (int f = 0; f < kSyntheticCriteoCats; ++f) fields[static_cast<size_t>(f)] = f;
  size_t pool = o.crosses > 0 ? 2 : 0;
  while (pool * (pool - 1) / 2 < static_cast<size_t>(o.crosses)) ++pool;
  draw_prefix(fields, pool);
  std::vector<std::pair<int, int>> pairs;
  for (size_t i = 0; i < pool; ++i)
    for (size_t j = i + 1; j < pool; ++j) pairs.emplace_back(std::min(fields[i], fields[j]), std::max(fields[i], fields[j]));
  draw_prefix(pairs, static_cast<size_t>(o.crosses));
  m.crosses.assign(pairs.begin(), pairs.begin() + o.crosses);
  std::sort(m.crosses.begin(), m.crosses.end());
  std::vector<bool> crossed(kSyntheticCriteoCats, false);
  for (const auto& [f, g] : m.crosses) crossed[f] = crossed[g] = true;

  for (int j = 0; j < o.int_terms; ++j) m.beta[j] = (pair_rng.next() & 1) ? o.int_weight : -o.int_weight;

  // Weights and latent vectors, each field from its own streams, so a field's
  // parameters do not depend on which pairs were drawn.
  m.w.resize(kSyntheticCriteoCats);
  m.e.resize(kSyntheticCriteoCats);
  for (int f = 0; f < kSyntheticCriteoCats; ++f) {
    const uint32_t v = o.vocab[f];
    m.zipf.emplace_back(v, o.zipf_exponent);
    Stream wr(o.seed, kParamStream + 1 + static_cast<uint64_t>(f));
    m.w[f].resize(v);
    for (double& x : m.w[f]) x = o.main_sigma * wr.normal();
    if (crossed[f]) {
      Stream er(o.seed, kParamStream + 1 + kSyntheticCriteoCats + static_cast<uint64_t>(f));
      m.e[f].resize(v * k);
      for (double& x : m.e[f]) x = o.cross_sigma * er.normal();
    }
  }

  // The additive model: each cross's main effects <e_f[a], E e_g> folded into
  // the weights (its constant -<E e_f, E e_g> goes into the bias calibration).
  std::vector<std::vector<double>> mean_e(kSyntheticCriteoCats);
  for (int f = 0; f < kSyntheticCriteoCats; ++f) {
    if (!crossed[f]) continue;
    mean_e[f].assign(k, 0.0);
    for (uint32_t c = 0; c < o.vocab[f]; ++c) {
      const double p = (1 - o.empty_rate) * m.zipf[f].pmf(c);
      for (size_t t = 0; t < k; ++t) mean_e[f][t] += p * m.e[f][c * k + t];
    }
  }
  m.w_additive = m.w;
  for (const auto& [f, g] : m.crosses) {
    for (const auto& [a, b] : {std::pair{f, g}, std::pair{g, f}}) {
      for (uint32_t c = 0; c < o.vocab[a]; ++c) {
        double d = 0;
        for (size_t t = 0; t < k; ++t) d += m.e[a][c * k + t] * mean_e[b][t];
        m.w_additive[a][c] += d;
      }
    }
  }

  // Both biases from one fixed calibration sample.
  std::vector<double> planted(kCalibrationExamples), additive(kCalibrationExamples);
  Stream cal(o.seed, kCalibrationStream);
  CriteoExample x;
  for (uint64_t i = 0; i < kCalibrationExamples; ++i) {
    m.draw(cal, x);
    planted[i] = m.raw_margin(x);
    additive[i] = m.raw_additive_margin(x);
  }
  m.bias = calibrate_bias(planted, o.label_rate);
  m.additive_bias = calibrate_bias(additive, o.label_rate);
  impl_ = std::move(impl);
}

const CriteoSyntheticOptions& CriteoPlantedModel::options() const { return impl_->o; }
double CriteoPlantedModel::bias() const { return impl_->bias; }
double CriteoPlantedModel::additive_bias() const { return impl_->additive_bias; }
const std::vector<std::pair<int, int>>& CriteoPlantedModel::crosses() const { return impl_->crosses; }
double CriteoPlantedModel::margin(const CriteoExample& x) const { return impl_->bias + impl_->raw_margin(x); }
double CriteoPlantedModel::additive_margin(const CriteoExample& x) const {
  return impl_->additive_bias + impl_->raw_additive_margin(x);
}

uint32_t CriteoPlantedModel::value_hash(int field, uint32_t id) { return fmix32(id + column_key(field)); }

uint32_t CriteoPlantedModel::value_id(int field, uint32_t hash) const {
  const uint32_t id = unfmix32(hash) - column_key(field);
  return id < impl_->o.vocab[static_cast<size_t>(field)] ? id : CriteoExample::kEmpty;
}

bool CriteoPlantedModel::parse_line(std::string_view line, CriteoExample& x, bool& label, std::string* error) const {
  auto fail = [&](std::string msg) {
    if (error) *error = std::move(msg);
    return false;
  };
  std::array<std::string_view, 1 + kSyntheticCriteoInts + kSyntheticCriteoCats> fields;
  size_t n = 0, start = 0;
  for (size_t i = 0; i <= line.size(); ++i) {
    if (i < line.size() && line[i] != '\t') continue;
    if (n == fields.size()) return fail(fmt::format("more than {} tab-separated fields", fields.size()));
    fields[n++] = line.substr(start, i - start);
    start = i + 1;
  }
  if (n != fields.size()) return fail(fmt::format("expected {} tab-separated fields, found {}", fields.size(), n));
  if (fields[0] != "0" && fields[0] != "1") return fail(fmt::format("label must be 0 or 1, got '{}'", fields[0]));
  label = fields[0] == "1";
  for (int j = 0; j < kSyntheticCriteoInts; ++j) {
    const std::string_view s = fields[1 + j];
    if (s.empty()) {
      x.ints[j] = -1;
      continue;
    }
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x.ints[j]);
    if (ec != std::errc() || p != s.data() + s.size() || x.ints[j] < 0)
      return fail(fmt::format("I{}: '{}' is not a non-negative integer", j + 1, s));
  }
  for (int f = 0; f < kSyntheticCriteoCats; ++f) {
    const std::string_view s = fields[1 + kSyntheticCriteoInts + f];
    if (s.empty()) {
      x.cat[f] = CriteoExample::kEmpty;
      continue;
    }
    uint32_t h = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), h, 16);
    if (s.size() != 8 || ec != std::errc() || p != s.data() + s.size())
      return fail(fmt::format("C{}: '{}' is not 8 hex digits", f + 1, s));
    x.cat[f] = value_id(f, h);
    if (x.cat[f] == CriteoExample::kEmpty)
      return fail(fmt::format("C{}: '{}' is not one of the {} values of this model", f + 1, s,
                              impl_->o.vocab[static_cast<size_t>(f)]));
  }
  return true;
}

void CriteoPlantedModel::write_description(const std::string& path) const {
  const Impl& m = *impl_;
  const CriteoSyntheticOptions& o = m.o;
  std::string s;
  s += "# parafab gen-data --format criteo: the planted model\n";
  s += "# margin = bias + sum_f w[Cf][value] + sum_{cross f g} <e[Cf][value], e[Cg][value]>\n";
  s += "#          + sum_{int j} beta * clamp((ln(1 + Ij) - mu) / sigma, -3, 3); an empty field adds 0\n";
  s += "# Ij = floor(exp(mu + sigma z)), z ~ N(0,1) clamped to [-6, 6]\n";
  s += "# value lines: column, the value's 8 hex digits, its Zipf rank, w, then e for crossed columns\n";
  s += fmt::format("seed {}\nbias {:.9g}\nadditive_bias {:.9g}\nlabel_rate {}\nzipf {}\nempty_rate {}\n"
                   "int_empty_rate {}\ncross_dim {}\n",
                   o.seed, m.bias, m.additive_bias, o.label_rate, o.zipf_exponent, o.empty_rate, o.int_empty_rate,
                   o.cross_dim);
  for (const auto& [f, g] : m.crosses) s += fmt::format("cross C{} C{}\n", f + 1, g + 1);
  for (int j = 0; j < kSyntheticCriteoInts; ++j)
    s += fmt::format("int I{} mu {} sigma {} beta {}\n", j + 1, kIntMu[j], kIntSigma[j], m.beta[j]);
  for (int f = 0; f < kSyntheticCriteoCats; ++f) s += fmt::format("vocab C{} {}\n", f + 1, o.vocab[f]);
  const size_t k = static_cast<size_t>(o.cross_dim);
  for (int f = 0; f < kSyntheticCriteoCats; ++f) {
    for (uint32_t c = 0; c < o.vocab[f]; ++c) {
      s += fmt::format("value C{} ", f + 1);
      append_hex8(s, value_hash(f, c));
      s += fmt::format(" {} {:.9g}", c, m.w[f][c]);
      if (!m.e[f].empty())
        for (size_t t = 0; t < k; ++t) s += fmt::format(" {:.9g}", m.e[f][c * k + t]);
      s += '\n';
    }
  }
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!out) throw std::runtime_error(fmt::format("{}: cannot open for writing: {}", path, std::strerror(errno)));
  if (std::fwrite(s.data(), 1, s.size(), out.get()) != s.size() || std::fflush(out.get()) != 0)
    throw std::runtime_error(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
}

// Generates and writes the blocks of one file.
class CriteoGenerator {
 public:
  explicit CriteoGenerator(const CriteoPlantedModel& model) : m_(*model.impl_) {}

  CriteoFileStats write(uint64_t stream, uint64_t examples, const std::string& path) const {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
    if (!f) throw std::runtime_error(fmt::format("{}: cannot open for writing: {}", path, std::strerror(errno)));
    const uint64_t blocks = (examples + kBlock - 1) / kBlock;
    const int threads = m_.o.threads;
    std::vector<std::string> bufs(static_cast<size_t>(threads));
    std::vector<CriteoFileStats> stats(static_cast<size_t>(threads));
    CriteoFileStats total;
    for (uint64_t first = 0; first < blocks; first += static_cast<uint64_t>(threads)) {
      std::vector<std::thread> pool;
      for (int t = 0; t < threads && first + static_cast<uint64_t>(t) < blocks; ++t) {
        pool.emplace_back([&, t] {
          const uint64_t b = first + static_cast<uint64_t>(t);
          bufs[t].clear();
          stats[t] = {};
          block(stream + b, std::min(kBlock, examples - b * kBlock), bufs[t], stats[t]);
        });
      }
      for (auto& th : pool) th.join();
      for (size_t t = 0; t < pool.size(); ++t) {
        total.add(stats[t]);
        if (std::fwrite(bufs[t].data(), 1, bufs[t].size(), f.get()) != bufs[t].size())
          throw std::runtime_error(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
      }
    }
    if (std::fflush(f.get()) != 0)
      throw std::runtime_error(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
    return total;
  }

  void account(const CriteoExample& x, bool label, CriteoFileStats& st) const { m_.account(x, label, st); }

 private:
  void block(uint64_t stream_id, uint64_t rows, std::string& out, CriteoFileStats& st) const {
    Stream rng(m_.o.seed, stream_id);
    CriteoExample x;
    out.reserve(rows * 300);
    for (uint64_t r = 0; r < rows; ++r) {
      m_.draw(rng, x);
      const bool label = rng.uniform() < sigmoid(m_.bias + m_.raw_margin(x));
      m_.account(x, label, st);
      out += label ? '1' : '0';
      for (int64_t v : x.ints) {
        out += '\t';
        if (v >= 0) append_int(out, static_cast<uint64_t>(v));
      }
      for (int f = 0; f < kSyntheticCriteoCats; ++f) {
        out += '\t';
        if (x.cat[f] != CriteoExample::kEmpty) append_hex8(out, CriteoPlantedModel::value_hash(f, x.cat[f]));
      }
      out += '\n';
    }
  }

  const CriteoPlantedModel::Impl& m_;
};

CriteoGenerationReport write_synthetic_criteo(const CriteoSyntheticOptions& options, const std::string& train_path,
                                              const std::string& test_path, const std::string& description_path) {
  const CriteoPlantedModel model(options);
  const CriteoGenerator gen(model);
  CriteoGenerationReport r;
  r.bias = model.bias();
  r.crosses = model.crosses();
  r.train = gen.write(0, model.options().examples, train_path);
  if (!test_path.empty() && model.options().test_examples > 0)
    r.test = gen.write(kTestStream, model.options().test_examples, test_path);
  if (!description_path.empty()) model.write_description(description_path);
  return r;
}

CriteoFileStats measure_criteo_file(const CriteoPlantedModel& model, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  const CriteoGenerator gen(model);
  CriteoFileStats st;
  std::string line, error;
  CriteoExample x;
  bool label = false;
  for (uint64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (!model.parse_line(line, x, label, &error)) throw std::runtime_error(fmt::format("{}:{}: {}", path, lineno, error));
    gen.account(x, label, st);
  }
  if (in.bad()) throw std::runtime_error(fmt::format("{}: read failed", path));
  return st;
}

}  // namespace parafab::worker
