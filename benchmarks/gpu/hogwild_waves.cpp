// hogwild_waves: the model behind kernels/hogwild_sgd.h's rows-in-flight
// figures. It trains logistic regression by Hogwild steps as a GPU runs
// them, in waves of W rows: every row of a wave reads its margin at the
// weights of the wave's start; then the wave's steps land one by one, each
// from the weight and accumulator as they are then (the kernel's atomic
// adds on the device). W = 1 is sequential SGD. The step is the kernel's
// (hogwild_sgd.cpp): g = d x + l2 w, AdaGrad G += g^2, w -= lr g / sqrt(G + eps).
// Prints the held-out log loss and its ratio to the planted model's.
//
//   parafab gen-data --out train.svm --test-out test.svm --weights-out planted.txt
//       --examples 200000 --test-examples 20000   (one command)
//   build/bin/hogwild_waves train.svm test.svm planted.txt 8192 adagrad
//   build/bin/hogwild_waves train.svm test.svm planted.txt 16 sgd
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "worker/data_reader.h"

namespace {

using parafab::worker::Dataset;
using parafab::worker::DatasetView;

constexpr float kLr = 0.05f, kL2 = 1e-6f, kEps = 1e-6f;  // parafab train's defaults
constexpr int kEpochs = 3;

// The planted model as gen-data writes it: "bias B", then "index weight".
std::vector<double> read_planted(const char* path, double* bias) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(std::string(path) + ": cannot open");
  std::vector<double> w;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string first;
    double v = 0;
    if (!(s >> first >> v)) continue;
    if (first == "bias") {
      *bias = v;
      continue;
    }
    const size_t j = std::stoull(first);
    if (j >= w.size()) w.resize(j + 1, 0.0);
    w[j] = v;
  }
  return w;
}

template <typename Weight>
double log_loss(const DatasetView& d, const Weight& weight, double bias) {
  double total = 0;
  for (size_t i = 0; i < d.rows(); ++i) {
    double m = bias;
    for (size_t k = d.row_ptr[i]; k < d.row_ptr[i + 1]; ++k) m += static_cast<double>(d.values[k]) * weight(d.keys[k]);
    const double p = std::clamp(1 / (1 + std::exp(-m)), 1e-15, 1 - 1e-15);
    total -= d.labels[i] > 0 ? std::log(p) : std::log(1 - p);
  }
  return total / static_cast<double>(d.rows());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6 || (std::string(argv[5]) != "sgd" && std::string(argv[5]) != "adagrad")) {
    std::fprintf(stderr, "usage: %s TRAIN.svm TEST.svm PLANTED.txt ROWS_PER_WAVE sgd|adagrad\n", argv[0]);
    return 2;
  }
  try {
    const Dataset train = parafab::worker::read_text_dataset(argv[1], {});
    const Dataset test = parafab::worker::read_text_dataset(argv[2], {});
    double planted_bias = 0;
    const std::vector<double> planted = read_planted(argv[3], &planted_bias);
    const size_t wave = std::max(1L, std::atol(argv[4]));
    const bool adagrad = std::string(argv[5]) == "adagrad";
    const DatasetView tr = train.view();
    uint64_t slots = 0;
    for (uint64_t k : tr.keys) slots = std::max(slots, k + 1);
    const size_t bias = slots;  // the last slot
    std::vector<float> w(slots + 1, 0.0f), g2(slots + 1, 0.0f), margin(wave);
    auto step = [&](size_t j, float dx) {
      const float g = dx + kL2 * w[j];
      float s = kLr * g;
      if (adagrad) {
        g2[j] += g * g;
        s = kLr * g / std::sqrt(g2[j] + kEps);
      }
      w[j] -= s;
    };
    for (int epoch = 0; epoch < kEpochs; ++epoch) {
      for (size_t r0 = 0; r0 < tr.rows(); r0 += wave) {
        const size_t r1 = std::min(tr.rows(), r0 + wave);
        for (size_t i = r0; i < r1; ++i) {
          float m = w[bias];
          for (size_t k = tr.row_ptr[i]; k < tr.row_ptr[i + 1]; ++k) m += tr.values[k] * w[tr.keys[k]];
          margin[i - r0] = m;
        }
        for (size_t i = r0; i < r1; ++i) {
          const float d = 1.0f / (1.0f + std::exp(-margin[i - r0])) - (tr.labels[i] > 0 ? 1.0f : 0.0f);
          for (size_t k = tr.row_ptr[i]; k < tr.row_ptr[i + 1]; ++k) step(tr.keys[k], d * tr.values[k]);
          step(bias, d);
        }
      }
    }
    const DatasetView te = test.view();
    const double learned =
        log_loss(te, [&](uint64_t j) { return j < slots ? static_cast<double>(w[j]) : 0.0; }, w[bias]);
    const double floor =
        log_loss(te, [&](uint64_t j) { return j < planted.size() ? planted[j] : 0.0; }, planted_bias);
    std::printf("%s, %zu rows per wave: held-out log loss %.6f, planted %.6f, learned / planted %.4f\n",
                adagrad ? "adagrad" : "sgd", wave, learned, floor, learned / floor);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hogwild_waves: %s\n", e.what());
    return 1;
  }
  return 0;
}
