// What an fm or dnn model is, and the tables that hold it.
//
// fm: one sparse table (id 0), width 1 + k per model slot: the slot's linear
// weight w, then its k factors v (Rendle 2010); the bias is the bias slot's
// w. AdaGrad at the servers, factors initialised N(0, 0.01^2) per key.
//
// dnn (DLRM-style, Naumov et al. 2019): the features of a row are grouped
// into fields by the namespace in their key (worker/feature_hashing.h:
// Criteo's 39 columns; plain libsvm indices are one field), each field's
// embedding is the value-weighted sum of its features' embedding rows (one
// sparse table, id 0, width d, AdaGrad), and the concatenation of the
// fields' embeddings with the dense inputs (libsvm indices 1..dense_dim, as
// they are) feeds an MLP with ReLU hidden layers: a sigmoid output for two
// classes, softmax for K. The MLP's layer l is two dense tables, W_l (id
// 1 + 2l: rows = outputs, width = inputs, He-normal) and b_l (id 2 + 2l:
// rows = outputs, width 1, zeros), updated with Adam. Keys of the sparse
// table are model slots (worker/slot_map.h), as for the linear models.
//
//   worker::ModelSpec spec = worker::ModelSpec::dnn(train.view(), /*d=*/8, {256, 128}, /*classes=*/2, 0);
//   std::vector<ps::TableSchema> tables = spec.tables(map);
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/mlp.h"
#include "ps/table_schema.h"
#include "worker/dataset.h"
#include "worker/slot_map.h"

namespace parafab::worker {

enum class ModelKind { kFm, kDnn };

struct ModelHyper {
  ps::UpdaterKind sparse_updater = ps::UpdaterKind::kAdaGrad;  // or FTRL (lr through an fm of no factors)
  float sparse_lr = 0.05f;  // AdaGrad rate of the sparse table (fm, dnn embeddings)
  float ftrl_alpha = 0.1f, ftrl_beta = 1.0f, ftrl_l1 = 1.0f, ftrl_l2 = 1.0f;
  float dense_lr = 1e-3f;   // Adam rate of the MLP (dnn)
  float l2 = 0.0f;          // L2 of the sparse table's updater
  float init_stddev = 0.01f;  // fm factors, dnn embeddings
  uint64_t seed = 1;          // initialisers
};

struct ModelSpec {
  ModelKind kind = ModelKind::kFm;
  int factors = 8;  // fm: k
  int embedding_dim = 8;  // dnn: d
  std::vector<int> hidden;  // dnn: hidden layer sizes
  int classes = 2;          // dnn: 2 (one sigmoid output) or K > 2 (softmax)
  uint32_t dense_dim = 0;   // dnn: libsvm indices 1..dense_dim are dense inputs
  // dnn: field of each key namespace (-1: namespace unseen in training).
  std::array<int16_t, 256> field_of_namespace{};
  int n_fields = 0;
  ModelHyper hyper;

  static ModelSpec fm(int factors);
  // Fields from the namespaces of `train`'s keys that are not dense inputs.
  // Throws std::invalid_argument for d < 1, classes < 2, a hidden size < 1,
  // or more than 255 fields.
  static ModelSpec dnn(const DatasetView& train, int embedding_dim, std::vector<int> hidden, int classes,
                       uint32_t dense_dim);
  // The same with the fields given: namespace ns is a field when seen[ns]
  // (a worker reading only its part of the input cannot see them all:
  // fields_of_format gives the format's own).
  static ModelSpec dnn_with_fields(const std::array<bool, 256>& seen, int embedding_dim, std::vector<int> hidden,
                                   int classes, uint32_t dense_dim);
  // Criteo: its 39 column namespaces; libsvm: namespace 0.
  static std::array<bool, 256> fields_of_format(bool criteo);

  int outputs() const { return kind == ModelKind::kDnn && classes > 2 ? classes : 1; }
  // Width of a key of the sparse table 0.
  uint32_t sparse_width() const;
  kernels::MlpShape mlp_shape() const;
  std::vector<ps::TableSchema> tables(const SlotMap& map) const;
  std::string describe() const;
};

// A data set as the fm and dnn trainers read it.
struct ModelRows {
  SlotCsr sparse;               // fm: every feature; dnn: the embedded ones
  std::vector<uint8_t> fields;  // dnn: field of each nonzero of sparse
  std::vector<float> dense;     // dnn: rows x dense_dim, row-major
  uint32_t dense_dim = 0;
  uint64_t dropped = 0;         // nonzeros without a slot or field (unseen in training)
  size_t rows() const { return sparse.rows(); }
};

// Throws std::invalid_argument naming the row when a label is not a class
// of the model (binary: 0/1; K classes: an integer in [0, K)).
ModelRows build_model_rows(const DatasetView& data, const SlotMap& map, const ModelSpec& spec, int threads);

}  // namespace parafab::worker
