// The metrics line of an evaluated set of examples, as train and predict
// print it (bench models and the tests parse it):
//
//   held-out (50000 examples): log loss 0.574134  AUC 0.766840  accuracy 0.695440
//
//   std::printf("%s\n", apps::evaluation_line("held-out", e).c_str());
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "worker/local_trainer.h"

namespace parafab::apps {

inline std::string evaluation_line(std::string_view label, const worker::Evaluation& e) {
  return fmt::format("{} ({} examples): log loss {:.6f}  AUC {:.6f}  accuracy {:.6f}", label, e.examples, e.log_loss,
                     e.auc, e.accuracy);
}

}  // namespace parafab::apps
