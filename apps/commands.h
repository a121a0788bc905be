// The subcommands of `parafab`. Each add_* registers its options on the root
// app and sets the callback that runs it; a callback returns the process exit
// status through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include "apps/host_threads.h"  // default_threads(): the default of every --threads

namespace parafab::apps {

struct CommandContext {
  int exit_code = 0;
};

void add_train_command(CLI::App& root, CommandContext& ctx);
void add_predict_command(CLI::App& root, CommandContext& ctx);
void add_gen_data_command(CLI::App& root, CommandContext& ctx);
void add_bench_command(CLI::App& root, CommandContext& ctx);
void add_info_command(CLI::App& root, CommandContext& ctx);
void add_scheduler_command(CLI::App& root, CommandContext& ctx);
void add_server_command(CLI::App& root, CommandContext& ctx);
void add_worker_command(CLI::App& root, CommandContext& ctx);
void add_launch_command(CLI::App& root, CommandContext& ctx);
void add_node_command(CLI::App& root, CommandContext& ctx);

// Runs body, turning every exception into "parafab <cmd>: error: ..." on
// stderr and exit status 1 (2 for std::invalid_argument: bad flags).
int run_guarded(const char* command, const std::function<int()>& body);

}  // namespace parafab::apps
