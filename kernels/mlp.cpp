// A fully connected network, forward and backward, on the active backend.
//
// Row-major activations, one row per example. Forward, for l = 0 .. L-1:
//   Z_l = A_{l-1} W_l^T + 1 b_l^T     (A_{-1} = X)
//   A_l = relu(Z_l) for the hidden layers; Z_{L-1} are the logits.
// The bias is broadcast into Z_l first and the GEMM adds onto it (beta = 1),
// and the ReLU runs in place: A_l > 0 exactly where Z_l > 0, so the backward
// pass needs only A_l and Z_l is not kept.
// Backward, from dZ_{L-1} = (p - onehot(y)) / n (the derivative of the mean
// of log loss or cross-entropy with respect to the logits):
//   dW_l = dZ_l^T A_{l-1},  db_l = dZ_l^T 1,  dA_{l-1} = dZ_l W_l,
//   dZ_{l-1} = dA_{l-1} where A_{l-1} > 0, else 0;  dX = dZ_0 W_0.
// db_l is a GEMM with a ones vector rather than a column-sum task per output:
// the BLAS splits the sum over n across threads, a per-column task would sum
// the n rows of a one-output layer serially.
//
// GEMMs go to CBLAS (OpenBLAS) on the host backend and to cuBLAS under CUDA,
// where row-major C = op(A) op(B) is computed as the column-major product
// C^T = op(B)^T op(A)^T (a row-major matrix read column-major is its
// transpose), so no copy is transposed. cuBLAS runs in its default math mode:
// full float32 (no TF32). Everything else (bias, ReLU and its mask, the loss)
// is Thrust, so every array stays in backend memory. Both outputs are
// evaluated in a form that stays finite for any logit: the sigmoid log loss
// of kernels/losses.h, softmax shifted by the row's largest logit. The loss is
// summed in double.
#include "kernels/mlp.h"

#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/csr_batch.h"
#include "kernels/device_array.h"
#include "kernels/host_device.h"
#include "kernels/losses.h"
#include "kernels/memory.h"
#include "kernels/thrust_backend.h"
#include "parafab/config.h"

#if PARAFAB_CUDA
#include <cublas_v2.h>
#else
#include <cblas.h>
#endif

namespace parafab::kernels {
namespace {

using detail::policy;

#if PARAFAB_CUDA

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("parafab::kernels::mlp: ") + what +
                             " failed: " + cublasGetStatusString(s) + " (status " +
                             std::to_string(static_cast<int>(s)) + ")");
  }
}

// A cuBLAS handle may not be used by two threads at once, and creating one
// costs milliseconds: one per thread that runs the kernels, created on its
// first GEMM and destroyed when the thread ends (for the main thread before
// the CUDA runtime's own exit handlers run).
class CublasHandle {
 public:
  CublasHandle() { check_cublas(cublasCreate(&h_), "cublasCreate"); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle() { (void)cublasDestroy(h_); }
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

cublasHandle_t cublas() {
  thread_local CublasHandle h;
  return h.get();
}

#endif

// Row-major C (M x N) = op(A) op(B) + beta C, op(A) M x K, op(B) K x N, with
// leading dimensions (row strides) lda, ldb, ldc. Every size is >= 1 and fits
// an int (checked by the callers through check_batch and the shape's ints).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const float alpha = 1.0f;
#if PARAFAB_CUDA
  check_cublas(
      cublasSgemm(cublas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
                  static_cast<int>(K), &alpha, B, static_cast<int>(ldb), A, static_cast<int>(lda),
                  &beta, C, static_cast<int>(ldc)),
      "cublasSgemm");
#else
  // OpenBLAS's own thread pool and the OpenMP backend's threads would fight
  // over the same cores (measured: the dnn trained 3.8x slower on 2 cores with
  // both, its time in sched_yield and libgomp's spin); the GEMMs here are of a
  // minibatch, small enough for one thread, and the OpenMP backend owns the
  // cores.
  static const bool one_blas_thread = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)one_blas_thread;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta,
              C, static_cast<int>(ldc));
#endif
}

// The widths of the layers' inputs and outputs, and where each layer's W
// starts in the flat array (b_l follows W_l).
struct Layout {
  std::vector<int64_t> width;   // L + 1: input, hidden..., outputs
  std::vector<int64_t> offset;  // L + 1: offset[L] is the parameter count
  size_t layers() const { return width.size() - 1; }
};

Layout layout(const MlpShape& s) {
  if (s.input < 1 || s.outputs < 1) {
    throw std::invalid_argument("parafab::kernels::mlp: input = " + std::to_string(s.input) +
                                " and outputs = " + std::to_string(s.outputs) +
                                " must both be >= 1");
  }
  Layout net;
  net.width.push_back(s.input);
  for (size_t l = 0; l < s.hidden.size(); ++l) {
    if (s.hidden[l] < 1) {
      throw std::invalid_argument("parafab::kernels::mlp: hidden layer " + std::to_string(l) +
                                  " has " + std::to_string(s.hidden[l]) + " units (must be >= 1)");
    }
    net.width.push_back(s.hidden[l]);
  }
  net.width.push_back(s.outputs);
  net.offset.push_back(0);
  for (size_t l = 0; l + 1 < net.width.size(); ++l) {
    net.offset.push_back(net.offset.back() + net.width[l + 1] * net.width[l] + net.width[l + 1]);
  }
  return net;
}

void check_batch(int64_t n) {
  // BLAS sizes are ints; n is a GEMM dimension (and the widths are ints).
  if (n < 0 || n > INT_MAX) {
    throw std::invalid_argument("parafab::kernels::mlp: batch of " + std::to_string(n) +
                                " rows (must be in [0, " + std::to_string(INT_MAX) + "])");
  }
}

template <typename F>
void for_each_index(int64_t n, F f) {
  if (n > 0) {
    thrust::for_each(policy(), thrust::counting_iterator<int64_t>(0),
                     thrust::counting_iterator<int64_t>(n), f);
  }
}

struct BroadcastBias {
  const float* b;
  int64_t width;
  float* z;
  PARAFAB_HD void operator()(int64_t t) const { z[t] = b[t % width]; }
};

struct ReluInPlace {
  float* a;
  PARAFAB_HD void operator()(int64_t t) const { a[t] = a[t] > 0.0f ? a[t] : 0.0f; }
};

// g = dA becomes dZ: zero where the unit was off (A == 0, i.e. Z <= 0).
struct ReluMask {
  const float* a;
  float* g;
  PARAFAB_HD void operator()(int64_t t) const {
    if (!(a[t] > 0.0f)) g[t] = 0.0f;
  }
};

// Row i of the logits: probabilities, the loss term, and dZ = (p - onehot) / n.
// labels null: probabilities only. dz and probs may be null.
struct OutputRow {
  const float* z;
  const float* labels;
  int64_t k;
  float inv_n;
  float* dz;
  float* probs;

  PARAFAB_HD double operator()(int64_t i) const { return k == 1 ? binary(i) : softmax(i); }

  PARAFAB_HD double binary(int64_t i) const {
    const float m = z[i];
    if (probs != nullptr) probs[i] = detail::stable_sigmoid(m);
    if (labels == nullptr) return 0.0;
    // dloss = -y sigmoid(-y m) with y = +-1 is p - 1 for y = 1 and p for y = 0.
    const detail::LossValue lv =
        detail::eval_loss<Loss::kLogistic>(detail::label_sign(labels[i]), m);
    if (dz != nullptr) dz[i] = lv.dloss * inv_n;
    return static_cast<double>(lv.loss);
  }

  // Shifted by the largest logit, every exponent is <= 0 and the sum >= 1:
  // no overflow, and the log of the sum is finite.
  PARAFAB_HD double softmax(int64_t i) const {
    const float* zi = z + i * k;
    float mx = zi[0];
    for (int64_t c = 1; c < k; ++c) mx = zi[c] > mx ? zi[c] : mx;
    float sum = 0.0f;
    for (int64_t c = 0; c < k; ++c) sum += expf(zi[c] - mx);
    const float inv_sum = 1.0f / sum;
    int64_t cls = -1;
    if (labels != nullptr) {
      const float y = labels[i];
      if (y >= 0.0f && y < static_cast<float>(k) && y == floorf(y)) cls = static_cast<int64_t>(y);
    }
    for (int64_t c = 0; c < k; ++c) {
      const float p = expf(zi[c] - mx) * inv_sum;
      if (probs != nullptr) probs[i * k + c] = p;
      if (dz != nullptr) dz[i * k + c] = cls < 0 ? 0.0f : (p - (c == cls ? 1.0f : 0.0f)) * inv_n;
    }
    if (labels == nullptr) return 0.0;
    if (cls < 0) return std::numeric_limits<double>::quiet_NaN();  // not a class id
    // -log p_cls = log(sum) - (z_cls - max)
    return static_cast<double>(logf(sum)) - static_cast<double>(zi[cls] - mx);
  }
};

struct PredictRow {
  OutputRow out;
  PARAFAB_HD void operator()(int64_t i) const { (void)out(i); }
};

// acts[l]: layer l's output, n x width[l + 1]; after ReLU for the hidden
// layers, the logits for the last.
std::vector<DeviceArray<float>> forward(const Layout& net, const float* params, const float* X,
                                        int64_t n) {
  std::vector<DeviceArray<float>> acts;
  acts.reserve(net.layers());
  for (size_t l = 0; l < net.layers(); ++l) {
    const int64_t in = net.width[l];
    const int64_t out = net.width[l + 1];
    const float* W = params + net.offset[l];
    const float* b = W + out * in;
    DeviceArray<float> z(static_cast<size_t>(n * out));
    for_each_index(n * out, BroadcastBias{b, out, z.data()});
    gemm(false, true, n, out, in, l == 0 ? X : acts[l - 1].data(), in, W, in, 1.0f, z.data(), out);
    if (l + 1 < net.layers()) for_each_index(n * out, ReluInPlace{z.data()});
    acts.push_back(std::move(z));
  }
  return acts;
}

}  // namespace

int64_t mlp_parameter_count(const MlpShape& shape) { return layout(shape).offset.back(); }

void mlp_init(const MlpShape& shape, uint64_t seed, float* params_host) {
  const Layout net = layout(shape);
  // std::mt19937_64's sequence is fixed by the standard, while the
  // distributions of <random> are implementation-defined: the uniforms are
  // made from the top 24 bits of each draw instead, exact in float.
  std::mt19937_64 rng(seed);
  for (size_t l = 0; l < net.layers(); ++l) {
    const int64_t in = net.width[l];
    const int64_t out = net.width[l + 1];
    const bool relu_follows = l + 1 < net.layers();
    const double limit = relu_follows ? std::sqrt(6.0 / static_cast<double>(in))
                                      : std::sqrt(6.0 / static_cast<double>(in + out));
    float* W = params_host + net.offset[l];
    for (int64_t t = 0; t < out * in; ++t) {
      const double u = static_cast<double>(rng() >> 40) * 0x1p-24;  // [0, 1)
      W[t] = static_cast<float>(limit * (2.0 * u - 1.0));
    }
    for (int64_t j = 0; j < out; ++j) W[out * in + j] = 0.0f;
  }
}

double mlp_forward_backward(const MlpShape& shape, const float* params, const float* X,
                            const float* labels, int64_t n, float* grad_params, float* grad_input,
                            float* probs) {
  const Layout net = layout(shape);
  check_batch(n);
  if (n == 0) {
    device_fill_zero(grad_params, static_cast<size_t>(net.offset.back()) * sizeof(float));
    return 0.0;
  }
  std::vector<DeviceArray<float>> acts = forward(net, params, X, n);
  const size_t L = net.layers();
  const int64_t k = shape.outputs;
  DeviceArray<float> dz(static_cast<size_t>(n * k));
  const double loss_sum = thrust::transform_reduce(
      policy(), thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(n),
      OutputRow{acts[L - 1].data(), labels, k, 1.0f / static_cast<float>(n), dz.data(), probs}, 0.0,
      thrust::plus<double>());
  DeviceArray<float> ones(static_cast<size_t>(n));
  thrust::fill(policy(), ones.data(), ones.data() + n, 1.0f);
  for (size_t l = L; l-- > 0;) {
    const int64_t in = net.width[l];
    const int64_t out = net.width[l + 1];
    const float* W = params + net.offset[l];
    const float* a_in = l == 0 ? X : acts[l - 1].data();
    float* dW = grad_params + net.offset[l];
    gemm(true, false, out, in, n, dz.data(), out, a_in, in, 0.0f, dW, in);
    gemm(true, false, out, 1, n, dz.data(), out, ones.data(), 1, 0.0f, dW + out * in, 1);
    if (l == 0) {
      if (grad_input != nullptr) {
        gemm(false, false, n, in, out, dz.data(), out, W, in, 0.0f, grad_input, in);
      }
      break;
    }
    DeviceArray<float> da(static_cast<size_t>(n * in));
    gemm(false, false, n, in, out, dz.data(), out, W, in, 0.0f, da.data(), in);
    for_each_index(n * in, ReluMask{acts[l - 1].data(), da.data()});
    dz = std::move(da);
  }
  return loss_sum / static_cast<double>(n);
}

void mlp_predict(const MlpShape& shape, const float* params, const float* X, int64_t n,
                 float* probs) {
  const Layout net = layout(shape);
  check_batch(n);
  if (n == 0) return;
  const std::vector<DeviceArray<float>> acts = forward(net, params, X, n);
  for_each_index(
      n, PredictRow{OutputRow{acts.back().data(), nullptr, shape.outputs, 0.0f, nullptr, probs}});
}

}  // namespace parafab::kernels
