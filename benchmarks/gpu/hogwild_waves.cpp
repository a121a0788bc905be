// hogwild_waves: the model behind kernels/hogwild_sgd.h's rows-in-flight
// figures. It trains logistic regression by Hogwild steps as a GPU runs
// them, in waves of W rows: every row of a wave reads its margin at the
// weights of the wave's start; then the wave's steps land one by one, each
// from the weight and accumulator as they are then (the kernel's atomic
// adds on the device). W = 1 is sequential SGD. The step is the kernel's
// (hogwild_sgd.cpp): g = d x + l2 w, AdaGrad G += g^2, w -= lr g / sqrt(G + eps).
// Prints the held-out log loss and its ratio to the planted model's, both
// by worker::PlantedModel::log_loss (the same one `train --planted` uses).
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
#include <string>
#include <vector>

#include "worker/data_reader.h"
#include "worker/synthetic_data.h"

namespace {

using parafab::worker::Dataset;
using parafab::worker::DatasetView;
using parafab::worker::PlantedModel;

constexpr float kLr = 0.05f, kL2 = 1e-6f, kEps = 1e-6f;  // parafab train's defaults
constexpr int kEpochs = 3;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6 || (std::string(argv[5]) != "sgd" && std::string(argv[5]) != "adagrad")) {
    std::fprintf(stderr, "usage: %s TRAIN.svm TEST.svm PLANTED.txt ROWS_PER_WAVE sgd|adagrad\n", argv[0]);
    return 2;
  }
  try {
    const Dataset train = parafab::worker::read_text_dataset(argv[1], {});
    const Dataset test = parafab::worker::read_text_dataset(argv[2], {});
    const PlantedModel planted = parafab::worker::read_planted_model(argv[3]);
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
    // The learned weights as a PlantedModel (by feature id: libsvm index - 1),
    // so that both log losses are computed by one function.
    PlantedModel learned_model;
    learned_model.bias = w[bias];
    learned_model.weights.assign(w.begin() + 1, w.begin() + static_cast<ptrdiff_t>(std::max<uint64_t>(slots, 1)));
    const DatasetView te = test.view();
    const double learned = learned_model.log_loss(te);
    const double floor = planted.log_loss(te);
    std::printf("%s, %zu rows per wave: held-out log loss %.6f, planted %.6f, learned / planted %.4f\n",
                adagrad ? "adagrad" : "sgd", wave, learned, floor, learned / floor);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hogwild_waves: %s\n", e.what());
    return 1;
  }
  return 0;
}
