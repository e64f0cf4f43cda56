#include "backends/runsc/runsc.hpp"

#include <unistd.h>

#include <cstdlib>
#include <random>
#include <sstream>

#include "backends/common/cgroup.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx::runsc {

std::string find_binary() {
  if (const char* env = std::getenv("SBX_RUNSC"); env && *env) {
    if (::access(env, X_OK) == 0) return env;
    throw Error(Errc::not_found, std::string("SBX_RUNSC=") + env + " is not an executable").set_hint("unset SBX_RUNSC or fix the path");
  }
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/bin:/usr/local/bin:/usr/sbin";
  std::istringstream in(path);
  for (std::string dir; std::getline(in, dir, ':');) {
    if (dir.empty()) continue;
    std::string cand = dir + "/runsc";
    if (::access(cand.c_str(), X_OK) == 0) return cand;
  }
  throw Error(Errc::not_found, "runsc (gVisor) is not installed").set_hint("apt-get install runsc, or set SBX_RUNSC");
}

std::string version(const std::string& bin, bool* ok) {
  proc::RunOptions o;
  o.timeout_ms = 5000;
  auto r = proc::run({bin, "--version"}, o);
  *ok = r.status == 0;
  std::string line = r.output.substr(0, r.output.find('\n'));
  if (!*ok) return "`" + bin + " --version` failed (" + std::to_string(r.status) + "): " + line;
  return line;
}

std::string root_dir(const std::string& state_root) { return state_root + "/runsc"; }

std::vector<std::string> global_args(const std::string& bin, const std::string& root, const std::string& platform) {
  // --ignore-cgroups: this host mixes v1 controllers with a cgroup2 mount that
  // runsc mistakes for its hierarchy; sbx puts the whole runsc process tree
  // into its own cgroup instead (see driver.cpp), the same as the subprocess driver's.
  // --overlay2=none: this runsc otherwise keeps root writes in the sentry's
  // memory; sbx's own overlay (its upper on the sandbox's disk image) must take them.
  return {bin, "--root", root, "--platform", platform, "--network=none", "--host-uds=all", "--ignore-cgroups",
          "--overlay2=none"};
}

proc::RunResult call(const std::vector<std::string>& global, const std::vector<std::string>& args, int timeout_ms) {
  std::vector<std::string> argv = global;
  argv.insert(argv.end(), args.begin(), args.end());
  proc::RunOptions o;
  o.timeout_ms = timeout_ms;
  return proc::run(argv, o);
}

std::string smoke(const std::string& state_root, const std::string& platform, int timeout_ms,
                  const std::vector<std::string>& cmd) {
  std::string bin = find_binary();
  std::random_device rd;
  std::string name = "probe-" + std::to_string(rd() % 1000000);
  std::string root = root_dir(state_root) + "/" + name;
  make_dirs(root, 0700);
  // A cgroup of its own (no limits that matter) so a hung probe's sandbox and
  // gofer, which runsc detaches from its process group, are found and killed.
  Limits lim{0, 1024, 1024, 0};
  auto scope = cgroup::scope_for(state_root);
  std::string why;
  try {
    auto group = cgroup::Group::create(scope, name, lim);
    proc::RunOptions o;
    o.timeout_ms = timeout_ms;
    o.group = &group;
    std::vector<std::string> argv = {bin, "--root", root, "--platform", platform, "--network=none", "--ignore-cgroups", "do"};
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    auto r = proc::run(argv, o);
    if (r.timed_out) why = "hangs (no answer within " + std::to_string(timeout_ms / 1000) + " s; usual in nested VMs)";
    else if (r.status != 0) why = "fails (exit " + std::to_string(r.status) + "): " + r.output.substr(0, 300);
    group.destroy();
  } catch (const Error& e) {
    why = std::string("could not run the probe: ") + e.what();
  }
  cgroup::remove_scope_if_empty(scope);
  try {
    remove_tree(root);
  } catch (const Error&) {
  }
  return why;
}

// The platform verdict belongs to the host (its kernel and /dev/kvm), not to a
// state root, and the kvm probe can cost seconds: one cache per boot in /run.
std::string platform_cache(const std::string& state_root) {
  if (::access("/run", W_OK) == 0) return "/run/sbx/runsc-platform";
  return root_dir(state_root) + "/platform";
}

std::optional<Platform> cached_platform(const std::string& state_root) {
  if (const char* env = std::getenv("SBX_RUNSC_PLATFORM"); env && *env && std::string(env) != "auto")
    return choose_platform(state_root, false);
  std::string cache = platform_cache(state_root);
  auto c = read_file_if_exists(cache);
  if (!c) return std::nullopt;
  auto nl = c->find('\n');
  if (nl == std::string::npos) return std::nullopt;
  return Platform{c->substr(0, nl), c->substr(nl + 1) + " (cached in " + cache + ")"};
}

bool statx_broken(const std::string& state_root, const std::string& platform) {
  std::string cache = platform_cache(state_root);
  cache = cache.substr(0, cache.rfind('/')) + "/runsc-statx";
  if (auto c = read_file_if_exists(cache)) return *c == "broken";
  if (::access("/usr/bin/stat", X_OK) != 0) return false;  // nothing to tell by, and nothing that breaks
  std::string why = smoke(state_root, platform, 15'000, {"/usr/bin/stat", "-c", "%i", "/"});
  bool broken = why.find("Invalid argument") != std::string::npos;
  try {
    write_file_atomic(cache, broken ? "broken" : "ok", 0600, Durability::survive_process);
  } catch (const Error&) {
  }
  return broken;
}

Platform choose_platform(const std::string& state_root, bool reprobe) {
  if (const char* env = std::getenv("SBX_RUNSC_PLATFORM"); env && *env && std::string(env) != "auto") {
    std::string p = env;
    if (p != "ptrace" && p != "kvm")
      throw Error(Errc::invalid_argument, "SBX_RUNSC_PLATFORM=" + p + " is not a platform this runsc has")
          .set_hint("use ptrace, kvm or auto");
    return {p, "SBX_RUNSC_PLATFORM=" + p};
  }
  std::string cache = platform_cache(state_root);
  if (!reprobe) {
    if (auto c = read_file_if_exists(cache)) {
      auto nl = c->find('\n');
      if (nl != std::string::npos) return {c->substr(0, nl), c->substr(nl + 1) + " (cached in " + cache + ")"};
    }
  }
  Platform out;
  if (::access("/dev/kvm", R_OK | W_OK) != 0) {
    out = {"ptrace", "no usable /dev/kvm"};
  } else if (::access("/sys/module/kvm_pvm", F_OK) == 0) {
    // PVM (nested KVM) runs only PVM-patched guests: gVisor's kvm platform
    // hangs there, and a hung probe's sandbox escapes its cleanup and spins.
    out = {"ptrace", "/dev/kvm is PVM (nested), where gVisor's kvm platform hangs"};
  } else {
    std::string why = smoke(state_root, "kvm", 5000);
    out = why.empty() ? Platform{"kvm", "/dev/kvm works (smoke run passed)"}
                      : Platform{"ptrace", "kvm platform " + why};
  }
  try {
    make_dirs(cache.substr(0, cache.rfind('/')), 0700);
    write_file_atomic(cache, out.name + "\n" + out.why, 0600, Durability::survive_process);
  } catch (const Error&) {
    // Not cached: the next start probes again, slower but correct.
  }
  return out;
}

}  // namespace sbx::runsc
