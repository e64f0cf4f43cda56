#include "core/pool.hpp"

#include <set>

#include "core/agent_client.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/images.hpp"
#include "core/local_backend.hpp"
#include "core/snapshots.hpp"

namespace sbx {

namespace {
// A pooled sandbox must answer a ping this fast to be handed out; a healthy agent takes microseconds.
constexpr int kClaimPingMs = 500;
// How long a driver's probe result is trusted.
constexpr auto kProbeTtl = std::chrono::seconds(10);
// A pool start older than this has crashed; gc's stray rules take it from there.
constexpr int64_t kStartingGraceMs = 120'000;

bool same_limits(const Limits& a, const Limits& b) {
  return a.cpus == b.cpus && a.memory_mb == b.memory_mb && a.pids == b.pids && a.disk_mb == b.disk_mb;
}

bool snapshot_pool(const std::string& key) { return key.rfind(kSnapshotPoolPrefix, 0) == 0; }

// The workdir of a claim that asked for one below the pool's: made by the
// agent (mkdir -p, one level at a time; existing levels are kept).
void make_workdir(AgentClient& agent, const std::string& workdir) {
  FileEntry dir;
  dir.type = "dir";
  dir.mode = 0755;
  for (size_t pos = 1; pos <= workdir.size(); ++pos) {
    pos = std::min(workdir.find('/', pos), workdir.size());
    std::string part = workdir.substr(0, pos);
    if (part.size() > 1) agent.write_entry(part, dir, nullptr);
  }
}
}  // namespace

SandboxSpec pool_spec(const std::string& key, const Config& cfg, const DriverTable& drivers) {
  SandboxSpec s;
  if (snapshot_pool(key)) {
    // What `create --from NAME` asks for (LocalBackend::apply_snapshot).
    start_on_snapshot(s, SnapshotStore(cfg.state_dir).get(key.substr(kSnapshotPoolPrefix.size())));
  } else {
    s.driver = key;
    // The image creates get when they name none, resolved as create resolves it.
    s.image = images::resolve("", s.driver, cfg, drivers);
  }
  // The network creates will ask for by default, or no claim would ever fit.
  if (auto* info = find_driver(drivers, s.driver); info && info->network_jail) s.network = cfg.default_network;
  s = normalize_spec(s, cfg, drivers);
  // Never collected for idleness or age while pooled; a claim sets the caller's values.
  s.idle_timeout_s = 0;
  s.ttl_s = 0;
  return s;
}

PoolFit pool_fit(const SandboxSpec& want, const SandboxSpec& pooled) {
  if (want.driver != pooled.driver || want.image != pooled.image || want.network != pooled.network ||
      want.from_snapshot != pooled.from_snapshot)
    return PoolFit::none;
  // The disk cap is the size of the sandbox's own disk image, made when it started.
  if (want.limits.disk_mb != pooled.limits.disk_mb) return PoolFit::none;
  // Elsewhere the sandbox's root (without capabilities once the agent serves)
  // may not be allowed to create it; the pool's own workdir is the sandbox's.
  const std::string& base = pooled.workdir;
  bool under = want.workdir == base || (want.workdir.size() > base.size() && want.workdir.compare(0, base.size(), base) == 0 &&
                                        (base == "/" || want.workdir[base.size()] == '/'));
  if (!under) return PoolFit::none;
  return same_limits(want.limits, pooled.limits) ? PoolFit::exact : PoolFit::set_limits;
}

Pool::Pool(const Config& cfg, const DriverTable& drivers, Registry& registry,
           std::function<bool(const SandboxRecord&)> alive)
    : cfg_(cfg), drivers_(drivers), registry_(registry), alive_(std::move(alive)) {}

uint64_t Pool::size_of(const std::string& key) const {
  auto it = cfg_.pool_sizes.find(key);
  return it == cfg_.pool_sizes.end() ? 0 : it->second;
}

bool Pool::may_serve(const SandboxSpec& want) const {
  if (want.from_snapshot.empty()) return size_of(want.driver) > 0;
  for (auto& [key, n] : cfg_.pool_sizes)
    if (n > 0 && snapshot_pool(key)) return true;
  return false;
}

std::string Pool::key_of(const SandboxSpec& spec, std::map<std::string, std::optional<SandboxSpec>>& specs) {
  for (auto& [key, n] : cfg_.pool_sizes) {
    // A driver's pool holds sandboxes on its image alone; a snapshot's, on the snapshot's files.
    bool kind = snapshot_pool(key) ? !spec.from_snapshot.empty() : key == spec.driver && spec.from_snapshot.empty();
    if (!kind) continue;
    auto it = specs.find(key);
    if (it == specs.end()) {
      std::optional<SandboxSpec> made;
      if (usable(key, nullptr)) {
        try {
          made = pool_spec(key, cfg_, drivers_);
        } catch (const Error&) {
          // Removed since usable() looked: no sandbox is this pool's.
        }
      }
      it = specs.emplace(key, std::move(made)).first;
    }
    if (it->second && pool_fit(*it->second, spec) == PoolFit::exact && it->second->workdir == spec.workdir) return key;
  }
  return "";
}

bool Pool::usable(const std::string& key, std::string* why) {
  // The manager's API threads and its refiller share one Pool.
  std::lock_guard lock(usable_mu_);
  auto now = std::chrono::steady_clock::now();
  auto [entry, fresh] = usable_.try_emplace(key);
  if (fresh || now - entry->second.at > kProbeTtl) {
    entry->second = {"", now};
    std::string& why_not = entry->second.why;
    std::string driver = key;
    if (snapshot_pool(key)) {
      try {
        driver = SnapshotStore(cfg_.state_dir).get(key.substr(kSnapshotPoolPrefix.size())).spec.driver;
      } catch (const Error& e) {
        why_not = e.what();
      }
    }
    auto* info = find_driver(drivers_, driver);
    if (why_not.empty() && !info) why_not = "no driver named '" + driver + "' (drivers: " + driver_names(drivers_) + ")";
    if (why_not.empty()) {
      for (auto& p : info->probe(cfg_, false))
        if (!p.ok && !p.advisory) {
          why_not = p.name + ": " + p.detail + (p.remedy.empty() ? "" : " (" + p.remedy + ")");
          break;
        }
    }
    if (why_not.empty()) {
      try {
        pool_spec(key, cfg_, drivers_);
      } catch (const Error& e) {
        why_not = std::string("its default spec is invalid: ") + e.what();
      }
    }
  }
  if (why) *why = entry->second.why;
  return entry->second.why.empty();
}

void Pool::destroy_locked(const SandboxRecord& rec, Driver& driver) {
  try {
    driver.destroy(rec, registry_.dir(rec.id));
    registry_.remove(rec.id);
  } catch (const Error&) {
    // Left for gc: what it cannot free it reports.
  }
}

std::optional<SandboxRecord> Pool::claim(const SandboxSpec& want, Driver& driver) {
  // No pool configured: not even a registry listing on the cold path.
  if (!may_serve(want)) return std::nullopt;
  // A taken name is refused before a pooled sandbox is changed for nothing.
  registry_.check_name_free(want);
  for (auto& listed : registry_.list()) {
    if (listed.state != SandboxState::pooled || pool_fit(want, listed.spec) == PoolFit::none) continue;
    // Non-blocking: another claimer (or gc) holds it; the next one will do.
    Fd guard = registry_.try_lock(listed.id);
    if (!guard) continue;
    auto cur = registry_.find(listed.id);
    if (!cur || cur->state != SandboxState::pooled) continue;  // claimed or removed meanwhile
    SandboxRecord rec = std::move(*cur);
    std::optional<AgentClient> agent;
    try {
      if (!driver.alive(rec)) throw Error(Errc::unavailable, "its agent is gone");
      agent.emplace(driver.connect(rec, registry_.dir(rec.id)));
      agent->ping(kClaimPingMs);
    } catch (const Error&) {
      destroy_locked(rec, driver);
      continue;
    }
    try {
      if (pool_fit(want, rec.spec) == PoolFit::set_limits && !driver.set_limits(rec, want.limits))
        return std::nullopt;  // this driver cannot change caps: every pooled one would need it
      if (want.workdir != rec.spec.workdir) make_workdir(*agent, want.workdir);
    } catch (const Error&) {
      // Half-changed (some caps written): no longer what the pool promised.
      destroy_locked(rec, driver);
      return std::nullopt;
    }
    rec.spec = want;  // the caller's name too
    rec.state = SandboxState::running;
    rec.from_pool = true;
    rec.created_ms = now_ms();  // age and TTL count from the caller's create
    if (want.name.empty()) {
      registry_.save(rec);
    } else {
      try {
        registry_.save_named(rec);
      } catch (const Error&) {
        // A concurrent create took the name since the check above; this
        // sandbox may wear the caller's caps already, so the pool cannot keep it.
        destroy_locked(rec, driver);
        throw;
      }
    }
    registry_.touch(rec.id);
    return rec;
  }
  return std::nullopt;
}

std::map<std::string, std::string> Pool::unwanted(const std::vector<SandboxRecord>& recs) {
  std::map<std::string, std::string> out;
  std::map<std::string, uint64_t> kept;
  std::map<std::string, std::optional<SandboxSpec>> specs;
  for (auto& r : recs) {
    if (r.state != SandboxState::pooled) continue;
    const std::string& d = r.spec.driver;
    auto* info = find_driver(drivers_, d);
    if (!info) continue;  // another build's sandbox: not ours to judge
    std::string why;
    if (!alive_(r)) {
      out[r.id] = "its agent is gone";
      continue;
    }
    if (!usable(d, &why)) {
      out[r.id] = "pooled, but the " + d + " driver is unusable: " + why;
      continue;
    }
    std::string key = key_of(r.spec, specs);
    if (key.empty() && r.spec.from_snapshot.empty() && !cfg_.pool_sizes.count(d)) key = d;  // no pool of d at all
    if (key.empty()) {
      out[r.id] = "pooled with settings the pool no longer uses";
    } else if (kept[key] >= size_of(key)) {
      out[r.id] = "pooled beyond the " + key + " pool size of " + std::to_string(size_of(key));
    } else {
      ++kept[key];
    }
  }
  return out;
}

Fd Pool::take_turn() { return lock_file(registry_.root() + "/pool.lock"); }

PoolFillReport Pool::fill(const PoolStarter& start, Fd turn) {
  PoolFillReport report;
  if (!turn) turn = take_turn();
  auto recs = registry_.list();
  auto drop = unwanted(recs);
  int64_t now = now_ms();
  for (auto& [key, size] : cfg_.pool_sizes) {
    if (size == 0) continue;
    std::string why;
    SandboxSpec spec;
    try {
      if (!usable(key, &why)) throw Error(Errc::unavailable, why);
      spec = pool_spec(key, cfg_, drivers_);
    } catch (const Error& e) {
      report.errors.emplace_back(key, e.what());
      continue;
    }
    uint64_t have = 0;
    for (auto& r : recs) {
      if (!r.from_pool || r.spec.driver != spec.driver || r.spec.from_snapshot != spec.from_snapshot || drop.count(r.id))
        continue;
      if (r.state == SandboxState::pooled || (r.state == SandboxState::creating && now - r.created_ms < kStartingGraceMs))
        ++have;
    }
    for (; have < size; ++have) {
      try {
        report.started.push_back(start(spec).id);
      } catch (const Error& e) {
        report.errors.emplace_back(key, e.what());
        break;  // the next start would most likely fail the same way
      }
    }
  }
  return report;
}

std::vector<PoolStatus> Pool::status() {
  auto recs = registry_.list();
  auto drop = unwanted(recs);
  std::map<std::string, PoolStatus> by;
  std::map<std::string, std::optional<SandboxSpec>> specs;
  for (auto& [d, n] : cfg_.pool_sizes) by[d].size = n;
  int64_t now = now_ms();
  for (auto& r : recs) {
    if (!r.from_pool) continue;
    // A sandbox no pool starts now (stale) shows under its driver.
    std::string key = key_of(r.spec, specs);
    if (key.empty()) key = r.spec.driver;
    if (r.state == SandboxState::pooled) {
      auto& s = by[key];
      if (drop.count(r.id)) ++s.stale;
      else ++s.ready;
    } else if (r.state == SandboxState::creating && now - r.created_ms < kStartingGraceMs) {
      ++by[key].starting;
    }
  }
  std::vector<PoolStatus> out;
  for (auto& [d, s] : by) {
    s.driver = d;
    if (s.size) usable(d, &s.problem);
    out.push_back(s);
  }
  return out;
}

}  // namespace sbx
