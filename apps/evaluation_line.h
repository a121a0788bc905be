// The metrics line of an evaluated set of examples, as train and predict
// print it (bench models and the tests parse it):
//
//   held-out (50000 examples): log loss 0.574134  AUC 0.766840  accuracy 0.695440
//
// A set with examples of one class only has no AUC: "AUC n/a (one class)";
// nor has a softmax model's evaluation: "AUC n/a (multiclass)". A set of no
// examples has no metrics at all: "held-out (0 examples): no metrics".
//
//   std::printf("%s\n", apps::evaluation_line("held-out", e).c_str());
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <string_view>

#include "worker/local_trainer.h"

namespace parafab::apps {

inline std::string evaluation_line(std::string_view label, const worker::Evaluation& e) {
  if (e.examples == 0) return fmt::format("{} (0 examples): no metrics", label);
  const std::string auc = !std::isnan(e.auc) ? fmt::format("{:.6f}", e.auc)
                          : e.multiclass     ? std::string("n/a (multiclass)")
                                             : std::string("n/a (one class)");
  return fmt::format("{} ({} examples): log loss {:.6f}  AUC {}  accuracy {:.6f}", label, e.examples, e.log_loss, auc,
                     e.accuracy);
}

}  // namespace parafab::apps
