#include "backends/common/cgroup.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx::cgroup {

namespace {
constexpr const char* kParent = "sbx";

std::set<std::string> words(const std::string& s) {
  std::set<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.insert(w);
  return out;
}

std::string v1_mount(const std::string& ctrl) {
  // cpu is often co-mounted as "cpu,cpuacct"; Debian links "cpu" to it.
  for (const std::string& cand : {"/sys/fs/cgroup/" + ctrl, std::string("/sys/fs/cgroup/cpu,cpuacct")}) {
    if (path_exists(cand + "/cgroup.procs") && (ctrl == "cpu" || cand == "/sys/fs/cgroup/" + ctrl)) return cand;
  }
  return {};
}

uint64_t counter(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string k; in >> k;) {
    uint64_t v = 0;
    in >> v;
    if (k == key) return v;
  }
  return 0;
}

// Writes the caps of one controller. On v1 the memory+swap cap may never be
// below the memory cap, so a raise writes it first and a cut writes it last.
void write_limits(const Controller& c, const std::string& p, const Limits& limits) {
  with_context("setting limits in " + p, [&] {
    if (c.name == "memory") {
      std::string bytes = std::to_string(limits.memory_mb * 1024 * 1024);
      if (c.v2) {
        write_knob(p + "/memory.max", bytes);
        if (path_exists(p + "/memory.swap.max")) write_knob(p + "/memory.swap.max", "0");
      } else {
        // Without memsw the cap would only bound RAM, and swap would let a hog go on.
        bool memsw = path_exists(p + "/memory.memsw.limit_in_bytes");
        auto now = read_file_if_exists(p + "/memory.limit_in_bytes");
        bool raise = now && std::strtoull(now->c_str(), nullptr, 10) < limits.memory_mb * 1024 * 1024;
        if (memsw && raise) write_knob(p + "/memory.memsw.limit_in_bytes", bytes);
        write_knob(p + "/memory.limit_in_bytes", bytes);
        if (memsw && !raise) write_knob(p + "/memory.memsw.limit_in_bytes", bytes);
      }
    } else if (c.name == "pids") {
      write_knob(p + "/pids.max", std::to_string(limits.pids));
    } else if (c.name == "cpu" && limits.cpus > 0) {
      const uint64_t period = cpu_period_us(limits.cpus);
      auto quota = static_cast<uint64_t>(std::llround(limits.cpus * static_cast<double>(period)));
      if (c.v2) {
        write_knob(p + "/cpu.max", std::to_string(quota) + " " + std::to_string(period));
      } else {
        write_knob(p + "/cpu.cfs_period_us", std::to_string(period));
        write_knob(p + "/cpu.cfs_quota_us", std::to_string(quota));
      }
    }
  });
}
}  // namespace

// The CFS period of a CPU cap. A sandbox that spent its quota waits out the
// rest of the period, so the period bounds that stall: under 8 clients of the
// manager, each exec's p99 was 22-25 ms at the kernel's default 100 ms, 19-20
// at 50, 15-17 at 20, for 1-4% fewer execs/s (wrk as in
// bench/manager_throughput.sh, one sandbox's period changed between rounds).
// The kernel takes no quota under 1 ms, so a cap below 0.05 CPU (sbx takes
// caps down to 0.01) gets a longer period.
uint64_t cpu_period_us(double cpus) {
  constexpr uint64_t kPeriod = 20'000, kMinQuota = 1'000, kMaxPeriod = 1'000'000;
  if (cpus * kPeriod >= kMinQuota) return kPeriod;
  return std::min<uint64_t>(kMaxPeriod, static_cast<uint64_t>(std::ceil(kMinQuota / cpus)));
}

AttachMode attach_mode(const std::string& proc_mounts) {
  AttachMode v2, v1;
  std::istringstream in(proc_mounts);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string source, mount, type, opts;
    if (!(f >> source >> mount >> type >> opts) || (type != "cgroup2" && type != "cgroup")) continue;
    if (("," + opts + ",").find(",favordynmods,") != std::string::npos) return {true, mount, opts};
    AttachMode& first = type == "cgroup2" ? v2 : v1;
    if (first.mount.empty()) first = {false, mount, opts};
  }
  return v2.mount.empty() ? v1 : v2;
}

std::vector<Controller> detect(std::string* why) {
  std::vector<Controller> out;
  std::set<std::string> v2_pure, v2_unified;
  if (auto s = read_file_if_exists("/sys/fs/cgroup/cgroup.controllers")) v2_pure = words(*s);
  if (auto s = read_file_if_exists("/sys/fs/cgroup/unified/cgroup.controllers")) v2_unified = words(*s);
  for (std::string ctrl : {"memory", "pids", "cpu"}) {
    if (v2_pure.count(ctrl)) out.push_back({ctrl, "/sys/fs/cgroup", true});
    else if (v2_unified.count(ctrl)) out.push_back({ctrl, "/sys/fs/cgroup/unified", true});
    else if (auto m = v1_mount(ctrl); !m.empty()) out.push_back({ctrl, m, false});
  }
  if (out.empty()) {
    if (why) *why = "no memory, pids or cpu cgroup controller is mounted under /sys/fs/cgroup";
    return out;
  }
  // The freezer (sbx pause) goes where the groups already are: v2 has it in
  // every group (cgroup.freeze); on v1 or a hybrid, the v1 freezer hierarchy.
  auto v2 = std::find_if(out.begin(), out.end(), [](const Controller& c) { return c.v2; });
  if (v2 != out.end()) out.push_back({"freezer", v2->root, true});
  else if (path_exists("/sys/fs/cgroup/freezer/freezer.state") || path_exists("/sys/fs/cgroup/freezer/cgroup.procs"))
    out.push_back({"freezer", "/sys/fs/cgroup/freezer", false});
  return out;
}

std::string scope_for(const std::string& state_root) {
  char real[PATH_MAX];
  std::string canonical = ::realpath(state_root.c_str(), real) ? std::string(real) : state_root;
  // FNV-1a: stable across runs and builds, and short enough for a directory name.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : canonical) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return std::string("root-") + std::string(buf, 10);
}

void remove_scope_if_empty(const std::string& scope) {
  for (auto& c : detect()) ::rmdir((c.root + "/" + kParent + "/" + scope).c_str());  // ENOTEMPTY/EBUSY: still in use
}

std::string Group::path(const Controller& c) const { return c.root + "/" + kParent + "/" + scope_ + "/" + name_; }

Group Group::open(const std::string& scope, const std::string& name) {
  Group g;
  g.scope_ = scope;
  g.name_ = name;
  g.ctrls_ = detect();
  return g;
}

Group Group::create(const std::string& scope, const std::string& name, const Limits& limits) {
  Group g = open(scope, name);
  std::string why;
  if (g.ctrls_.empty()) {
    detect(&why);
    throw Error(Errc::unavailable, "cannot apply resource limits: " + why).set_hint("run `sbx doctor`");
  }
  std::set<std::string> v2_roots_enabled;
  for (auto& c : g.ctrls_) {
    std::string top = c.root + "/" + kParent;
    std::string parent = top + "/" + scope;
    std::string p = g.path(c);
    // Another process's removal of this state root's last sandbox takes the empty
    // scope group with it (remove_scope_if_empty): made again should it go in between.
    for (int attempt = 1;; ++attempt) {
      make_dirs(parent, 0755);
      if (c.v2 && !v2_roots_enabled.count(c.root)) {
        // v2 hands controllers down only where each parent enables them.
        for (auto* dir : {c.root.c_str(), top.c_str(), parent.c_str()}) {
          for (auto& cc : g.ctrls_)
            if (cc.v2 && cc.root == c.root && cc.name != "freezer") {  // v2's freezer is in every group
              try {
                write_knob(std::string(dir) + "/cgroup.subtree_control", "+" + cc.name);
              } catch (const Error&) {
                // Already enabled, or owned by someone else: the limit write below reports it.
              }
            }
        }
        v2_roots_enabled.insert(c.root);
      }
      if (::mkdir(p.c_str(), 0755) == 0 || errno == EEXIST) break;
      if (errno != ENOENT || attempt == 5) throw sys_error("cannot create cgroup " + p, errno);
      v2_roots_enabled.erase(c.root);
    }
    write_limits(c, p, limits);
  }
  return g;
}

void Group::set_limits(const Limits& limits) const {
  for (auto& c : ctrls_) write_limits(c, path(c), limits);
}

void Group::add(pid_t pid) const {
  for (auto& c : ctrls_) write_knob(path(c) + "/cgroup.procs", std::to_string(pid));
}

std::vector<pid_t> Group::pids() const {
  for (auto& c : ctrls_) {
    auto text = read_file_if_exists(path(c) + "/cgroup.procs");
    if (!text) continue;
    std::vector<pid_t> out;
    std::istringstream in(*text);
    for (pid_t p; in >> p;) out.push_back(p);
    return out;
  }
  return {};
}

uint64_t Group::oom_kills() const {
  for (auto& c : ctrls_) {
    if (c.name != "memory") continue;
    if (auto t = read_file_if_exists(path(c) + (c.v2 ? "/memory.events" : "/memory.oom_control")))
      return counter(*t, "oom_kill");
  }
  return 0;
}

uint64_t Group::pids_limit_hits() const {
  for (auto& c : ctrls_)
    if (c.name == "pids")
      if (auto t = read_file_if_exists(path(c) + "/pids.events")) return counter(*t, "max");
  return 0;
}

const Controller* Group::freezer() const {
  for (auto& c : ctrls_)
    if (c.name == "freezer") return &c;
  return nullptr;
}

bool Group::can_freeze() const { return freezer() != nullptr; }

void Group::freeze(bool frozen) const {
  using namespace std::chrono;
  const Controller* c = freezer();
  if (!c) throw Error(Errc::unavailable, "this host has no cgroup freezer").set_hint("mount the v1 freezer or use cgroup v2");
  std::string p = path(*c);
  // v1 says FREEZING until every task stopped, v2 raises "frozen 1" in cgroup.events.
  std::string knob = c->v2 ? p + "/cgroup.freeze" : p + "/freezer.state";
  write_knob(knob, c->v2 ? (frozen ? "1" : "0") : (frozen ? "FROZEN" : "THAWED"));
  auto settled = [&] {
    if (!c->v2) {
      auto st = read_file_if_exists(knob).value_or("");
      return st.rfind(frozen ? "FROZEN" : "THAWED", 0) == 0;
    }
    auto ev = read_file_if_exists(p + "/cgroup.events").value_or("");
    return ev.find(frozen ? "frozen 1" : "frozen 0") != std::string::npos;
  };
  auto deadline = steady_clock::now() + seconds(5);
  // The v1 freezer can stay FREEZING for good when it caught a shell between
  // vfork and exec (the parent waits in kernel_clone on a child that is frozen
  // already; seen with busybox sh in a write loop, 1 pause in ~5): thawing
  // lets the child exec, and the next attempt usually catches both.
  auto retry_at = steady_clock::now() + milliseconds(200);
  for (int us = 50; !settled(); us = std::min(us * 2, 5'000)) {
    if (steady_clock::now() > deadline) {
      if (frozen && !c->v2) write_knob(knob, "THAWED");  // not left half-frozen: rm could not kill it
      throw Error(Errc::timeout, "cgroup sbx/" + scope_ + "/" + name_ + (frozen ? " did not freeze" : " did not thaw") + " within 5 s");
    }
    if (frozen && !c->v2 && steady_clock::now() > retry_at) {
      write_knob(knob, "THAWED");
      std::this_thread::sleep_for(milliseconds(1));
      write_knob(knob, "FROZEN");
      retry_at = steady_clock::now() + milliseconds(200);
      us = 50;
    }
    std::this_thread::sleep_for(microseconds(us));
  }
}

void Group::thaw_if_frozen() const {
  try {
    if (frozen()) freeze(false);
  } catch (const Error&) {
    // Gone meanwhile, or stuck: the SIGKILL sweep that follows reports what stays.
  }
}

bool Group::frozen() const {
  const Controller* c = freezer();
  if (!c) return false;
  std::string p = path(*c);
  if (!c->v2) return read_file_if_exists(p + "/freezer.state").value_or("").rfind("FROZEN", 0) == 0;
  return read_file_if_exists(p + "/cgroup.events").value_or("").find("frozen 1") != std::string::npos;
}

bool Group::exists() const {
  for (auto& c : ctrls_)
    if (path_exists(path(c))) return true;
  return false;
}

void Group::destroy() const {
  using namespace std::chrono;
  // A frozen task takes no SIGKILL until thawed on v1 (v2's cgroup.kill works
  // either way): a paused sandbox is removed as a running one is.
  thaw_if_frozen();
  for (auto& c : ctrls_) {
    std::string p = path(c);
    if (!path_exists(p)) continue;
    if (c.v2 && path_exists(p + "/cgroup.kill")) {
      try {
        write_knob(p + "/cgroup.kill", "1");
      } catch (const Error&) {
      }
    }
  }
  // Kill until empty: a process may fork between reading the list and the kill.
  auto deadline = steady_clock::now() + seconds(5);
  for (;;) {
    auto ps = pids();
    for (pid_t pid : ps) ::kill(pid, SIGKILL);
    bool removed_all = true;
    for (auto& c : ctrls_) {
      std::string p = path(c);
      if (!path_exists(p)) continue;
      if (::rmdir(p.c_str()) != 0 && errno != ENOENT) removed_all = false;
    }
    if (removed_all) return;
    if (steady_clock::now() > deadline)
      throw Error(Errc::io, "cgroup sbx/" + scope_ + "/" + name_ + " still has processes after 5 s of SIGKILL");
    // Exiting tasks leave the group within microseconds to a few milliseconds.
    std::this_thread::sleep_for(microseconds(ps.empty() ? 200 : 2000));
  }
}

std::vector<std::string> Group::list_all(const std::string& scope) {
  std::set<std::string> names;
  for (auto& c : detect()) {
    std::string parent = c.root + "/" + kParent + "/" + scope;
    if (DIR* d = ::opendir(parent.c_str())) {
      while (auto* e = ::readdir(d)) {
        if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
        names.insert(e->d_name);
      }
      ::closedir(d);
    }
  }
  return {names.begin(), names.end()};
}

}  // namespace sbx::cgroup
