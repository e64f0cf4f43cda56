// Sandboxes on this host: the registry plus the drivers of the driver table.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/backend.hpp"
#include "core/config.hpp"
#include "core/driver.hpp"
#include "core/pool.hpp"
#include "core/registry.hpp"

namespace sbx {

class LocalBackend : public Backend {
 public:
  LocalBackend(const Config& cfg, const DriverTable& drivers);
  LocalBackend(const LocalBackend&) = delete;  // its Pool refers to its own members
  LocalBackend& operator=(const LocalBackend&) = delete;

  std::string where() const override { return "local"; }
  SandboxRecord create(const SandboxSpec& spec, const Progress& progress) override;
  ExecResult exec(const std::string& id, const ExecRequest& req, ExecIO& io) override;
  OneShotResult run_once(const SandboxSpec& spec, const ExecRequest& req, ExecIO& io) override;
  void tear_down_one_shots_in_background() override { background_teardown_ = true; }
  std::vector<SandboxRecord> list() override;
  SandboxRecord get(const std::string& id) override;
  void remove(const std::string& id) override;
  SandboxRecord start(const std::string& id) override;
  SandboxRecord pause(const std::string& id) override;
  SandboxRecord resume(const std::string& id) override;
  SnapshotInfo snapshot(const std::string& id, const std::string& name, bool memory) override;
  std::vector<SnapshotInfo> snapshots() override;
  void remove_snapshot(const std::string& name) override;
  SandboxRecord fork(const std::string& id, const Progress& progress, bool memory) override;
  Fd open_port(const std::string& id, uint16_t port) override;
  void forward_port(const std::string& id, uint16_t port, int local_fd) override;
  GcReport gc(bool dry_run) override;
  std::optional<FileEntry> stat(const std::string& id, const std::string& path) override;
  uint64_t put(const std::string& id, const std::string& target, EntrySource& source, uint64_t max_bytes) override;
  uint64_t get_files(const std::string& id, const std::string& path, EntrySink& sink, uint64_t max_bytes) override;
  std::vector<ProcessInfo> processes(const std::string& id) override;
  std::optional<ExecResult> attach(const std::string& id, int pid, const AttachOptions& opts, ExecIO& io) override;
  void signal_process(const std::string& id, int pid, int sig) override;

  /// The registry, for callers that inspect state directly (tests, doctor).
  Registry& registry() { return registry_; }

  /// Starts pooled sandboxes until each driver's pool has its configured size;
  /// `turn`: the pool's turn, when the caller holds it (settle_pool).
  PoolFillReport fill_pool(Fd turn = {});
  /// Waits for the refills that one-shots' detached removals have in flight,
  /// then returns the pool's turn: while it is held no fill starts a spare, so
  /// a drain or `rm --all` under it leaves nothing.
  Fd settle_pool();
  /// Waits, up to kRemovalWaitMs in all, for the removals already past their
  /// record (a one-shot's detached teardown) and finishes those whose remover
  /// died; returns the directories still being removed after that.
  std::vector<std::string> settle_removals();
  /// How long settle_removals and gc wait for removals in flight.
  static constexpr int kRemovalWaitMs = 30'000;
  /// Each driver's pool.
  std::vector<PoolStatus> pool_status();
  /// Destroys the pooled (unclaimed) sandboxes of `driver` (all drivers when
  /// empty); returns their ids. A sandbox claimed meanwhile is left alone.
  std::vector<std::string> drain_pool(const std::string& driver);

 private:
  /// The driver a record was created with.
  std::unique_ptr<Driver> driver_for(const SandboxRecord& rec);
  /// pause (paused true) or resume, under the sandbox's exclusive lock.
  SandboxRecord set_paused(const std::string& id, bool paused);
  /// Pauses rec (unless it is paused already) and runs copy() under its shared lock while
  /// it stays paused; resumes it after, also when copy throws, if this paused it.
  void while_paused(SandboxRecord& rec, const std::function<void()>& copy);
  /// The driver's checkpoint of a running rec into `memory` (a new directory) and `layer`, under
  /// its exclusive lock (no exec or copy may start while the agent lets go of the host); rec is saved after.
  void checkpoint(SandboxRecord& rec, Driver& driver, const std::string& memory, const std::string& layer);
  /// For create --from: the snapshot's driver, image and disk size in spec; throws when they clash.
  SnapshotInfo apply_snapshot(SandboxSpec& spec);
  /// Before start: the new sandbox's layer becomes a copy of its spec's snapshot's (and, for a
  /// memory snapshot, start() resumes its checkpoint).
  void seed_from_snapshot(SandboxRecord& rec, Driver& driver, const std::string& dir);
  /// Resumes rec first when it is paused (exec, cp and the rest need its agent); rec is re-read.
  void resume_if_paused(SandboxRecord& rec);
  /// A running sandbox's record and an agent connection, or a clear error.
  AgentClient connect(SandboxRecord& rec, Driver& driver);
  /// connect() under the sandbox's shared lock, as an exec or copy starts; also
  /// reads the OOM-kill count that tells later whether the memory cap ended it.
  AgentClient connect_in_use(SandboxRecord& rec, Driver& driver, Driver::ExecMarks& before);
  /// A TCP connection to 127.0.0.1:port in a running sandbox: the connected socket
  /// itself where the driver's agent passes it, else relayed over `agent`.
  struct PortConn {
    AgentClient agent;
    Fd socket;
  };
  PortConn port_client(const std::string& id, uint16_t port);
  /// Called in a handler for a stream that broke mid-exec: when the sandbox is gone, records
  /// it dead and reports an OOM kill that took it down; else rethrows.
  ExecResult agent_lost(SandboxRecord& rec, Driver& driver, const Driver::ExecMarks& before);
  /// An agent connection of a running sandbox for a file transfer (marks it used).
  /// Runs a file transfer `f(agent)`; a sandbox that died during it is marked dead and named.
  template <class F>
  uint64_t with_files(const std::string& id, const char* what, F&& f);
  /// After a broken agent stream: if the sandbox is gone, records it dead and returns why.
  std::optional<std::string> mark_dead_if_gone(SandboxRecord& rec, Driver& driver, const Driver::ExecMarks& before);
  /// Tears down one sandbox under its exclusive lock; one removed by another
  /// process while this waited for the lock is no error.
  void destroy(const SandboxRecord& rec);
  /// Tears it down; the caller holds its exclusive lock.
  void destroy_locked(const SandboxRecord& rec);
  /// Forks the detached process that removes a one-shot's sandbox, handing it the
  /// sandbox's lock; false when this process cannot fork safely (threads) or at all.
  bool remove_in_background(const SandboxRecord& rec);
  /// create, for the process `one_shot` names (none: a sandbox that stays).
  SandboxRecord create_for(const SandboxSpec& spec, const Progress& progress, const OneShotClient& one_shot);
  /// Starts a new sandbox and waits until its agent answers; it ends in state
  /// pooled (for the warm pool) or running.
  SandboxRecord start_new(const SandboxSpec& spec, Driver& driver, const Progress& progress, bool for_pool,
                          const OneShotClient& one_shot = {});
  /// Waits until the just-started sandbox's agent answers (or it died, or the time ran out).
  void wait_ready(SandboxRecord& rec, Driver& driver, const std::string& dir, const Progress& progress);
  /// What gc does with a sandbox: nothing (empty reason), remove it, or pause it (idle, idle action pause).
  struct GcVerdict {
    std::string reason;
    bool pause = false;
    bool alive = false;  ///< its agent runs
  };
  GcVerdict gc_verdict(const SandboxRecord& rec, Driver& driver, int64_t now,
                       const std::map<std::string, std::string>& unwanted_pooled);
  /// Runs `f(agent)` on a running sandbox's agent for its background
  /// processes; an unknown pid's error names the way to list them.
  template <class F>
  auto with_processes(const std::string& id, F&& f);
  /// Whether a running or pooled sandbox's agent is still there.
  bool alive(const SandboxRecord& rec);

  Config cfg_;
  const DriverTable& drivers_;
  Registry registry_;
  Pool pool_;
  bool background_teardown_ = false;  ///< tear_down_one_shots_in_background()
};

/// Fills a spec's unset fields from the configuration and validates it:
/// known driver, limits in range, network mode, absolute workdir, image directory.
SandboxSpec normalize_spec(SandboxSpec spec, const Config& cfg, const DriverTable& drivers);

/// The end of a sandbox's record, and of its claim on its image.
void forget_record(Registry& registry, const SandboxRecord& rec);

/// A one-shot sandbox whose client (in this pid namespace) has exited: its
/// teardown is under way, or, that cut short, gc's to finish.
bool one_shot_client_gone(const SandboxRecord& rec);

/// Throws usage for a background request that cannot be one: in a one-shot
/// (its sandbox goes when the call returns) or with a timeout.
void check_background_request(const ExecRequest& req, bool one_shot);

/// The environment every exec starts from (PATH, HOME, ...), before the sandbox's and the request's.
std::map<std::string, std::string> base_exec_env();

}  // namespace sbx
