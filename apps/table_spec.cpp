#include "apps/table_spec.h"

#include <fmt/format.h>

#include <charconv>
#include <stdexcept>
#include <string_view>

namespace parafab::apps {
namespace {

template <typename T>
T number(const std::string& spec, std::string_view key, std::string_view text) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw std::invalid_argument(fmt::format("--table '{}': {}={} is not a number", spec, key, text));
  }
  return v;
}

}  // namespace

ps::TableSchema parse_table_spec(const std::string& spec) {
  ps::TableSchema t;
  bool has_id = false;
  std::string_view rest(spec);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) throw std::invalid_argument(fmt::format("--table '{}': '{}' is not key=value", spec, item));
    const std::string_view k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "id") {
      t.id = number<uint32_t>(spec, k, v);
      has_id = true;
    } else if (k == "kind") {
      if (v == "sparse") t.kind = ps::TableKind::kSparse;
      else if (v == "dense") t.kind = ps::TableKind::kDense;
      else throw std::invalid_argument(fmt::format("--table '{}': kind={} (sparse or dense)", spec, v));
    } else if (k == "width") {
      t.width = number<uint32_t>(spec, k, v);
    } else if (k == "rows") {
      t.rows = number<uint64_t>(spec, k, v);
    } else if (k == "updater") {
      t.updater.kind = ps::parse_updater_kind(v);
    } else if (k == "lr") {
      t.updater.learning_rate = number<float>(spec, k, v);
    } else if (k == "l1") {
      t.updater.l1 = number<float>(spec, k, v);
    } else if (k == "l2") {
      t.updater.l2 = number<float>(spec, k, v);
    } else if (k == "ftrl_alpha") {
      t.updater.ftrl_alpha = number<float>(spec, k, v);
    } else if (k == "ftrl_beta") {
      t.updater.ftrl_beta = number<float>(spec, k, v);
    } else if (k == "ftrl_l1") {
      t.updater.ftrl_l1 = number<float>(spec, k, v);
    } else if (k == "ftrl_l2") {
      t.updater.ftrl_l2 = number<float>(spec, k, v);
    } else if (k == "init") {
      if (v == "zeros") t.init.kind = ps::InitializerKind::kZeros;
      else if (v == "normal") t.init.kind = ps::InitializerKind::kNormal;
      else throw std::invalid_argument(fmt::format("--table '{}': init={} (zeros or normal)", spec, v));
    } else if (k == "stddev") {
      t.init.stddev = number<float>(spec, k, v);
    } else if (k == "seed") {
      t.init.seed = number<uint64_t>(spec, k, v);
    } else {
      throw std::invalid_argument(fmt::format("--table '{}': unknown key '{}'", spec, k));
    }
  }
  if (!has_id) throw std::invalid_argument(fmt::format("--table '{}': id= is required", spec));
  t.validate();
  return t;
}

std::string describe_table(const ps::TableSchema& t) {
  return fmt::format("table {}: {} width {}{}, {}", t.id, t.kind == ps::TableKind::kSparse ? "sparse" : "dense",
                     t.width, t.kind == ps::TableKind::kDense ? fmt::format(" rows {}", t.rows) : "",
                     ps::to_string(t.updater));
}

}  // namespace parafab::apps
