// parafab: the command-line entry point. Flags are parsed here, in apps/, into
// typed option structs that are passed down; libraries never read flags or
// the environment.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <iostream>

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
    return app.exit(e);
  }
  return ctx.exit_code;
}
