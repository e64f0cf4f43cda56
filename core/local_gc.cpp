// The local backend's garbage collection: which sandboxes are garbage and
// why (gc_reason), and the sweep that removes them, the state directories
// without a record, the copies a killed snapshot left and each driver's
// orphans (gc). Split from local_backend.cpp, which holds the rest.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <set>

#include "core/agent_client.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/json_number.hpp"
#include "core/local_backend.hpp"
#include "core/pinned_pid.hpp"
#include "core/snapshots.hpp"
#include "core/units.hpp"

namespace sbx {

namespace {
// A directory without a record younger than this may be a create in progress.
constexpr int64_t kStrayGraceMs = 120'000;

// Whether path was modified within the grace period (false when it is gone).
bool within_grace(const std::string& path, int64_t now) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && now - int64_t{st.st_mtim.tv_sec} * 1000 < kStrayGraceMs;
}
}  // namespace

LocalBackend::GcVerdict LocalBackend::gc_verdict(const SandboxRecord& rec, Driver& driver, int64_t now,
                                                const std::map<std::string, std::string>& unwanted_pooled) {
  bool pooled = rec.state == SandboxState::pooled;
  bool paused = rec.state == SandboxState::paused;
  GcVerdict v;
  v.alive = has_agent(rec.state) && driver.alive(rec);
  auto remove = [&](std::string why) {
    v.reason = std::move(why);
    return v;
  };
  // A one-shot lives only as long as its client (a killed `sbx exec --rm`);
  // a client in another pid namespace cannot be judged from here.
  if (one_shot_client_gone(rec))
    return remove("one-shot client (pid " + std::to_string(rec.one_shot.pid) + ") is gone");
  if (rec.state == SandboxState::creating) {
    // Its creator held the lock from the start: free, the creator is gone (a crash, a SIGKILL).
    if (registry_.abandoned(rec.id)) return remove("its creator died while creating it");
    if (now - rec.created_ms < kStrayGraceMs) return v;
  }
  // A persistent sandbox's disk outlives its agent (a host reboot): it waits, dead, for `sbx start` or `sbx rm`.
  if (!v.alive && rec.spec.persistent && (rec.state != SandboxState::creating && rec.state != SandboxState::failed && !pooled)) return v;
  if (!v.alive) return remove(has_agent(rec.state) ? "its agent is gone" : std::string(state_name(rec.state)));
  if (pooled) {
    // Waiting in the warm pool is not idleness: only the pool's own rules remove it.
    auto it = unwanted_pooled.find(rec.id);
    return it == unwanted_pooled.end() ? v : remove(it->second);
  }
  uint64_t age_s = static_cast<uint64_t>(now - rec.created_ms) / 1000;
  uint64_t idle_ms = static_cast<uint64_t>(now - std::max(rec.last_active_ms, rec.created_ms));
  if (!rec.spec.persistent && rec.spec.ttl_s && age_s >= rec.spec.ttl_s)
    return remove("past its TTL of " + format_duration_ms(rec.spec.ttl_s * 1000));
  bool pause_it = pauses_when_idle(rec.spec);
  // Its idle action is done: it stays paused until resumed or removed.
  if (paused && pause_it) return v;
  if (!rec.spec.idle_timeout_s || idle_ms < rec.spec.idle_timeout_s * 1000) return v;
  std::string timeout = " (timeout " + format_duration_ms(rec.spec.idle_timeout_s * 1000) + ")";
  // Nothing runs in a paused sandbox (and its frozen agent answers no ping): idle since its last use.
  if (paused) return remove("paused and idle for " + format_duration_ms(idle_ms) + timeout);
  // A long-running command (or background process) is not idleness, and
  // idleness starts when the last background process ended: ask the agent.
  nlohmann::json ping;
  try {
    ping = AgentClient(driver.connect(rec, registry_.dir(rec.id))).ping();
  } catch (const Error&) {
  }
  // An agent's answer: a number it cannot hold reads as none, so the sandbox is judged by its record alone.
  auto field = [&](const char* key, int64_t none) {
    return ping.is_object() && ping.contains(key) ? json_number<int64_t>(ping[key]).value_or(none) : none;
  };
  if (field("running", 0)) return v;
  if (auto quiet = field("quiet_ms", -1); quiet >= 0) idle_ms = std::min(idle_ms, static_cast<uint64_t>(quiet));
  if (idle_ms < rec.spec.idle_timeout_s * 1000) return v;
  v.pause = pause_it;
  return remove("idle for " + format_duration_ms(idle_ms) + timeout);
}

GcReport LocalBackend::gc(bool dry_run) {
  GcReport report;
  int64_t now = now_ms();
  std::set<std::string> live;
  auto act = [&](GcAction a, const std::function<void()>& fn) { run_gc_action(report.actions, dry_run, std::move(a), fn); };
  auto recs = registry_.list();
  auto unwanted_pooled = pool_.unwanted(recs);
  for (auto& rec : recs) {
    auto* info = find_driver(drivers_, rec.spec.driver);
    if (!info) {
      live.insert(rec.id);  // another build's sandbox: not ours to judge
      continue;
    }
    auto driver = info->make(cfg_);
    bool pooled = rec.state == SandboxState::pooled;
    GcVerdict verdict = gc_verdict(rec, *driver, now, unwanted_pooled);
    live.insert(rec.id);  // kept, paused or removed here: its resources are not orphans
    if (verdict.reason.empty()) continue;
    auto used_meanwhile = [&] { return verdict.alive && registry_.last_active_ms(rec.id) > rec.last_active_ms; };
    if (verdict.pause) {
      // pause() takes the sandbox's lock itself; an exec that slips in after this check is resumed by it.
      act({"pause", rec.id, verdict.reason, false, ""}, [&] {
        if (used_meanwhile()) throw Error(Errc::conflict, "used meanwhile; kept running");
        pause(rec.id);
      });
      continue;
    }
    act({"sandbox", rec.id, verdict.reason, false, ""}, [&] {
      Fd guard = registry_.lock_if_present(rec.id, true);
      if (!guard) return;  // removed while this waited (a one-shot's own teardown)
      // Re-check under the lock: an exec may have begun since the listing.
      if (used_meanwhile()) throw Error(Errc::conflict, "used meanwhile; kept");
      if (pooled) {
        auto cur = registry_.find(rec.id);
        if (cur && cur->state != SandboxState::pooled) throw Error(Errc::conflict, "claimed from the pool meanwhile; kept");
      }
      driver->destroy(rec, registry_.dir(rec.id));
      forget_record(registry_, rec);
    });
  }
  for (auto& id : registry_.stray_dirs()) {
    if (within_grace(registry_.dir(id), now) && !registry_.abandoned(id)) {
      live.insert(id);
      continue;
    }
    act({"stray_dir", registry_.dir(id), "a state directory without a record", false, ""}, [&] {
      SandboxRecord ghost;
      ghost.id = id;
      for (auto& info : drivers_)
        info.make(cfg_)->destroy(ghost, registry_.dir(id));
      registry_.remove(id);
    });
    live.insert(id);
  }
  // A removal in flight (a one-shot's detached teardown) is waited for, so what
  // gc leaves is what stays; one whose remover died is finished at once.
  auto removals_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRemovalWaitMs);
  for (auto& path : registry_.unfinished_removals()) {
    if (registry_.await_removal(path, removals_deadline) != Registry::RemovalEnd::abandoned) continue;
    act({"stray_dir", path, "a sandbox directory whose removal was cut short", false, ""},
        [&] { registry_.finish_removal(path); });
  }
  // A sandbox created since `recs` was read has its record by now (made before its cgroup,
  // mounts or runsc container): read again, or the sweep takes it for an orphan and kills it.
  for (auto& rec : registry_.list()) live.insert(rec.id);
  for (auto& path : stale_snapshot_copies(cfg_.state_dir, now, kStrayGraceMs))
    act({"snapshot_copy", path, "an unfinished snapshot copy (its snapshot was killed)", false, ""},
        [&] {
          if (path.ends_with(".mem"))
            remove_tree(path);
          else if (::unlink(path.c_str()) != 0 && errno != ENOENT)
            throw sys_error("removing " + path, errno);
        });
  for (auto& info : drivers_) {
    auto driver = info.make(cfg_);
    for (auto& what : driver->orphans(live))
      act({"orphan", what, info.name + " resource with no sandbox", false, ""}, [&] { driver->reap_orphan(what); });
    for (auto& [what, why] : driver->stale_caches(now))
      act({"cache", what, why, false, ""}, [&, what = what] {
        if (!driver->drop_cache(what, now)) throw Error(Errc::conflict, "used meanwhile; kept");
      });
  }
  return report;
}

}  // namespace sbx
