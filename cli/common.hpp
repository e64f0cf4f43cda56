// What the subcommands share: global flags, the flags that describe a new
// sandbox, configuration and backend loading, and output helpers.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/selector.hpp"

namespace sbx::cli {

/// Flags every subcommand takes.
struct Globals {
  std::string config;     ///< --config
  std::string state_dir;  ///< --state-dir
};

/// The exit status the chosen subcommand asks for.
struct Outcome {
  int status = 0;
};

/// Flags describing a new sandbox (create, and exec --rm).
struct SpecFlags {
  std::string name, driver, image, memory, pids, cpus, disk, network, idle_timeout, idle_action, ttl, workdir, from;
  bool persistent = false;
  std::vector<std::string> env, labels;
  std::vector<std::string> allow;
};

void add_global_flags(CLI::App& app, Globals& g);
/// Adds a new sandbox's flags to sub; returns them (exec refuses them without --rm).
std::vector<const CLI::Option*> add_spec_flags(CLI::App* sub, SpecFlags& f);
/// The spec the flags ask for; unset values are left for the configuration's defaults.
SandboxSpec spec_from_flags(const SpecFlags& f);
/// "K=V" strings to a map; `what` names the flag in errors.
std::map<std::string, std::string> parse_key_values(const std::vector<std::string>& items, const char* what);

/// The resolved configuration for this call; prints its warnings once on stderr.
Config load_config(const Globals& g, const std::string& driver_flag = "");
/// The backend that runs new sandboxes under this configuration (walking the
/// fallback chain), and the driver it chose.
std::unique_ptr<Backend> backend_for_new(const Config& cfg, std::string& driver);
/// The backend that holds sandbox `ref`, which is replaced by the sandbox's id.
/// `ref` is an exact id, else a name, else an unambiguous id prefix; each is
/// looked for in this host's registry, then among the remembered remote
/// sandboxes (which reach the manager they were created on). Anything else
/// goes to the configured manager when it is healthy, else stays local. A manager that
/// refuses the key is an error here too (see check_manager_health).
std::unique_ptr<Backend> backend_for_existing(const Config& cfg, std::string& ref);
/// This host's backend plus the configured manager when it is healthy (ls, gc,
/// rm --all); an unhealthy one is skipped with a warning, one that refuses the key is an error.
std::vector<std::unique_ptr<Backend>> all_backends(const Config& cfg);

/// Prints "sbx: error: ..." (and a hint line) on stderr.
void print_error(const Error& e);

/// One gc action and where it was done ("local", a manager's URL, or "" for the image store).
struct PlacedGcAction {
  std::string where;
  GcAction action;
};
/// Prints a gc report (a line per action, or --json) and returns the exit status
/// (io when an action that was meant to be done failed).
int print_gc_report(const std::vector<PlacedGcAction>& actions, bool dry_run, bool json);
/// Prints "sbx: warning: ..." on stderr.
void warn(const std::string& message);
/// Whether fd is a terminal (tables and progress only then).
bool is_tty(int fd);
/// A background process's pid as given on the command line (a positive number), or a usage error.
int parse_pid(const std::string& text);

/// For a CLI11 parse error of args (before they are reversed): an unknown
/// subcommand or long flag, named, with "did you mean ...?" when one is close.
std::optional<Error> explain_unknown(const CLI::App& app, const std::vector<std::string>& args);

/// Cuts the command off an `sbx exec` argv (see cli/exec.cpp); returns what CLI11 should parse.
std::vector<std::string> split_exec_command(const CLI::App& app, const std::vector<std::string>& args);

// One registration function per subcommand, each in its own file.
void register_create(CLI::App& app, Globals& g, Outcome& out);
void register_exec(CLI::App& app, Globals& g, Outcome& out);
void register_cp(CLI::App& app, Globals& g, Outcome& out);
void register_ls(CLI::App& app, Globals& g, Outcome& out);
void register_rm(CLI::App& app, Globals& g, Outcome& out);
void register_start(CLI::App& app, Globals& g, Outcome& out);
void register_gc(CLI::App& app, Globals& g, Outcome& out);
void register_doctor(CLI::App& app, Globals& g, Outcome& out);
void register_serve(CLI::App& app, Globals& g, Outcome& out);
void register_pool(CLI::App& app, Globals& g, Outcome& out);
void register_image(CLI::App& app, Globals& g, Outcome& out);
void register_ps(CLI::App& app, Globals& g, Outcome& out);
void register_logs(CLI::App& app, Globals& g, Outcome& out);
void register_attach(CLI::App& app, Globals& g, Outcome& out);
void register_kill(CLI::App& app, Globals& g, Outcome& out);
void register_port_forward(CLI::App& app, Globals& g, Outcome& out);
void register_pause(CLI::App& app, Globals& g, Outcome& out);
void register_resume(CLI::App& app, Globals& g, Outcome& out);
void register_snapshot(CLI::App& app, Globals& g, Outcome& out);
void register_fork(CLI::App& app, Globals& g, Outcome& out);

/// A subcommand that takes sandbox ids and runs `fn` on each one's backend
/// (start, pause, resume): prints each id it did, an error line for each it
/// could not, and fails when any failed.
void register_per_sandbox(CLI::App& app, Globals& g, Outcome& out, const std::string& name, const std::string& help,
                          std::function<SandboxRecord(Backend&, const std::string&)> fn);

}  // namespace sbx::cli
