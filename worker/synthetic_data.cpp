#include "worker/synthetic_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <thread>

#include "ps/key_hash.h"
#include "worker/synthetic_sampling.h"

namespace parafab::worker {
namespace {

using detail::Stream;
using detail::ZipfSampler;

constexpr uint64_t kBlock = 4096;  // examples per independently seeded block
constexpr uint64_t kWeightStream = 1ULL << 62;
constexpr uint64_t kTestStream = 1ULL << 61;

void validate(const SyntheticOptions& o) {
  if (o.features == 0 || o.features > (1ULL << 40))
    throw std::invalid_argument(fmt::format("--features must be in [1, 2^40], got {}", o.features));
  if (o.nnz < 1 || static_cast<uint64_t>(o.nnz) > o.features)
    throw std::invalid_argument(
        fmt::format("--nnz must be in [1, features={}], got {}", o.features, o.nnz));
  if (o.zipf_exponent < 0 || !std::isfinite(o.zipf_exponent))
    throw std::invalid_argument(fmt::format("--zipf must be >= 0, got {}", o.zipf_exponent));
  if (!(o.weight_sigma >= 0) || !std::isfinite(o.weight_sigma))
    throw std::invalid_argument(fmt::format("--weight-sigma must be >= 0, got {}", o.weight_sigma));
}

double sigmoid(double m) { return m >= 0 ? 1.0 / (1.0 + std::exp(-m)) : std::exp(m) / (1.0 + std::exp(m)); }

// Appends the libsvm text of block `block` of stream `stream` to out.
void generate_block(const SyntheticOptions& o, const PlantedModel& model, const ZipfSampler& zipf,
                    uint64_t stream, uint64_t block, uint64_t rows, std::string& out) {
  Stream rng(o.seed, stream + block);
  std::vector<uint64_t> ids;
  ids.reserve(o.nnz);
  char num[32];
  for (uint64_t r = 0; r < rows; ++r) {
    ids.clear();
    while (ids.size() < static_cast<size_t>(o.nnz)) {
      uint64_t id = zipf.sample(rng.uniform());
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    double m = model.bias;
    for (uint64_t id : ids) m += model.weights[id];
    out += rng.uniform() < sigmoid(m) ? "1" : "-1";
    for (uint64_t id : ids) {
      out += ' ';
      auto [p, ec] = std::to_chars(num, num + sizeof num, id + 1);
      out.append(num, p);
      out += ":1";
    }
    out += '\n';
  }
}

void write_examples(const SyntheticOptions& o, const PlantedModel& model, const ZipfSampler& zipf,
                    uint64_t stream, uint64_t examples, const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) throw std::runtime_error(fmt::format("{}: cannot open for writing: {}", path, std::strerror(errno)));
  const uint64_t blocks = (examples + kBlock - 1) / kBlock;
  const int threads = std::max(1, o.threads);
  // Rounds of `threads` blocks: generated in parallel, written in order.
  std::vector<std::string> bufs(threads);
  for (uint64_t first = 0; first < blocks; first += threads) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads && first + t < blocks; ++t) {
      pool.emplace_back([&, t] {
        const uint64_t b = first + t;
        bufs[t].clear();
        generate_block(o, model, zipf, stream, b, std::min(kBlock, examples - b * kBlock), bufs[t]);
      });
    }
    for (auto& th : pool) th.join();
    for (size_t t = 0; t < pool.size(); ++t) {
      if (std::fwrite(bufs[t].data(), 1, bufs[t].size(), f.get()) != bufs[t].size())
        throw std::runtime_error(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
    }
  }
  if (std::fflush(f.get()) != 0)
    throw std::runtime_error(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
}

}  // namespace

double PlantedModel::margin(const uint64_t* keys, const float* values, size_t n) const {
  double m = bias;
  for (size_t i = 0; i < n; ++i) {
    if (keys[i] >= 1 && keys[i] <= weights.size()) m += weights[keys[i] - 1] * values[i];
  }
  return m;
}

double PlantedModel::log_loss(const DatasetView& data) const {
  double sum = 0;
  for (size_t i = 0; i < data.rows(); ++i) {
    const auto k = data.row_keys(i);
    const double z = margin(k.data(), data.row_values(i).data(), k.size());
    // -log sigmoid(+-z), stable for any z.
    const double s = data.labels[i] > 0.5f ? z : -z;
    sum += s >= 0 ? std::log1p(std::exp(-s)) : -s + std::log1p(std::exp(s));
  }
  return data.rows() ? sum / static_cast<double>(data.rows()) : 0;
}

PlantedModel make_planted_model(const SyntheticOptions& o) {
  validate(o);
  PlantedModel m;
  m.bias = o.bias;
  m.weights.resize(o.features);
  Stream rng(o.seed, kWeightStream);
  for (double& w : m.weights) w = o.weight_sigma * rng.normal();
  return m;
}

void write_synthetic_libsvm(const SyntheticOptions& o, const std::string& train_path,
                            const std::string& test_path, const std::string& weights_path) {
  validate(o);
  const PlantedModel model = make_planted_model(o);
  const ZipfSampler zipf(o.features, o.zipf_exponent);
  write_examples(o, model, zipf, 0, o.examples, train_path);
  if (!test_path.empty() && o.test_examples > 0)
    write_examples(o, model, zipf, kTestStream, o.test_examples, test_path);
  if (!weights_path.empty()) {
    std::ofstream w(weights_path);
    if (!w) throw std::runtime_error(fmt::format("{}: cannot open for writing", weights_path));
    w << fmt::format("bias {:.9g}\n", model.bias);
    for (uint64_t j = 0; j < model.weights.size(); ++j) w << fmt::format("{} {:.9g}\n", j + 1, model.weights[j]);
    if (!w.flush()) throw std::runtime_error(fmt::format("{}: write failed", weights_path));
  }
}

PlantedModel read_planted_model(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open planted weights", path));
  PlantedModel m;
  std::string line;
  uint64_t lineno = 0;
  bool have_bias = false;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const auto sp = line.find(' ');
    if (sp == std::string::npos)
      throw std::runtime_error(fmt::format("{}:{}: expected 'index weight'", path, lineno));
    const std::string_view key(line.data(), sp), val(line.data() + sp + 1, line.size() - sp - 1);
    double w = 0;
    auto r = std::from_chars(val.data(), val.data() + val.size(), w);
    if (r.ec != std::errc() || r.ptr != val.data() + val.size() || !std::isfinite(w))
      throw std::runtime_error(fmt::format("{}:{}: bad weight '{}'", path, lineno, val));
    if (key == "bias") {
      m.bias = w;
      have_bias = true;
      continue;
    }
    uint64_t idx = 0;
    auto k = std::from_chars(key.data(), key.data() + key.size(), idx);
    if (k.ec != std::errc() || k.ptr != key.data() + key.size() || idx == 0 || idx > (1ULL << 40))
      throw std::runtime_error(fmt::format("{}:{}: bad index '{}'", path, lineno, key));
    // The weights are a dense vector: an index beyond the lines read so far
    // would have a few bytes ask for gigabytes of zeros.
    if (idx > lineno)
      throw std::runtime_error(fmt::format("{}:{}: index {} is beyond its line number (the file lists "
                                           "the weights 1, 2, ... in order, as gen-data writes them)",
                                           path, lineno, idx));
    if (idx > m.weights.size()) m.weights.resize(idx, 0.0);
    m.weights[idx - 1] = w;
  }
  if (!have_bias) throw std::runtime_error(fmt::format("{}: no 'bias' line", path));
  return m;
}

}  // namespace parafab::worker
