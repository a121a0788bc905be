// `parafab launch --hostfile`: the hostfile, where each process goes, and the
// ssh command line that starts it. Pure functions of their inputs (no
// environment, no processes), so they are unit-tested without ssh.
//
// Hostfile: one host a line, `[user@]host[:port] [slots=N]`; `#` starts a
// comment; blank lines are skipped. `host` may be a name or an address
// (IPv6 in brackets when a port follows: `[fe80::1]:2222`). `slots=N` caps
// the processes placed on the host (no cap when absent). Errors name
// FILE:LINE.
//
//   const std::vector<SshHost> hosts = read_hostfile("hosts.txt");
//   const std::vector<size_t> at = place_round_robin(hosts, 1 + S + W, "hosts.txt");
//   // process g (0 scheduler, 1..S servers, S+1.. workers) runs on hosts[at[g]]
//   std::vector<std::string> argv = ssh_argv(hosts[at[g]], {.port = 22, .options = {"IdentityFile=~/k"}},
//                                            remote_command(cwd, 5, {"PARAFAB_ROLE=worker"}, {bin, "node"}));
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace parafab::apps {

struct SshHost {
  std::string destination;            // what ssh is given: [user@]host
  std::string address;                // host alone (no user, no brackets): what other processes connect to
  std::optional<uint16_t> port;       // from host:port
  std::optional<uint32_t> slots;      // from slots=N; nullopt: no cap
  std::string where;                  // "FILE:LINE", for messages
};

// Throws std::invalid_argument "FILE:LINE: ..." on a malformed line, a host
// listed twice, or a file with no host. `name` is the file's name for messages.
std::vector<SshHost> parse_hostfile(const std::string& text, const std::string& name);
// Reads and parses `path`; throws std::invalid_argument when it cannot be read.
std::vector<SshHost> read_hostfile(const std::string& path);

// Host index of each of `processes` processes: process 0 (the scheduler) on
// host 0, then each next process on the next host in file order (cyclic)
// that still has a free slot. Throws std::invalid_argument naming the
// hostfile when the slots are fewer than the processes.
std::vector<size_t> place_round_robin(const std::vector<SshHost>& hosts, size_t processes,
                                      const std::string& hostfile);

// `text` as one word for a POSIX shell (single-quoted unless it is plainly safe).
std::string shell_quote(const std::string& text);

// The command line that the remote login shell runs: changes to `cwd`, then
// runs `env ENV... ARGV...` so that it ends when the ssh session's stdin
// reaches EOF (SIGTERM to its process group, SIGKILL `grace_s` later), and
// exits with its status. ssh_hosts.cpp explains why.
std::string remote_command(const std::string& cwd, double grace_s, const std::vector<std::string>& env,
                           const std::vector<std::string>& argv);

struct SshOptions {
  std::string program = "ssh";
  std::optional<uint16_t> port;      // --ssh-port: for hosts without host:port
  std::vector<std::string> options;  // each passed as -o OPTION
};

// ssh -o BatchMode=yes -T -x [-p PORT] [-o OPTION]... DESTINATION COMMAND.
// The host's own port (host:port) wins over options.port.
std::vector<std::string> ssh_argv(const SshHost& host, const SshOptions& options, const std::string& command);

// Why ssh exited with `exit_status` (255: ssh's own failure), for messages.
std::string describe_ssh_exit(int exit_status);

}  // namespace parafab::apps
