// A fully connected network on the active backend: ReLU hidden layers, then
// one sigmoid output with log loss on labels {0, 1} (label > 0.5 counts as 1),
// or K >= 2 softmax outputs with cross-entropy on class ids 0 .. K-1.
//
// Parameters are one flat float array. Layer l = 0 .. L-1 maps in_l inputs to
// out_l outputs (in_0 = input, out_l = hidden[l], out_{L-1} = outputs) and
// takes, in this order:
//   W_l  out_l x in_l, row-major   (z = W_l a + b_l)
//   b_l  out_l
// so layer l starts at offset sum_{l' < l} (out_l' * in_l' + out_l').
//
//   kernels::MlpShape s{.input = 64, .hidden = {128, 64}, .outputs = 1};
//   std::vector<float> p(kernels::mlp_parameter_count(s));
//   kernels::mlp_init(s, seed, p.data());
//   kernels::DeviceArray<float> dp(p), grad(p.size());
//   // x (n x 64) and y (n) in backend memory too:
//   double loss = kernels::mlp_forward_backward(s, dp.data(), x, y, n, grad.data(),
//                                               /*grad_input=*/nullptr, /*probs=*/nullptr);
#pragma once

#include <cstdint>
#include <vector>

namespace parafab::kernels {

struct MlpShape {
  int input = 0;            // >= 1
  std::vector<int> hidden;  // widths of the ReLU layers, each >= 1; may be empty (a linear model)
  int outputs = 1;          // 1: sigmoid + log loss; K >= 2: softmax + cross-entropy
};

// Floats of the flat parameter array. Throws std::invalid_argument for a bad
// shape (as do all the functions here).
int64_t mlp_parameter_count(const MlpShape& shape);

// Host memory, mlp_parameter_count floats. Weights uniform: He for the ReLU
// layers (limit sqrt(6 / in)), Glorot for the output layer (sqrt(6 / (in +
// out))); biases 0. The same seed gives the same bits on every platform.
void mlp_init(const MlpShape& shape, uint64_t seed, float* params_host);

// Forward and backward pass of the batch; every pointer is backend memory.
// X: n x input, row-major; labels: n floats, 0/1 or class ids (the caller
// checks them on the host: a class id outside [0, K) makes the loss NaN and
// its row's gradient 0). Returns the mean loss over the batch and writes:
//   grad_params  d mean loss / d params, overwritten (zeros for n == 0)
//   grad_input   d mean loss / d X, n x input; may be null
//   probs        n x outputs (n for one output: P(y = 1)); may be null
double mlp_forward_backward(const MlpShape& shape, const float* params, const float* X,
                            const float* labels, int64_t n, float* grad_params, float* grad_input,
                            float* probs);

// probs: n x outputs (n for one output: P(y = 1)). Backend memory.
void mlp_predict(const MlpShape& shape, const float* params, const float* X, int64_t n,
                 float* probs);

}  // namespace parafab::kernels
