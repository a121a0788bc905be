// Tables on the command line: `--table id=0,kind=sparse,width=1,updater=adagrad,lr=0.05`.
//
// Keys: id, kind (sparse|dense), width, rows (dense), updater
// (sgd|adagrad|ftrl|adam), lr, l1, l2, ftrl_alpha, ftrl_beta, ftrl_l1,
// ftrl_l2, init (zeros|normal), stddev, seed. Unset keys keep the
// documented defaults of ps::TableSchema and ps::UpdaterConfig.
#pragma once

#include <string>

#include "ps/table_schema.h"

namespace parafab::apps {

// Throws std::invalid_argument naming the spec and the bad key or value.
ps::TableSchema parse_table_spec(const std::string& spec);
std::string describe_table(const ps::TableSchema& t);

}  // namespace parafab::apps
