// `parafab bench models` at a tiny size with two batch orders: one record
// per order and job, and means that are the means of those records.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "benchmarks/models_bench.h"

namespace parafab::benchmarks {
namespace {

TEST(ModelsBench, TwoBatchOrdersGiveARecordEachAndTheirMeans) {
  ModelsBenchOptions o;
  o.parafab = PARAFAB_BIN_PATH;
  o.examples = 3000;
  o.test_examples = 1000;
  o.models = {"fm"};
  o.consistency = {"bsp"};
  o.batch_orders = 2;
  o.data_dir = ::testing::TempDir() + "models_bench_test";
  o.json_path = o.data_dir + "/models.json";
  std::ostringstream out;
  ASSERT_EQ(run_models_bench(o, out), 0) << out.str();
  std::ifstream json(o.json_path);
  ASSERT_TRUE(json.good()) << o.json_path;

  // Each order's held-out losses, by case, read back from the JSON lines.
  std::map<std::string, std::vector<double>> by_case;
  std::map<std::string, double> means, mean_ratio;
  std::string line;
  const std::vector<std::string> expected_cases = {"fm/one_process", "fm/2x2/bsp", "fm/2x2/bsp/speed",
                                                   "fm/one_process/mean", "fm/2x2/bsp/mean"};
  size_t lines = 0;
  while (std::getline(json, line)) {
    ++lines;
    auto field = [&](const std::string& key) {
      const size_t at = line.find("\"" + key + "\": ");
      EXPECT_NE(at, std::string::npos) << key << " in " << line;
      return at == std::string::npos ? 0.0 : std::stod(line.substr(at + key.size() + 4));
    };
    const size_t c = line.find("\"case\": \"") + 9;
    const std::string name = line.substr(c, line.find('"', c) - c);
    if (name.ends_with("/mean")) {
      means[name] = field("value");
      EXPECT_EQ(field("batch_orders"), 2.0) << line;
      if (name == "fm/2x2/bsp/mean") mean_ratio[name] = field("ratio");
    } else {
      by_case[name].push_back(field("value"));
      EXPECT_NE(line.find("\"batch_order\": "), std::string::npos) << line;
    }
  }
  EXPECT_EQ(lines, 8u);  // per order: one process, the job, its speed; then two means
  for (const auto& name : {"fm/one_process", "fm/2x2/bsp"}) {
    ASSERT_EQ(by_case[name].size(), 2u) << name;
    const double want = (by_case[name][0] + by_case[name][1]) / 2;
    EXPECT_NEAR(means[std::string(name) + "/mean"], want, 1e-9 * want) << name;
  }
  EXPECT_NEAR(mean_ratio["fm/2x2/bsp/mean"], means["fm/2x2/bsp/mean"] / means["fm/one_process/mean"], 1e-9);
  EXPECT_NE(out.str().find("mean held-out log loss"), std::string::npos) << out.str();
  std::filesystem::remove_all(o.data_dir);
}

}  // namespace
}  // namespace parafab::benchmarks
