// The fm and dnn minibatch trainer on a LocalStore (one process), against
// planted models a linear model cannot fit, and its parts (data rows,
// fields, the store's duplicate merge) against direct computations.
#include "worker/model_trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "kernels/memory.h"
#include "worker/feature_hashing.h"
#include "worker/parameter_store.h"

namespace parafab::worker {
namespace {

// Rows of `fields` one-hot categorical fields (namespace f+1, vocabulary
// `vocab`) whose label depends on a planted pairwise interaction of fields
// 0 and 1 (an XOR of value parities) plus a small additive term: a linear
// model cannot reach the planted loss, an FM or a DNN can.
DatasetArrays crossed(uint64_t n, int fields, uint64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> pick(0, vocab - 1);
  std::uniform_real_distribution<double> u(0, 1);
  DatasetArrays a;
  for (uint64_t i = 0; i < n; ++i) {
    std::vector<uint64_t> v(static_cast<size_t>(fields));
    for (int f = 0; f < fields; ++f) {
      v[f] = pick(rng);
      a.keys.push_back(hash_feature(static_cast<uint32_t>(f + 1), v[f]));
      a.values.push_back(1.0f);
    }
    const double m = ((v[0] & 1) ^ (v[1] & 1)) ? 2.0 : -2.0;
    a.labels.push_back(u(rng) < 1.0 / (1.0 + std::exp(-m)) ? 1.0f : 0.0f);
    a.row_ptr.push_back(a.keys.size());
  }
  return a;
}

// The expected log loss of the planted model: every row has |margin| 2.
double planted_loss() {
  const double p = 1.0 / (1.0 + std::exp(-2.0));
  return -(p * std::log(p) + (1 - p) * std::log(1 - p));
}

Evaluation train_and_eval(const ModelSpec& spec_in, const Dataset& train, const Dataset& test, int epochs,
                          float lr = 0.05f) {
  ModelSpec spec = spec_in;
  spec.hyper.sparse_lr = lr;
  const SlotMap map = SlotMap::for_data(train.view(), 16);
  LocalStore store(spec.tables(map));
  ModelTrainOptions o;
  o.epochs = epochs;
  o.batch_rows = 64;
  o.progress_seconds = 0;
  ModelTrainer t(store, spec, map, o, 0, 1, false);
  const ModelRows rows = build_model_rows(train.view(), map, spec, 1);
  const std::vector<double> losses = t.train(rows);
  EXPECT_EQ(losses.size(), static_cast<size_t>(epochs));
  return t.evaluate(build_model_rows(test.view(), map, spec, 1));
}

TEST(ModelTrainer, FmLearnsAPairwiseInteractionThatLinearCannot) {
  kernels::set_host_threads(2);
  const Dataset train(crossed(20000, 3, 8, 1)), test(crossed(5000, 3, 8, 2));
  const Evaluation linear = train_and_eval(ModelSpec::fm(0), train, test, 3);  // k = 0: logistic regression
  const Evaluation fm = train_and_eval(ModelSpec::fm(4), train, test, 3);
  // Linear: the label is independent of each field alone, so it stays near ln 2.
  EXPECT_GT(linear.log_loss, 0.68);
  EXPECT_LT(fm.log_loss, planted_loss() + 0.03) << "planted " << planted_loss();
  EXPECT_GT(fm.auc, 0.8);
}

TEST(ModelTrainer, DnnLearnsAPairwiseInteractionThatLinearCannot) {
  kernels::set_host_threads(2);
  const Dataset train(crossed(20000, 3, 8, 3)), test(crossed(5000, 3, 8, 4));
  const ModelSpec spec = ModelSpec::dnn(train.view(), 4, {16}, 2, 0);
  EXPECT_EQ(spec.n_fields, 3);
  const Evaluation dnn = train_and_eval(spec, train, test, 4);
  EXPECT_LT(dnn.log_loss, planted_loss() + 0.03) << "planted " << planted_loss();
  EXPECT_GT(dnn.auc, 0.8);
}

// Fields and no dense inputs: the MLP's input rows are the embeddings alone
// and a batch's dense inputs are empty. Their copy once indexed that empty
// vector (a reference through its null data(): UBSan, in training and in
// prediction) and passed memcpy a null source.
TEST(ModelTrainer, DnnWithFieldsAndNoDenseInputsTrainsAndPredicts) {
  kernels::set_host_threads(1);
  const Dataset train(crossed(256, 2, 4, 9));
  const ModelSpec spec = ModelSpec::dnn(train.view(), 2, {4}, 2, 0);
  ASSERT_EQ(spec.n_fields, 2);
  ASSERT_EQ(spec.dense_dim, 0u);
  const Evaluation e = train_and_eval(spec, train, train, 1);
  EXPECT_EQ(e.examples, 256u);
  EXPECT_TRUE(std::isfinite(e.log_loss));
}

// Dense inputs (libsvm indices 1..D) and softmax over 3 classes: the class
// is the index of the largest of three inputs; the MLP must reach high accuracy.
TEST(ModelTrainer, DnnSoftmaxOnDenseInputs) {
  kernels::set_host_threads(2);
  auto make = [](uint64_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0, 1);
    DatasetArrays a;
    for (uint64_t i = 0; i < n; ++i) {
      float x[3] = {g(rng), g(rng), g(rng)};
      for (int j = 0; j < 3; ++j) {
        a.keys.push_back(static_cast<uint64_t>(j + 1));
        a.values.push_back(x[j]);
      }
      a.labels.push_back(static_cast<float>(std::max_element(x, x + 3) - x));
      a.row_ptr.push_back(a.keys.size());
    }
    return a;
  };
  const Dataset train(make(12000, 5)), test(make(3000, 6));
  ModelSpec spec = ModelSpec::dnn(train.view(), 4, {32}, 3, 3);
  EXPECT_EQ(spec.n_fields, 0);
  spec.hyper.dense_lr = 3e-3f;
  const SlotMap map = SlotMap::for_data(train.view(), 0);
  LocalStore store(spec.tables(map));
  ModelTrainOptions o;
  o.epochs = 4;
  o.batch_rows = 64;
  o.progress_seconds = 0;
  ModelTrainer t(store, spec, map, o, 0, 1, false);
  t.train(build_model_rows(train.view(), map, spec, 1));
  std::vector<float> probs;
  const Evaluation e = t.evaluate(build_model_rows(test.view(), map, spec, 1), &probs);
  EXPECT_GT(e.accuracy, 0.93);
  EXPECT_TRUE(std::isnan(e.auc));
  ASSERT_EQ(probs.size(), 3u * 3000u);
  for (size_t i = 0; i < 3000; ++i) EXPECT_NEAR(probs[3 * i] + probs[3 * i + 1] + probs[3 * i + 2], 1.0, 1e-4);
}

// A store whose pulls answer with data `lag` clocks old, which keeps the
// pushed gradients (staleness-aware steps divide them by the lag) and the
// order of its calls: 'l' a pull, 'p' a push, 'c' a clock.
class LaggingStore final : public ParameterStore {
 public:
  LaggingStore(const std::vector<ps::TableSchema>& t, int64_t lag) : inner_(t), lag_(lag) {}
  std::future<rdma::Status> pull(uint32_t table, std::span<const uint64_t> keys, float* out,
                                 int64_t* data_clock) override {
    auto f = inner_.pull(table, keys, out, nullptr);
    if (data_clock != nullptr) *data_clock = clock_ - lag_;
    events += 'l';
    return f;
  }
  std::future<rdma::Status> push(uint32_t table, std::span<const uint64_t> keys, std::span<const float> grads) override {
    pushed.insert(pushed.end(), grads.begin(), grads.end());
    events += 'p';
    return inner_.push(table, keys, grads);
  }
  std::future<rdma::Status> dense_pull(uint32_t t, uint64_t f, uint64_t r, float* o) override {
    return inner_.dense_pull(t, f, r, o);
  }
  std::future<rdma::Status> dense_push(uint32_t t, uint64_t f, uint64_t r, std::span<const float> g) override {
    return inner_.dense_push(t, f, r, g);
  }
  std::future<rdma::Status> clock() override {
    ++clock_;
    events += 'c';
    return inner_.clock();
  }
  int64_t current_clock() const override { return clock_; }
  std::future<rdma::Status> finish() override { return inner_.finish(); }
  const ps::TableSchema& table(uint32_t id) const override { return inner_.table(id); }
  std::vector<float> pushed;
  std::string events;

 private:
  LocalStore inner_;
  int64_t lag_, clock_ = 0;
};

TEST(ModelTrainer, StalenessAwareStepsDivideByTheMeasuredStaleness) {
  const Dataset train(crossed(512, 3, 8, 7));
  const ModelSpec spec = ModelSpec::fm(2);
  const SlotMap map = SlotMap::for_data(train.view(), 12);
  const ModelRows rows = build_model_rows(train.view(), map, spec, 1);
  auto run = [&](bool aware) {
    LaggingStore store(spec.tables(map), 4);
    ModelTrainOptions o;
    o.epochs = 1;
    o.batch_rows = 512;  // one batch: its gradient is computed at the initial parameters either way
    o.progress_seconds = 0;
    o.staleness_aware = aware;
    ModelTrainer t(store, spec, map, o, 0, 1, /*remote=*/true);
    t.train(rows);
    EXPECT_EQ(t.staleness().histogram[4], 1u);
    EXPECT_DOUBLE_EQ(t.staleness().mean_scale, aware ? 0.25 : 1.0);
    return store.pushed;
  };
  const std::vector<float> plain = run(false), aware = run(true);
  ASSERT_EQ(plain.size(), aware.size());
  ASSERT_FALSE(plain.empty());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(aware[i], plain[i] / 4, 1e-6f * (1 + std::abs(plain[i]))) << i;
}

// Worker 0 of 3 takes over dead worker 1's batches from epoch 2: at each of
// its clocks it pulls its own batch and worker 1's (the same clock of the
// fault-free job), pushes both, and ticks once; the epoch keeps its clocks.
TEST(ModelTrainer, ADeadWorkersBatchesAreTrainedInTheClocksOfTheOwn) {
  const Dataset train(crossed(1000, 3, 8, 7));  // 16 batches of 64: worker 0 has 6 (360 rows), worker 1 5 (320)
  const ModelSpec spec = ModelSpec::fm(2);
  const SlotMap map = SlotMap::for_data(train.view(), 12);
  const ModelRows rows = build_model_rows(train.view(), map, spec, 1);
  LaggingStore store(spec.tables(map), 0);
  ModelTrainOptions o;
  o.epochs = 2;
  o.batch_rows = 64;
  o.progress_seconds = 0;
  o.pull_ahead = false;  // parafab train's default for fm and dnn
  o.adopted_parts = [&](int epoch) {
    std::vector<AdoptedData<ModelRows>> dead;
    if (epoch == 2) dead.push_back({1, &rows, 1, 3});
    return dead;
  };
  ModelTrainer t(store, spec, map, o, 0, 3, /*remote=*/true);
  t.train(rows);
  std::string want;
  for (int k = 0; k < 6; ++k) want += "lpc";    // epoch 1: its own
  for (int k = 0; k < 5; ++k) want += "llppc";  // epoch 2: its own and worker 1's, the second pull before the first push
  want += "lpc";                                // worker 1 had one batch fewer
  EXPECT_EQ(store.events, want);
  EXPECT_EQ(t.examples(), 360u + 360 + 320);
}

TEST(ModelRows, FieldsComeFromKeyNamespacesAndDenseInputsFromSmallIndices) {
  DatasetArrays a;
  // Row 0: libsvm dense index 2 (value 0.5), a field-7 key, a namespace-0 key above the dense range.
  a.keys = {2, hash_feature(7, 11), 100};
  a.values = {0.5f, 1.0f, 3.0f};
  a.labels = {1};
  a.row_ptr = {0, 3};
  const Dataset d(a);
  const ModelSpec spec = ModelSpec::dnn(d.view(), 2, {}, 2, 4);
  ASSERT_EQ(spec.n_fields, 2);  // namespaces 0 (index 100) and 7
  EXPECT_EQ(spec.field_of_namespace[0], 0);
  EXPECT_EQ(spec.field_of_namespace[7], 1);
  const SlotMap map = SlotMap::for_data(d.view(), 10);
  const ModelRows r = build_model_rows(d.view(), map, spec, 1);
  EXPECT_EQ(r.dense, (std::vector<float>{0.0f, 0.5f, 0.0f, 0.0f}));
  ASSERT_EQ(r.sparse.cols.size(), 2u);
  EXPECT_EQ(r.fields, (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(r.sparse.cols[0], map.slot(hash_feature(7, 11)));
  EXPECT_EQ(r.sparse.cols[1], map.slot(100));
  EXPECT_EQ(r.sparse.vals, (std::vector<float>{1.0f, 3.0f}));
  // A field unseen in training is dropped and counted; a bad label is refused naming its row.
  DatasetArrays b = a;
  b.keys[1] = hash_feature(9, 11);
  b.labels = {1};
  EXPECT_EQ(build_model_rows(Dataset(b).view(), map, spec, 1).dropped, 1u);
  b.labels = {2};
  EXPECT_THROW(build_model_rows(Dataset(b).view(), map, spec, 1), std::invalid_argument);
}

TEST(LocalStore, MergesDuplicateKeysAndAppliesTheUpdater) {
  ps::TableSchema t;
  t.id = 0;
  t.width = 2;
  t.updater.kind = ps::UpdaterKind::kSgd;
  t.updater.learning_rate = 0.5f;
  LocalStore s({t});
  const std::vector<uint64_t> keys = {5, 9, 5};
  const std::vector<float> g = {1, 2, 3, 4, 10, 20};
  ASSERT_TRUE(s.push(0, keys, g).get().ok());
  std::vector<float> out(4);
  const std::vector<uint64_t> q = {5, 9};
  ASSERT_TRUE(s.pull(0, q, out.data()).get().ok());
  // w = -lr * summed gradient: key 5 gets (1+10, 2+20), key 9 (3, 4).
  EXPECT_EQ(out, (std::vector<float>{-5.5f, -11.0f, -1.5f, -2.0f}));
  EXPECT_FALSE(s.pull(3, q, out.data()).get().ok());
  EXPECT_FALSE(s.push(0, q, g).get().ok());  // 3 rows of gradient for 2 keys
}

}  // namespace
}  // namespace parafab::worker
