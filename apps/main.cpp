// parafab: the command-line entry point. Flags are parsed here, in apps/, into
// typed option structs that are passed down; libraries never read flags or
// the environment.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

#include "apps/commands.h"
#include "parafab/config.h"

namespace parafab::apps {

int run_guarded(const char* command, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "parafab %s: error: %s\n", command, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parafab %s: error: %s\n", command, e.what());
    return 1;
  }
}

}  // namespace parafab::apps

int main(int argc, char** argv) {
  using namespace parafab::apps;
  CLI::App app{"parafab: an asynchronous parameter-server engine for sparse learning", "parafab"};
  app.set_version_flag("--version", std::string("parafab ") + PARAFAB_VERSION);
  app.require_subcommand(1);
  CommandContext ctx;
  add_train_command(app, ctx);
  add_predict_command(app, ctx);
  add_gen_data_command(app, ctx);
  add_bench_command(app, ctx);
  add_info_command(app, ctx);
  add_scheduler_command(app, ctx);
  add_server_command(app, ctx);
  add_worker_command(app, ctx);
  add_launch_command(app, ctx);
  add_node_command(app, ctx);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // No command (or no bench case) given: its list of them, as git does,
    // rather than only "A subcommand is required".
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      const CLI::App* bare = app.get_subcommands().empty() ? &app : nullptr;
      for (const CLI::App* sub : app.get_subcommands()) {
        if (sub->get_require_subcommand_min() > 0 && sub->get_subcommands().empty()) bare = sub;
      }
      if (bare != nullptr) {
        std::cerr << bare->help() << "\n";
        const std::string name = bare == &app ? "parafab" : "parafab " + bare->get_name();
        std::fprintf(stderr, "%s: give one of the subcommands above\n", name.c_str());
        return 2;
      }
    }
    // CLI11 prints the message (or --help, --version: status 0); a bad flag
    // exits 2 like every other usage error of parafab, not with CLI11's
    // own numbers (105, 106, 109, ...), which scripts cannot tell apart
    // from a failed run.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return ctx.exit_code;
}
