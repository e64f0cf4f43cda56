// The driver interface: how a sandbox is started, reached and torn down.
// Everything above it (exec, cp, gc, the manager) is driver-independent and
// talks to the sandbox's agent over the stream connect() returns.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/spec.hpp"

namespace sbx {

struct Config;

/// One host check: a driver's prerequisite or a host feature.
struct Probe {
  bool ok = false;
  std::string name;     ///< what was checked ("user namespaces", "runsc")
  std::string detail;   ///< what was found (version, path) or why it failed
  std::string remedy;   ///< what to do when !ok
  bool advisory = false; ///< a failure here costs speed, not function
};

/// Progress messages for steps that take a while (VM boot, image build).
using ProgressFn = void (*)(void* ctx, const std::string& message);

class Driver {
 public:
  virtual ~Driver() = default;

  /// Starts the sandbox described by rec; `dir` is its private state directory.
  /// Fills rec's runtime fields (agent pid, driver_data). On failure it must
  /// leave nothing running; destroy() is still called to clean up.
  virtual void start(SandboxRecord& rec, const std::string& dir) = 0;
  /// Once the agent answers, before create returns and before any exec: what
  /// start left for then (deno: a Python one-shot's interpreter load, then its CPU cap).
  virtual void finish_start(SandboxRecord& /*rec*/, const std::string& /*dir*/) {}
  /// How long create waits for a new sandbox's agent to answer.
  virtual int ready_timeout_ms(const SandboxRecord& /*rec*/) const { return 30'000; }
  /// Opens a new byte stream to the sandbox's agent.
  virtual Fd connect(const SandboxRecord& rec, const std::string& dir) = 0;
  /// Whether the agent's sockets are this host kernel's and connect() is a Unix socket,
  /// so a port's connection can be handed to the host (SCM_RIGHTS) and relayed there
  /// directly. Not gVisor's (its sockets live in its own network stack) nor a VM's.
  virtual bool agent_passes_sockets() const { return false; }
  /// Whether the sandbox's agent is still running.
  virtual bool alive(const SandboxRecord& rec) = 0;
  /// Kills the sandbox and frees every host resource it held. Idempotent; works
  /// on a half-started sandbox and on one whose processes are already gone.
  virtual void destroy(const SandboxRecord& rec, const std::string& dir) = 0;
  /// A counter of kills by the memory limit, read before and after an exec to
  /// tell an OOM kill from any other SIGKILL.
  virtual uint64_t oom_kills(const SandboxRecord& /*rec*/) { return 0; }
  /// What an exec's end is judged against, read as it starts: the kills by the memory
  /// limit so far, and where the agent's log ended (a runtime's own memory cap writes there).
  struct ExecMarks {
    uint64_t oom_kills = 0;
    uint64_t log_end = 0;
  };
  virtual ExecMarks exec_marks(const SandboxRecord& rec, const std::string& /*dir*/) { return {oom_kills(rec), 0}; }
  /// Whether a memory cap the runtime enforces itself, which the kernel's OOM killer does
  /// not count (deno: V8's heap limit, sized from --memory), ended the agent since `marks`.
  virtual bool runtime_memory_cap_hit(const SandboxRecord& /*rec*/, const std::string& /*dir*/, const ExecMarks& /*marks*/) {
    return false;
  }
  /// How often the pids cap refused a new task: names the cause when a sandbox dies of it.
  virtual uint64_t pids_limit_hits(const SandboxRecord& /*rec*/) { return 0; }
  /// Host leftovers (cgroups, mounts, ...) that belong to no sandbox in `live_ids`.
  virtual std::vector<std::string> orphans(const std::set<std::string>& /*live_ids*/) { return {}; }
  /// Frees one leftover named by orphans().
  virtual void reap_orphan(const std::string& /*what*/) {}
  /// Host-wide cache entries that nothing has used for long, with why (gc).
  virtual std::vector<std::pair<std::string, std::string>> stale_caches(int64_t /*now_ms*/) { return {}; }
  /// Drops one entry named by stale_caches(); false if a user came meanwhile.
  virtual bool drop_cache(const std::string& /*what*/, int64_t /*now_ms*/) { return false; }
  /// Changes the cpu, memory and pids caps of a running sandbox (the disk cap
  /// stays). False when this driver cannot: a warm-pool claim then starts cold.
  virtual bool set_limits(const SandboxRecord& /*rec*/, const Limits& /*limits*/) { return false; }
  /// Stops every process of the sandbox (`sbx pause`): no CPU, memory kept,
  /// until resume(). Called on a running sandbox only (resume: a paused one).
  /// Throws unavailable when the driver cannot.
  virtual void pause(const SandboxRecord& rec, const std::string& /*dir*/) {
    throw Error(Errc::unavailable, "the " + rec.spec.driver + " driver cannot pause a sandbox");
  }
  /// Lets a paused sandbox's processes run again.
  virtual void resume(const SandboxRecord& rec, const std::string& /*dir*/) {
    throw Error(Errc::unavailable, "the " + rec.spec.driver + " driver cannot resume a sandbox");
  }
  /// Copies the sandbox's writable layer (its files, not its memory) to the new file
  /// `dest` (`sbx snapshot`). Called on a paused sandbox, after sync(2), so the copy is
  /// consistent. Throws unavailable when the driver keeps no layer it can copy.
  virtual void copy_layer(const SandboxRecord& rec, const std::string& /*dir*/, const std::string& /*dest*/) {
    throw Error(Errc::unavailable, "the " + rec.spec.driver + " driver cannot snapshot a sandbox")
        .set_hint("snapshots work on the subprocess, runsc, microvm and deno drivers");
  }
  /// Before start(): makes the new sandbox's writable layer a copy of the snapshot file
  /// `layer`, taken from a sandbox whose first host uid was `from_uid_base`.
  virtual void seed_layer(const SandboxRecord& rec, const std::string& /*dir*/, const std::string& /*layer*/,
                          uint32_t /*from_uid_base*/) {
    throw Error(Errc::unavailable, "the " + rec.spec.driver + " driver cannot start a sandbox from a snapshot")
        .set_hint("snapshots work on the subprocess, runsc, microvm and deno drivers");
  }
  /// Saves a running sandbox's memory and processes into the new directory `memory` and its
  /// writable layer into the new file `layer`, at one stopped moment (`sbx snapshot --memory`);
  /// the sandbox then runs on (rec's runtime fields may change). Throws unavailable when the
  /// driver cannot, saying why.
  virtual void checkpoint(SandboxRecord& rec, const std::string& /*dir*/, const std::string& /*memory*/,
                          const std::string& /*layer*/) {
    throw Error(Errc::unavailable, "the " + rec.spec.driver + " driver cannot save a sandbox's memory")
        .set_hint("leave --memory out for a snapshot of its files; memory snapshots work on runsc and on microvm with QEMU (`sbx doctor`)");
  }
  /// After seed_layer, before start(): start() then resumes the checkpoint() in the directory
  /// `memory` instead of booting, so the sandbox's processes run on from where they were.
  virtual void seed_memory(SandboxRecord& rec, const std::string& /*dir*/, const std::string& /*memory*/) {
    throw Error(Errc::unavailable, "the " + rec.spec.driver + " driver cannot restore a sandbox's memory");
  }
  /// Whether checkpoint() works on this host, and why not (doctor; advisory).
  virtual Probe memory_snapshots() {
    return {false, "memory snapshots (snapshot --memory)", "not on this driver: only runsc and microvm (QEMU) save a sandbox's processes",
            "docs/snapshots.md says why", true};
  }
  /// A note create shows before start() when starting takes a while (a VM boot).
  virtual std::optional<std::string> start_note(const SandboxSpec& /*spec*/) { return std::nullopt; }
};

/// What a sandbox's long-lived host processes call themselves in ps and
/// /proc/PID/cmdline ("sbx-sandbox sbx_… deno"), instead of the argv of the
/// sbx call that started them: `pgrep -f "sbx serve"` must find the manager only.
std::string sandbox_process_title(const SandboxRecord& rec);

/// A row of the driver table: the one list that doctor, --driver, the
/// selector and the server's /healthz all walk.
struct DriverInfo {
  std::string name;     ///< as given to --driver
  std::string summary;  ///< one line for help and doctor
  /// Checks this host can run the driver; one Probe per prerequisite. `deep`
  /// (doctor) may take seconds (smoke runs, platform probes); otherwise (a
  /// manager's /healthz) it must answer from what is known or cached.
  std::vector<Probe> (*probe)(const Config& cfg, bool deep);
  /// Makes a driver instance for this configuration.
  std::unique_ptr<Driver> (*make)(const Config& cfg);
  /// Whether --network jail works on this driver (deno has no network at all).
  bool network_jail = false;
  /// Whether sandboxes that name no image get the configured default image
  /// (defaults.image); otherwise the driver's own base (deno's SQLite files).
  bool default_image = false;
};

using DriverTable = std::vector<DriverInfo>;

/// The row named `name`, or nullptr.
const DriverInfo* find_driver(const DriverTable& table, std::string_view name);
/// "subprocess, runsc, ..." for error messages.
std::string driver_names(const DriverTable& table);

}  // namespace sbx
