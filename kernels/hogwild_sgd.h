// Asynchronous (Hogwild!) SGD over one batch of sparse examples.
//
//   kernels::SgdParams p{.loss = Loss::kLogistic, .lr = 0.1f, .l2 = 1e-6f, .adagrad = true};
//   double progressive = kernels::hogwild_sgd(p, batch, w, g2, n_slots);
//
// Every row is one SGD step, and rows run in parallel (threads on the host,
// CUDA threads on a GPU). Each step reads the weights it needs, computes the
// loss gradient, and writes the updated weights back with *relaxed atomic*
// loads and stores: two steps that touch the same weight may lose one update
// (the algorithm tolerates that, Niu et al. 2011), but there is no data race
// in the C++ sense, so sanitizers stay clean. With adagrad the step of
// coordinate j is lr / sqrt(g2[j] + eps), g2 accumulating squared gradients.
//
// On a CPU, Hogwild's threads write the most frequent weights (and the bias)
// on nearly every row, so those weights' cache lines move between the cores
// on every write; with power-law features that can make two threads slower
// than one. hogwild_sgd_parts gives each thread (part) its own copies of those
// hot weights, and merge_hot_copies folds the parts' updates back:
//
//   kernels::HotCopies hot{.n_hot = h, .parts = 2, .stride = s, .w = wc, .g2 = gc};
//   kernels::fill_hot_copies(hot, hot_slots, w, g2);        // copies = w[hot_slots]
//   for (each round of rows) {
//     loss += kernels::hogwild_sgd_parts(p, round, w, g2, n_slots, hot);
//     kernels::merge_hot_copies(hot, hot_slots, w, g2);     // w[hot_slots] += the parts' changes
//   }
#pragma once

#include <cstdint>

#include "kernels/csr_batch.h"

namespace parafab::kernels {

// Rows in flight. On a GPU every row of a batch may run at once: the steps
// of one weight (the bias, the frequent features) all land, each computed
// from weights read before any of them landed. Plain SGD then moves such a
// weight by the sum of thousands of full steps and diverges; AdaGrad's
// accumulator, which every concurrent step adds to first, shrinks them.
// Modelled on the host in waves of W rows (every row of a wave reads the
// weights at the wave's start, then the wave's steps land one by one):
// gen-data, 200,000 examples of 40 nonzeros, 2^20 features, 3 epochs, lr
// 0.05, held-out log loss over the planted model's:
//   plain SGD  W = 1: 1.343 (sequential; the host trainer on 1 thread:
//              1.346), 8: 1.349, 16: 1.356, 32: 1.374, 64: 3.17, 256: 4.23,
//              8192: 165
//   AdaGrad    W = 1: 1.215 (host trainer: 1.214), 8192: 1.220
// (benchmarks/gpu/hogwild_waves.cpp is the model; its header has the commands).
// So on CUDA plain SGD runs a batch in slices of kGpuSgdRowsInFlight rows,
// one after the other (right, but far from the GPU's throughput: use
// AdaGrad there), and AdaGrad the whole batch at once.
inline constexpr int64_t kGpuSgdRowsInFlight = 16;

struct SgdParams {
  Loss loss = Loss::kLogistic;
  float lr = 0.1f;      // step size (the base rate under AdaGrad)
  float l2 = 0.0f;      // L2 strength per step on the coordinates a row touches
  bool adagrad = true;  // per-coordinate AdaGrad steps; needs g2
  float adagrad_eps = 1e-6f;
  // hogwild_sgd runs the batch in consecutive slices of at most this many
  // rows. 0: the backend's choice, kGpuSgdRowsInFlight for plain SGD on
  // CUDA, else the whole batch (on the host, threads bound it anyway).
  int64_t max_rows_in_flight = 0;
};

// Runs one step per row of batch against w[0, n_slots) (and g2 when adagrad).
// Returns the sum over rows of the progressive loss: the loss of row i at the
// weights it read, before its own update (VW's "progressive validation").
[[nodiscard]] double hogwild_sgd(const SgdParams& params, const CsrBatch& batch, float* w,
                                 float* g2, int64_t n_slots);

// Per-part copies of the hot slots. In a batch for hogwild_sgd_parts, slot
// n_slots + r (0 <= r < n_hot, in cols or as bias_slot) names hot slot r,
// whose copy for part p is w[p * stride + r] (and g2[p * stride + r]).
struct HotCopies {
  int64_t n_hot = 0;
  int64_t parts = 1;   // the batch's rows split into this many contiguous ranges
  int64_t stride = 0;  // >= n_hot; a multiple of 16 keeps parts off each other's cache lines
  float* w = nullptr;  // parts * stride
  float* g2 = nullptr; // parts * stride; needed with adagrad
  // How merge_hot_copies folds the parts' changes of a weight: false sums
  // them (every row's step lands, as in Hogwild; right for AdaGrad, whose
  // steps shrink with the accumulator the merge also sums), true averages
  // them (constant-step SGD: each part's steps over a round are stale to the
  // others, and summed they overshoot; measured: held-out log loss 0.99
  // against 0.55 at --lr 0.01 on 2 threads, 0.544 averaged).
  bool average = false;
};

// Part p runs rows [n_rows * p / parts, n_rows * (p + 1) / parts) in order,
// one Hogwild step each (as hogwild_sgd), against the shared w[0, n_slots)
// and its own copies of the hot slots; the parts run in parallel. Returns the
// summed progressive loss. Meant for the host backend (a part is one thread).
[[nodiscard]] double hogwild_sgd_parts(const SgdParams& params, const CsrBatch& batch, float* w,
                                       float* g2, int64_t n_slots, const HotCopies& hot);

// Sets every part's copy of hot slot r to w[slots[r]] (and g2[slots[r]]).
// slots (n_hot of them) in backend memory; g2 may be null without adagrad.
void fill_hot_copies(const HotCopies& hot, const uint32_t* slots, const float* w, const float* g2);

// Folds the parts' updates into the model: for each hot slot r, with
// start = w[slots[r]],
//   w[slots[r]] = start + sum over p of (copy_p - start)       (average false)
//   w[slots[r]] = start + mean over p of (copy_p - start)      (average true)
// (with one part, the copy itself); g2 (when given) always the sum. Then
// every copy is refilled from the result.
void merge_hot_copies(const HotCopies& hot, const uint32_t* slots, float* w, float* g2);

}  // namespace parafab::kernels
