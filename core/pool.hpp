// The warm pool: sandboxes started ahead of time with a driver's configured
// defaults and left in state "pooled", so that a create can take one instead
// of starting cold. No process holds the pool: it is the pooled records of the
// registry. A claim is a state transition (pooled -> running) made under the
// sandbox's lock, so every sbx process and the manager may claim at once and
// exactly one of them gets each sandbox. The id stays: cgroups, mounts and the
// state directory are named after it, and a rename would have to move them all.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/driver.hpp"
#include "core/registry.hpp"

namespace sbx {

/// How a create request relates to a pooled sandbox.
enum class PoolFit {
  none,        ///< cannot serve it: driver, image, network or disk cap differ, or workdir not below the pool's
  exact,       ///< same caps: only record fields (env, labels, ttl, ...) change
  set_limits,  ///< serves it once the driver changes the cpu/memory/pids caps
};

/// The spec pooled sandboxes of pool `key` are started with: the configured
/// defaults (limits, network, host view, /work), on the snapshot's driver, image,
/// disk and files for a snapshot's pool. Throws like normalize_spec, or not_found
/// for a snapshot that is not there.
SandboxSpec pool_spec(const std::string& key, const Config& cfg, const DriverTable& drivers);

/// Whether a normalized request `want` can be served by a sandbox started as `pooled`
/// (its files the same snapshot's, or both the image's alone).
/// Env, labels, idle timeout, TTL and persistence are applied at claim time, and
/// a workdir below the pool's (/work/x) is made then.
PoolFit pool_fit(const SandboxSpec& want, const SandboxSpec& pooled);

/// One pool, for `sbx pool status`.
struct PoolStatus {
  std::string driver;   ///< the pool's key: a driver, or snapshot:NAME
  uint64_t size = 0;    ///< configured
  int ready = 0;        ///< pooled, alive and started with today's settings
  int starting = 0;     ///< being started for the pool
  int stale = 0;        ///< pooled but dead, surplus or started with other settings (gc removes them)
  std::string problem;  ///< why the pool cannot be filled, if it cannot
};

/// What one fill did.
struct PoolFillReport {
  std::vector<std::string> started;                    ///< ids now pooled
  std::vector<std::pair<std::string, std::string>> errors;  ///< {driver, why}
};

/// Starts one sandbox for the pool from `spec` and returns its record, already
/// in state pooled (LocalBackend's start path, so the pool starts exactly what create would).
using PoolStarter = std::function<SandboxRecord(const SandboxSpec& spec)>;

class Pool {
 public:
  /// `alive` tells whether a pooled sandbox's agent is still there (LocalBackend's check).
  Pool(const Config& cfg, const DriverTable& drivers, Registry& registry,
       std::function<bool(const SandboxRecord&)> alive);

  /// Hands one pooled sandbox, made into `want` (a normalized spec), to this
  /// caller alone; nullopt when none fits (the caller starts cold). Dead or
  /// unanswering pooled sandboxes met on the way are destroyed, never handed out.
  std::optional<SandboxRecord> claim(const SandboxSpec& want, Driver& driver);
  /// Starts sandboxes until each driver has its configured number ready.
  /// Fillers take turns (take_turn), so two never overshoot; `turn` is one
  /// the caller already holds (empty: fill takes its own).
  PoolFillReport fill(const PoolStarter& start, Fd turn = {});
  /// The pool's turn: a lock on the state root that fillers and drains take,
  /// held while the returned Fd is open.
  Fd take_turn();
  /// The pooled records of `recs` (a registry listing, oldest first) to remove
  /// and why: dead, driver unusable, started with other settings, surplus over the size.
  std::map<std::string, std::string> unwanted(const std::vector<SandboxRecord>& recs);
  /// Every driver that has a size or pooled sandboxes.
  std::vector<PoolStatus> status();

 private:
  /// Whether the driver can run sandboxes here now; `why` says why not.
  /// Cached for a few seconds: a long-lived Pool (the manager's) notices a driver going away.
  bool usable(const std::string& key, std::string* why);
  uint64_t size_of(const std::string& key) const;
  /// Whether some pool may hold a sandbox for `want` (no registry listing otherwise).
  bool may_serve(const SandboxSpec& want) const;
  /// The key of the pool a pooled sandbox of `spec` belongs to; "" when no configured
  /// pool starts such sandboxes now. `specs` caches pool_spec per key (nullopt: unusable).
  std::string key_of(const SandboxSpec& spec, std::map<std::string, std::optional<SandboxSpec>>& specs);
  /// Kills a pooled sandbox whose lock the caller holds.
  void destroy_locked(const SandboxRecord& rec, Driver& driver);

  const Config& cfg_;
  const DriverTable& drivers_;
  Registry& registry_;
  std::function<bool(const SandboxRecord&)> alive_;
  struct Usability {
    std::string why;  ///< "" = usable
    std::chrono::steady_clock::time_point at;
  };
  std::mutex usable_mu_;  ///< guards usable_
  std::map<std::string, Usability> usable_;
};

}  // namespace sbx
