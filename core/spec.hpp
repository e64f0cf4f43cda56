// What a sandbox is asked to be (SandboxSpec), what it is (SandboxRecord),
// and what running a command in it means (ExecRequest / ExecResult).
// The JSON forms are the HTTP API's and the registry's on-disk format.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sbx {

/// Resource caps; 0 means "no limit" (or the config default when resolving).
struct Limits {
  double cpus = 0;           ///< CPU share in cores (1.5 = one and a half cores)
  uint64_t memory_mb = 0;    ///< memory cap, MiB
  uint64_t pids = 0;         ///< maximum number of tasks
  uint64_t disk_mb = 0;      ///< size cap of the writable layer, MiB
};

/// For idle_timeout_s and ttl_s: not given, take the configured default.
inline constexpr uint64_t kUseDefault = UINT64_MAX;

/// The label naming the owner of a sandbox (the manager sets it to the API key's
/// name); a sandbox's name is unique among the sandboxes of one owner.
inline constexpr const char* kOwnerLabel = "sbx.owner";
/// How many managers a fleet may have: a sandbox id names its owner in its first two characters (10 bits).
inline constexpr uint64_t kMaxFleetSize = 1024;

/// The caller's request for a new sandbox.
struct SandboxSpec {
  std::string name;                         ///< a name usable instead of the id, unique per owner; empty = none
  std::string driver;                       ///< resolved driver name
  std::string image;                        ///< directory used as read-only base; empty = host view
  Limits limits;
  std::string network = "none";             ///< "none" or "jail"
  uint64_t idle_timeout_s = kUseDefault;    ///< gc after this long without an exec; 0 = never
  uint64_t ttl_s = kUseDefault;             ///< gc this long after creation; 0 = never
  bool persistent = false;                  ///< never removed by idle/TTL gc
  /// What idle gc does at the idle timeout: "pause" or "remove"; empty: pause
  /// if persistent, else remove (normalize_spec fills it in).
  std::string idle_action;
  std::map<std::string, std::string> env;   ///< default environment of every exec
  std::map<std::string, std::string> labels;
  std::string workdir = "/work";            ///< default cwd of every exec, created at start
  std::string from_snapshot;                ///< snapshot whose files the sandbox starts with (create --from); empty = none
  std::vector<std::string> allow;           ///< network jail allowlist (a.b.c.d/n or domain names); empty = any public destination
};

/// The idle action a spec asks for, its default filled in (records written before it existed have none).
inline bool pauses_when_idle(const SandboxSpec& s) {
  return s.idle_action.empty() ? s.persistent : s.idle_action == "pause";
}

/// pooled: started by the warm pool (core/pool.hpp), ready and not yet handed to anyone.
enum class SandboxState { creating, running, dead, failed, pooled, paused };
std::string_view state_name(SandboxState s);
/// Whether a sandbox in this state has an agent process that should be there (running, paused, pooled).
inline bool has_agent(SandboxState s) {
  return s == SandboxState::running || s == SandboxState::paused || s == SandboxState::pooled;
}
SandboxState parse_state(std::string_view s);

/// The process a one-shot sandbox lives for (`sbx exec --rm`): when it is
/// gone, the sandbox is garbage, whatever its idle timeout says.
struct OneShotClient {
  pid_t pid = 0;        ///< 0: not a one-shot sandbox
  uint64_t start = 0;   ///< its start time, clock ticks since boot (a recycled pid is not it)
  uint64_t pid_ns = 0;  ///< inode of its pid namespace: elsewhere the pid names another process
  /// The program of its one exec (argv[0]), for a driver to boot for it; not saved.
  std::string command;
};

/// A sandbox as the registry knows it.
struct SandboxRecord {
  std::string id;                ///< "sbx_" + 12 lowercase base32 characters
  SandboxSpec spec;
  SandboxState state = SandboxState::creating;
  int64_t created_ms = 0;        ///< wall clock, ms since the epoch
  int64_t last_active_ms = 0;    ///< last exec start or end (filled from the activity stamp)
  pid_t agent_pid = 0;           ///< host pid of the sandbox's init (the agent)
  uint64_t agent_start = 0;      ///< its start time in clock ticks, so a reused pid is not mistaken for it
  uint32_t uid_base = 0;         ///< first host uid/gid of the sandbox's id range
  uint32_t slot = 0;             ///< index of that range
  std::string error;             ///< why it failed or died
  bool from_pool = false;        ///< started by the warm pool (still unclaimed while state is pooled)
  OneShotClient one_shot;        ///< set for a one-shot sandbox: who it lives for
  nlohmann::json driver_data = nlohmann::json::object();  ///< driver-private fields
};

/// One command to run in a sandbox.
struct ExecRequest {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  ///< merged over the sandbox's env
  std::string cwd;                          ///< empty = the sandbox's workdir
  uint64_t timeout_ms = 0;                  ///< 0 = none
  bool stdin_open = false;                  ///< caller will stream stdin
  bool tty = false;                         ///< run on a terminal (a PTY in the sandbox); output all on stdout
  uint16_t rows = 0, cols = 0;              ///< the terminal's size at start (tty); 0 = the agent's default
  bool background = false;                  ///< start it and return at once (ExecResult::pid): a background process
};

/// A terminal's size, as sent on ExecIO::resize_fd.
struct WindowSize {
  uint16_t rows = 0, cols = 0;
};

/// A background process (`sbx exec -d`) as the agent keeps it.
struct ProcessInfo {
  int pid = 0;                     ///< sandbox-scoped process id
  std::vector<std::string> argv;
  std::string state;               ///< running | exited
  int64_t started_ms = 0;          ///< wall clock, ms since the epoch
  int exit_code = -1;              ///< once exited: as ExecResult::exit_code
  int signal = 0;                  ///< once exited: the killing signal, or 0
  bool tty = false;
};

/// What `sbx logs` / `sbx attach` ask of a background process.
struct AttachOptions {
  bool follow = true;      ///< stream live output until the process ends (false: the kept output, then return)
  bool input = false;      ///< attach: forward stdin (and the terminal) to it
  int64_t tail_lines = -1; ///< replay only the last N lines of the kept output; -1 = all that is kept
};

/// How a command ended.
struct ExecResult {
  int exit_code = 0;          ///< the command's status; 128+N when killed by signal N; 124 when timed out
  int signal = 0;             ///< the killing signal, or 0
  bool timed_out = false;
  bool oom_killed = false;
  /// The whole sandbox ended with the command (a runtime that cannot survive
  /// an OOM kill: gVisor); later execs fail, `sbx rm` frees it.
  bool sandbox_ended = false;
  uint64_t duration_ms = 0;
  int pid = 0;                ///< background exec: the started process's id (sbx ps, logs, attach, kill)
};

void to_json(nlohmann::json& j, const Limits& l);
void from_json(const nlohmann::json& j, Limits& l);
void to_json(nlohmann::json& j, const SandboxSpec& s);
void from_json(const nlohmann::json& j, SandboxSpec& s);
void to_json(nlohmann::json& j, const SandboxRecord& r);
void from_json(const nlohmann::json& j, SandboxRecord& r);
void to_json(nlohmann::json& j, const ExecRequest& r);
void from_json(const nlohmann::json& j, ExecRequest& r);
void to_json(nlohmann::json& j, const ExecResult& r);
void to_json(nlohmann::json& j, const ProcessInfo& p);
void from_json(const nlohmann::json& j, ProcessInfo& p);
void from_json(const nlohmann::json& j, ExecResult& r);

/// Throws invalid_argument for keys of `j` not in `allowed`, so a typo never becomes a default.
void reject_unknown_fields(const nlohmann::json& j, std::initializer_list<const char*> allowed,
                           std::string_view what);

/// Milliseconds since the epoch, wall clock.
int64_t now_ms();
/// A fresh sandbox id: random, or, once set_sandbox_id_owner() named a fleet
/// manager, its ordinal in the first two characters and 50 random bits after.
std::string new_sandbox_id();
/// A fresh id naming `ordinal` (0..kMaxFleetSize-1) as its owner.
std::string new_sandbox_id(int ordinal);
/// Makes this process's new ids name `ordinal` (sbx serve in a fleet); -1 = plain random ids.
void set_sandbox_id_owner(int ordinal);
/// The ordinal a valid id names (any id decodes to one: ids made outside a fleet name a random one).
int sandbox_id_owner(std::string_view id);
/// Whether s has the shape of a sandbox id (no path tricks possible).
bool valid_sandbox_id(std::string_view s);
/// Whether s can name a sandbox: 1-63 of [a-z0-9_.-], starting with a letter
/// or digit, and never of an id's shape (so an id and a name never collide).
bool valid_sandbox_name(std::string_view s);
/// Throws invalid_argument, with the rule as the hint, unless valid_sandbox_name(name).
void check_sandbox_name(const std::string& name);
/// The owner a sandbox's name is unique within: its sbx.owner label, "" without one.
std::string sandbox_owner(const SandboxSpec& spec);
/// The state a `state=` filter (`sbx ls -f`, the API's ?state=) asks for; throws
/// invalid_argument naming the value and listing the states, the same for both.
SandboxState parse_state_filter(std::string_view value);

}  // namespace sbx
