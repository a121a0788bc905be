// Bytes each kernel must move (the "bytes/s" figures), per call. Every access
// the algorithm needs is counted once at its own size; a random 4-byte access
// that misses the cache moves a whole 64-byte line, and that excess is not
// counted (it is the kernel's cost, not the data's):
//
//   linear_gradient   per nonzero: col 4 + val 4 (only when the batch has
//                     values; a binary batch has none to read) + w gather 4 +
//                     grad scatter 8 (read + write) = 20, or 16 binary; per
//                     row: row_ptr 8 + label 4 = 12; per slot: w read 4 + grad
//                     write 4 = 8 (the L2 term that also clears grad). The
//                     hinge case counts the scatter of every row; at the
//                     benchmark's small random weights every row has y m < 1,
//                     so every row does scatter.
//   hogwild_sgd       (AdaGrad on) per nonzero: col 4 + val 4 + w gather 4 +
//                     w read+write 8 + g2 read+write 8 = 28; per row 12.
//   compact_keys      per input key: key 8 + width * 4 read; per unique key:
//                     key 8 + width * 4 written. The sort's own traffic
//                     (several passes over keys and permutation) is not
//                     counted: it is the price of the algorithm, not of the data.
//   log_loss          per row: probability 4 + label 4.
//   roc_auc           per row: score 4 + label 4 (the sort's traffic not counted).
//
// The gradient runs on the batch over `slots` slots (the headline: a model
// shard of 2^20 weights), on the same nonzeros without values (binary
// features), and, as a further case, on a batch drawn over `local_slots`
// (the few distinct keys a worker's batch touches, renumbered densely).
//
// All figures are divided by the best of `repeats` wall-clock times and shown
// beside the memory-copy ceiling (bytes read + written per second, same
// threads), so a ratio near 1 means the kernel runs at memory speed.
#include "benchmarks/kernel_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "benchmarks/bench_report.h"
#include "benchmarks/memory_ceiling.h"
#include "kernels/csr_batch.h"
#include "kernels/device_array.h"
#include "kernels/hogwild_sgd.h"
#include "kernels/key_compaction.h"
#include "kernels/linear_gradient.h"
#include "kernels/memory.h"
#include "kernels/metrics.h"

namespace parafab::benchmarks {
namespace {

namespace k = parafab::kernels;
using Clock = std::chrono::steady_clock;

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double uniform01(uint64_t& s) { return static_cast<double>(splitmix64(s) >> 11) * 0x1.0p-53; }

struct HostBatch {
  std::vector<uint64_t> row_ptr;
  std::vector<uint32_t> cols;
  std::vector<float> vals;
  std::vector<float> labels;
};

HostBatch make_batch(const KernelBenchOptions& o, int64_t n_slots, uint64_t& rng) {
  HostBatch b;
  b.row_ptr.reserve(static_cast<size_t>(o.rows) + 1);
  b.cols.reserve(static_cast<size_t>(o.rows * o.nnz_per_row));
  b.vals.reserve(static_cast<size_t>(o.rows * o.nnz_per_row));
  b.labels.resize(static_cast<size_t>(o.rows));
  const double log_slots = std::log(static_cast<double>(n_slots));
  const auto slots = static_cast<uint64_t>(n_slots);
  const int lo = std::max(1, o.nnz_per_row / 2);
  const int span = std::max(1, o.nnz_per_row + 1 - lo) * 2 - 1;  // lengths lo .. lo + span - 1
  b.row_ptr.push_back(0);
  for (int64_t i = 0; i < o.rows; ++i) {
    const int len = o.nnz_per_row <= 1
                        ? o.nnz_per_row
                        : lo + static_cast<int>(splitmix64(rng) % static_cast<uint64_t>(span));
    for (int c = 0; c < len; ++c) {
      const auto rank = static_cast<uint64_t>(std::exp(uniform01(rng) * log_slots)) - 1;
      b.cols.push_back(static_cast<uint32_t>((rank * 2654435761ULL) % slots));
      b.vals.push_back(static_cast<float>(0.05 + uniform01(rng)));
    }
    b.row_ptr.push_back(b.cols.size());
    b.labels[static_cast<size_t>(i)] = uniform01(rng) < 0.5 ? 1.0f : 0.0f;
  }
  return b;
}

// Float64 reference of kernels::linear_gradient, with b's values or, when
// with_vals is false, every value 1; abs_sum[j] collects the sum of the
// magnitudes of the terms of grad[j] (for the tolerance).
double reference_gradient(k::Loss loss, const HostBatch& b, bool with_vals,
                          const std::vector<float>& w, float l2, std::vector<double>& grad,
                          std::vector<double>& abs_sum) {
  const size_t n_slots = w.size();
  grad.assign(n_slots, 0.0);
  abs_sum.assign(n_slots, 0.0);
  const size_t n = b.labels.size();
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double m = 0.0;
    for (uint64_t kk = b.row_ptr[i]; kk < b.row_ptr[i + 1]; ++kk) {
      const double x = with_vals ? static_cast<double>(b.vals[kk]) : 1.0;
      m += x * static_cast<double>(w[b.cols[kk]]);
    }
    const double y = b.labels[i] > 0.5f ? 1.0 : -1.0;
    const double z = y * m;
    double d = 0.0;
    if (loss == k::Loss::kLogistic) {
      total += std::max(-z, 0.0) + std::log1p(std::exp(-std::fabs(z)));
      d = -y / (1.0 + std::exp(z));
    } else {
      total += std::max(0.0, 1.0 - z);
      d = z < 1.0 ? -y : 0.0;
    }
    d /= static_cast<double>(n);
    for (uint64_t kk = b.row_ptr[i]; kk < b.row_ptr[i + 1]; ++kk) {
      const double t = d * (with_vals ? static_cast<double>(b.vals[kk]) : 1.0);
      grad[b.cols[kk]] += t;
      abs_sum[b.cols[kk]] += std::fabs(t);
    }
  }
  for (size_t j = 0; j < n_slots; ++j) {
    const double r = static_cast<double>(l2) * static_cast<double>(w[j]);
    grad[j] += r;
    abs_sum[j] += std::fabs(r);
  }
  return n == 0 ? 0.0 : total / static_cast<double>(n);
}

struct Timing {
  double best_s = 0.0;
  double median_s = 0.0;
};

Timing time_it(int repeats, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    fn();
    k::device_synchronize();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}

}  // namespace

int run_kernel_bench(const KernelBenchOptions& o, std::ostream& out) {
  if (o.threads < 1 || o.rows < 1 || o.nnz_per_row < 1 || o.slots < 2 ||
      o.slots > (int64_t{1} << 32) || o.repeats < 1) {
    out << fmt::format(
        "bench kernels: bad options: threads {} rows {} nnz_per_row {} slots {} repeats {} "
        "(need threads, rows, nnz_per_row, repeats >= 1 and 2 <= slots <= 2^32)\n",
        o.threads, o.rows, o.nnz_per_row, o.slots, o.repeats);
    return 2;
  }
  try {
    k::set_host_threads(o.threads);
    uint64_t rng = o.seed;
    const HostBatch hb = make_batch(o, o.slots, rng);
    const auto n_rows = static_cast<size_t>(o.rows);
    const auto n_slots = static_cast<size_t>(o.slots);
    const size_t nnz = hb.cols.size();
    std::vector<float> w(n_slots);
    for (auto& x : w) x = static_cast<float>((uniform01(rng) - 0.5) * 0.02);

    const std::string backend = k::backend_description();
    const MemoryCeiling ceiling = measure_memory_ceiling(o.threads, 5, o.ceiling_buffer_bytes);
    out << fmt::format(
        "backend: {}\nceiling: {} = {:.1f} MB/s\nbatch: {} rows, {} nonzeros, {} slots\n", backend,
        ceiling.detail, ceiling.bytes_per_second / 1e6, n_rows, nnz, n_slots);
    out << "linear_gradient bytes: per nonzero col 4 + val 4 (none for _binary) + w gather 4 + "
           "grad read+write 8; per row row_ptr 8 + label 4; per slot w 4 + grad 4. Each access "
           "counted once at its size: the rest of the 64-byte line a random access moves is "
           "not counted.\n";

    k::DeviceArray<uint64_t> d_row_ptr(hb.row_ptr);
    k::DeviceArray<uint32_t> d_cols(hb.cols);
    k::DeviceArray<float> d_vals(hb.vals);
    k::DeviceArray<float> d_labels(hb.labels);
    k::DeviceArray<float> d_w(w);
    k::DeviceArray<float> d_margins(n_rows);
    const k::CsrBatch batch{d_row_ptr.data(), d_cols.data(), d_vals.data(),
                            d_labels.data(),  o.rows,        -1};

    BenchReport report;
    // The common part of a record; the caller adds the case's parameters.
    auto record = [&](const std::string& name, double bytes, double items, const char* items_key,
                      const Timing& t) {
      BenchRecord r("kernels", name, bytes / t.best_s / 1e6, "MB/s");
      r.with_ceiling(ceiling.bytes_per_second / 1e6, ceiling.source)
          .with(items_key, items / t.best_s)
          .with("ms", t.best_s * 1e3)
          .with("median_ms", t.median_s * 1e3)
          .with("bytes", static_cast<int64_t>(bytes))
          .with("threads", o.threads)
          .with("backend", backend);
      return r;
    };

    // --- linear_gradient: warm-up + verification, then timing ----------------
    // One case: the batch `cb` (host copy `chb`, values used when cb.vals is
    // set) over the weights `cw`. Returns false after printing the mismatch
    // when the kernel disagrees with the float64 reference.
    const float l2 = 1e-4f;
    auto gradient_case = [&](const std::string& name, k::Loss loss, const k::CsrBatch& cb,
                             const HostBatch& chb, const std::vector<float>& cw,
                             const float* d_cw) {
      const bool with_vals = cb.vals != nullptr;
      const auto c_slots = static_cast<int64_t>(cw.size());
      k::DeviceArray<float> c_grad(cw.size());
      const double got_loss =
          k::linear_gradient(loss, cb, d_cw, c_slots, l2, c_grad.data(), nullptr);
      const std::vector<float> got = c_grad.to_host();
      std::vector<double> ref;
      std::vector<double> abs_sum;
      const double ref_loss = reference_gradient(loss, chb, with_vals, cw, l2, ref, abs_sum);
      // Float32 accumulation of c terms errs by about sqrt(c) * 2^-24 of their
      // magnitude sum (rounding errors of random sign); 1e-4 leaves a wide margin
      // for the hottest slot (~5% of the nonzeros) and catches any lost term.
      double worst = 0.0;
      size_t worst_j = 0;
      for (size_t j = 0; j < cw.size(); ++j) {
        const double err = std::fabs(static_cast<double>(got[j]) - ref[j]) / (abs_sum[j] + 1e-30);
        if (abs_sum[j] > 0.0 && err > worst) {
          worst = err;
          worst_j = j;
        }
      }
      const double loss_err = std::fabs(got_loss - ref_loss) / std::max(ref_loss, 1e-30);
      if (worst > 1e-4 || loss_err > 1e-5) {
        out << fmt::format(
            "bench kernels: {} FAILED verification: slot {} got {} want {} (error {:.3g} of the "
            "term magnitudes), loss {} want {}\n",
            name, worst_j, got[worst_j], ref[worst_j], worst, got_loss, ref_loss);
        return false;
      }
      out << fmt::format("verified {}: max error {:.2g} of term magnitudes, loss {:.6f}\n", name,
                         worst, got_loss);
      const Timing t = time_it(o.repeats, [&] {
        (void)k::linear_gradient(loss, cb, d_cw, c_slots, l2, c_grad.data(), nullptr);
      });
      const auto c_nnz = static_cast<double>(chb.cols.size());
      const double bytes = (with_vals ? 20.0 : 16.0) * c_nnz +
                           12.0 * static_cast<double>(chb.labels.size()) +
                           8.0 * static_cast<double>(c_slots);
      report.add(record(name, bytes, c_nnz, "nnz_per_s", t)
                     .with("rows", static_cast<int64_t>(chb.labels.size()))
                     .with("nnz", static_cast<int64_t>(chb.cols.size()))
                     .with("slots", c_slots)
                     .with("values", with_vals ? "read" : "none (binary)"));
      return true;
    };
    for (const k::Loss loss : {k::Loss::kLogistic, k::Loss::kHinge}) {
      if (!gradient_case(
              loss == k::Loss::kLogistic ? "linear_gradient_logistic" : "linear_gradient_hinge",
              loss, batch, hb, w, d_w.data())) {
        return 1;
      }
    }
    {
      // Binary features: the same nonzeros, every value 1, no values array
      // (what a reader passes when it saw only ones).
      const k::CsrBatch binary{d_row_ptr.data(), d_cols.data(), nullptr, d_labels.data(), o.rows,
                               -1};
      if (!gradient_case("linear_gradient_logistic_binary", k::Loss::kLogistic, binary, hb, w,
                         d_w.data())) {
        return 1;
      }
    }
    if (o.local_slots >= 2 && o.local_slots < o.slots) {
      uint64_t local_rng = o.seed ^ 0x6c6f63616cULL;
      const HostBatch lb = make_batch(o, o.local_slots, local_rng);
      out << fmt::format(
          "batch-local case (_local): {} rows, {} nonzeros, {} slots; a further row, the "
          "headline is the {}-slot batch\n",
          lb.labels.size(), lb.cols.size(), o.local_slots, o.slots);
      std::vector<float> lw(static_cast<size_t>(o.local_slots));
      for (auto& x : lw) x = static_cast<float>((uniform01(local_rng) - 0.5) * 0.02);
      const k::DeviceArray<uint64_t> l_row_ptr(lb.row_ptr);
      const k::DeviceArray<uint32_t> l_cols(lb.cols);
      const k::DeviceArray<float> l_vals(lb.vals);
      const k::DeviceArray<float> l_labels(lb.labels);
      const k::DeviceArray<float> l_w(lw);
      const k::CsrBatch local{l_row_ptr.data(), l_cols.data(), l_vals.data(), l_labels.data(),
                              o.rows, -1};
      if (!gradient_case("linear_gradient_logistic_local", k::Loss::kLogistic, local, lb, lw,
                         l_w.data())) {
        return 1;
      }
    }

    // --- hogwild_sgd (AdaGrad) -------------------------------------------------
    {
      k::DeviceArray<float> hw(w);
      k::DeviceArray<float> g2(n_slots);
      k::device_fill_zero(g2.data(), n_slots * sizeof(float));
      const k::SgdParams p{.loss = k::Loss::kLogistic, .lr = 0.05f, .l2 = 1e-6f, .adagrad = true};
      (void)k::hogwild_sgd(p, batch, hw.data(), g2.data(), o.slots);  // warm-up
      const Timing t = time_it(
          o.repeats, [&] { (void)k::hogwild_sgd(p, batch, hw.data(), g2.data(), o.slots); });
      report.add(record("hogwild_sgd",
                        28.0 * static_cast<double>(nnz) + 12.0 * static_cast<double>(n_rows),
                        static_cast<double>(nnz), "nnz_per_s", t)
                     .with("rows", o.rows)
                     .with("nnz", static_cast<int64_t>(nnz))
                     .with("slots", o.slots)
                     .with("adagrad", int64_t{1}));
    }

    // --- compact_keys: the 64-bit keys of the batch's nonzeros ----------------
    for (const int width : {1, 8}) {
      const size_t n_keys = std::min(nnz, (size_t{1} << 21) / static_cast<size_t>(width));
      std::vector<uint64_t> keys(n_keys);
      std::vector<float> vals(n_keys * static_cast<size_t>(width));
      for (size_t i = 0; i < n_keys; ++i)
        keys[i] = (hb.cols[i] * 0x9E3779B97F4A7C15ULL) ^ 0x5bd1e995ULL;
      for (auto& v : vals) v = static_cast<float>(uniform01(rng) - 0.5);
      k::DeviceArray<uint64_t> dk(keys);
      k::DeviceArray<float> dv(vals);
      k::DeviceArray<uint64_t> ok(n_keys);
      k::DeviceArray<float> ov(vals.size());
      size_t unique = k::compact_keys(dk.data(), dv.data(), n_keys, width, ok.data(), ov.data());
      const Timing t = time_it(o.repeats, [&] {
        unique = k::compact_keys(dk.data(), dv.data(), n_keys, width, ok.data(), ov.data());
      });
      const double row_bytes = 8.0 + 4.0 * width;
      report.add(record(width == 1 ? "compact_keys" : fmt::format("compact_keys_w{}", width),
                        row_bytes * static_cast<double>(n_keys + unique),
                        static_cast<double>(n_keys), "keys_per_s", t)
                     .with("keys", static_cast<int64_t>(n_keys))
                     .with("unique", static_cast<int64_t>(unique))
                     .with("width", width));
    }

    // --- metrics on the batch's predictions ------------------------------------
    {
      k::linear_margins(batch, d_w.data(), d_margins.data());
      k::DeviceArray<float> probs(n_rows);
      k::sigmoid(d_margins.data(), o.rows, probs.data());
      double ll = k::log_loss(probs.data(), d_labels.data(), n_rows);
      Timing t =
          time_it(o.repeats, [&] { ll = k::log_loss(probs.data(), d_labels.data(), n_rows); });
      report.add(record("metrics_log_loss", 8.0 * static_cast<double>(n_rows),
                        static_cast<double>(n_rows), "rows_per_s", t)
                     .with("rows", o.rows));
      double auc = k::roc_auc(d_margins.data(), d_labels.data(), n_rows);
      t = time_it(o.repeats, [&] { auc = k::roc_auc(d_margins.data(), d_labels.data(), n_rows); });
      report.add(record("metrics_roc_auc", 8.0 * static_cast<double>(n_rows),
                        static_cast<double>(n_rows), "rows_per_s", t)
                     .with("rows", o.rows));
      out << fmt::format("metrics at the random weights: log loss {:.4f}, AUC {:.4f}\n", ll, auc);
    }

    out << '\n';
    report.print_table(out);
    if (!o.json_path.empty()) {
      report.write_json_lines(o.json_path);
      out << fmt::format("wrote {} records to {}\n", report.records().size(), o.json_path);
    }
    return 0;
  } catch (const std::exception& e) {
    out << "bench kernels: error: " << e.what() << '\n';
    return 2;
  }
}

}  // namespace parafab::benchmarks
