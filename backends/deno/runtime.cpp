#include "backends/deno/runtime.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "backends/common/process.hpp"
#include "backends/deno/cache_prune.hpp"
#include "core/agent_binary.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx::deno {

namespace {

std::string package_version(const std::string& dir) {
  auto text = read_file_if_exists(dir + "/package.json");
  if (!text) return "?";
  auto j = nlohmann::json::parse(*text, nullptr, false);
  return j.is_object() ? j.value("version", "?") : "?";
}

int64_t mtime_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? int64_t{st.st_mtim.tv_sec} : 0;
}

// FNV-1a: a stable short name for content, for cache entries.
std::string fnv_hex(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// Directories 0755 and files 0644 under `root`, whatever the umask was: read
// by every sandbox's uid, written by none.
void make_tree_readable(const std::string& root) {
  ::nftw(
      root.c_str(),
      [](const char* p, const struct stat* st, int type, FTW*) {
        ::chmod(p, type == FTW_D || type == FTW_DP ? 0755 : (st->st_mode & 0111) | 0644);
        return 0;
      },
      16, FTW_PHYS);
}

// The runtime is npm's, not Debian's: neither the sources nor the package ship
// it, both have the one command that installs it (the package's beside sbx-agent).
std::string install_hint() {
  std::string here = sbx_binary_dir();
  std::string installed = here.empty() ? "" : here + "/../libexec/sbx/setup-deno.sh";
  char real[PATH_MAX];
  std::string cmd = !installed.empty() && ::realpath(installed.c_str(), real) ? std::string(real) : "scripts/setup-deno.sh";
  return "run " + cmd + " (npm installs the pinned deno and pyodide; not Debian packages), or point SBX_DENO_HOME at its prefix";
}

}  // namespace

Runtime find_runtime() {
  Runtime rt;
  const char* env = std::getenv("SBX_DENO_HOME");
  rt.home = env && *env ? env : SBX_DENO_HOME;
  const std::string mods = rt.home + "/node_modules";
#if defined(__aarch64__)
  const std::string platform = "linux-arm64-glibc";
#else
  const std::string platform = "linux-x64-glibc";
#endif
  for (const std::string& p : {mods + "/@deno/" + platform + "/deno", mods + "/.bin/deno"})
    if (::access(p.c_str(), X_OK) == 0) {
      rt.deno = p;
      break;
    }
  if (rt.deno.empty())
    throw Error(Errc::not_found, "deno not found under " + mods).set_hint(install_hint());
  rt.pyodide = mods + "/pyodide/";
  if (!path_exists(rt.pyodide + "pyodide.mjs") || !path_exists(rt.pyodide + "pyodide.asm.wasm"))
    throw Error(Errc::not_found, "pyodide not found at " + rt.pyodide).set_hint(install_hint());
  rt.version = "deno " + package_version(mods + "/deno") + ", pyodide " + package_version(mods + "/pyodide");

  std::string tried;
  auto agent_at = [&](const std::string& d) {
    tried += (tried.empty() ? "" : ", ") + d;
    return path_exists(d + "/agent.ts");
  };
  const char* agent_env = std::getenv("SBX_DENO_AGENT");
  std::string here = sbx_binary_dir();
  for (const std::string& d : {std::string(agent_env ? agent_env : ""), here.empty() ? "" : here + "/sbx-agent-deno",
                               here.empty() ? "" : here + "/../libexec/sbx/sbx-agent-deno",
                               std::string(SBX_LIBEXECDIR) + "/sbx-agent-deno"}) {
    if (!d.empty() && agent_at(d)) {
      rt.agent = d;
      break;
    }
  }
  if (rt.agent.empty())
    throw Error(Errc::not_found, "the deno agent (agent.ts) was not found (looked in " + tried + ")")
        .set_hint("build sbx (it copies agent-deno/ beside the binary), install it with `cmake --install`, or set SBX_DENO_AGENT");
  return rt;
}

std::string ensure_snapshot(const Runtime& rt, const std::string& cache_dir, std::string* why) {
  // Named after what it was made from: a new deno or pyodide makes a new one.
  std::string name = "pyodide-" + std::to_string(mtime_of(rt.pyodide + "pyodide.asm.wasm")) + "-" +
                     std::to_string(mtime_of(rt.deno)) + "-" +
                     fnv_hex(read_file(rt.agent + "/snapshot.ts") + '\0' + read_file(rt.agent + "/py_runner.ts")) + ".snap";
  std::string path = cache_dir + "/" + name;
  if (use_cache_entry(path, cache_dir + "/.snapshot.lock")) return path;
  make_dirs(cache_dir, 0755);
  Fd lock = lock_file(cache_dir + "/.snapshot.lock");
  if (path_exists(path)) return path;  // another sbx made it while we waited
  proc::RunOptions opts;
  opts.timeout_ms = 120'000;
  auto r = proc::run({rt.deno, "run", "--quiet", "--no-prompt", "--allow-read=" + rt.pyodide + "," + cache_dir,
                      "--allow-write=" + cache_dir, rt.agent + "/snapshot.ts", rt.pyodide, path},
                     opts);
  if (r.status != 0 || !path_exists(path)) {
    if (why) *why = "making the Pyodide snapshot failed (exit " + std::to_string(r.status) + "): " + r.output;
    return "";
  }
  return path;
}

std::string ensure_transpiled(const Runtime& rt, const std::string& cache_dir, std::string* why) {
  // rt.agent is the staged copy, named after its content (and the emit is
  // found by that path); a new deno may transpile differently.
  // Its family's hash first: gc drops it with the staged agent (cache_prune.hpp).
  std::string dir = cache_dir + "/emit-" + cache_family(rt.agent) + "-" +
                    fnv_hex(rt.agent + '\0' + std::to_string(mtime_of(rt.deno)));
  std::string path = dir + "/gen/file";
  if (path_exists(path)) return path;
  make_dirs(cache_dir, 0755);
  Fd lock = lock_file(cache_dir + "/.emit.lock");
  if (path_exists(path)) return path;
  std::string tmp = dir + ".tmp";
  remove_tree(tmp);
  make_dirs(tmp, 0755);
  proc::RunOptions opts;
  opts.timeout_ms = 60'000;
  auto r = proc::run({"/usr/bin/env", "DENO_DIR=" + tmp, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1", rt.deno, "cache",
                      "--quiet", "--no-config", rt.agent + "/agent.ts", rt.agent + "/js_worker.ts", rt.agent + "/py_worker.ts"},
                     opts);
  if (r.status != 0 || !path_exists(tmp + "/gen/file")) {
    if (why) *why = "transpiling the deno agent ahead failed (exit " + std::to_string(r.status) + "): " + r.output;
    remove_tree(tmp);
    return "";
  }
  make_tree_readable(tmp);
  if (::rename(tmp.c_str(), dir.c_str()) != 0) throw sys_error("installing the transpiled agent in " + dir, errno);
  return path;
}

std::string ensure_code_cache(const Runtime& rt, const std::string& cache_dir, const std::string& snapshot,
                              const std::string& v8_flags, std::string* why) {
  std::string dir = cache_dir + "/v8-" + cache_family(rt.agent) + "-" + fnv_hex(rt.agent + '\0' + snapshot + '\0' + v8_flags + '\0' +
                                                 std::to_string(mtime_of(rt.deno)));
  if (path_exists(dir)) return dir;
  make_dirs(cache_dir, 0755);
  Fd lock = lock_file(cache_dir + "/.v8.lock");
  if (path_exists(dir)) return dir;
  // The run's DENO_DIR becomes the cache; its socket and store go beside it.
  const std::string tmp = dir + ".tmp", run = dir + ".run";
  for (const std::string& d : {tmp, run}) {
    remove_tree(d);
    make_dirs(d, 0755);
  }
  std::string read = "--allow-read=" + rt.pyodide + "," + rt.agent + "," + run;
  if (!snapshot.empty()) read += "," + snapshot;
  std::vector<std::string> argv = {"/usr/bin/env", "DENO_DIR=" + tmp, "HOME=" + run, "NO_COLOR=1",
                                   "DENO_NO_UPDATE_CHECK=1", rt.deno, "run", "--quiet", "--no-prompt", "--no-config",
                                   "--no-npm", "--no-remote", "--unstable-worker-options", "--v8-flags=" + v8_flags,
                                   read, "--allow-write=" + run, "--allow-net=unix:" + run + "/agent.sock",
                                   rt.agent + "/agent.ts", "--socket", run + "/agent.sock", "--store",
                                   run + "/store.db", "--pyodide", rt.pyodide, "--exit-when-warm"};
  if (!snapshot.empty()) argv.insert(argv.end(), {"--snapshot", snapshot});
  proc::RunOptions opts;
  opts.timeout_ms = 60'000;
  auto r = proc::run(argv, opts);
  remove_tree(run);
  if (r.status != 0) {
    if (why) *why = "warming the deno agent's code cache failed (exit " + std::to_string(r.status) + "): " + r.output;
    remove_tree(tmp);
    return "";
  }
  make_tree_readable(tmp);
  if (::rename(tmp.c_str(), dir.c_str()) != 0) throw sys_error("installing the code cache in " + dir, errno);
  return dir;
}

void seed_code_cache(const std::string& from, const std::string& to, uid_t uid) {
  DIR* d = ::opendir(from.c_str());
  if (!d) throw sys_error("opening " + from, errno);
  std::vector<std::string> names;
  while (auto* e = ::readdir(d)) {
    std::string n = e->d_name;
    // SQLite files and their write-ahead logs; the shared-memory index is rebuilt from the log.
    if (e->d_type == DT_REG && !(n.size() > 4 && n.compare(n.size() - 4, 4, "-shm") == 0)) names.push_back(n);
  }
  ::closedir(d);
  for (auto& n : names) {
    std::string data = read_file(from + "/" + n);
    const std::string path = to + "/" + n;
    Fd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!out) throw sys_error("creating " + path, errno);
    write_all(out.get(), data);
    if (::geteuid() == 0 && ::fchown(out.get(), uid, uid) != 0) throw sys_error("chown " + path, errno);
  }
}

std::string cache_dir() {
  if (const char* env = std::getenv("SBX_DENO_CACHE"); env && *env) return env;
  if (::geteuid() == 0) return "/var/cache/sbx/deno";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/sbx/deno";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/sbx/deno";
}

std::string stage_agent(const Runtime& rt, const std::string& cache) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(rt.agent.c_str())) {
    while (auto* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 3 && n.substr(n.size() - 3) == ".ts") names.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> texts;
  std::string all;
  for (auto& n : names) {
    texts.push_back(read_file(rt.agent + "/" + n));
    all += n + '\0' + texts.back();
  }
  std::string dir = cache + "/agent-" + fnv_hex(all);
  // Marked used (its mtime) under the lock gc drops it under: cache_prune.hpp.
  if (use_cache_entry(dir, cache + "/.agent.lock") && path_exists(dir + "/agent.ts")) return dir;
  make_dirs(cache, 0755);
  Fd lock = lock_file(cache + "/.agent.lock");
  if (path_exists(dir + "/agent.ts")) return dir;
  std::string tmp = dir + ".tmp";
  remove_tree(tmp);
  make_dirs(tmp, 0755);
  for (size_t i = 0; i < names.size(); ++i) write_file_atomic(tmp + "/" + names[i], texts[i], 0644);
  if (::rename(tmp.c_str(), dir.c_str()) != 0) throw sys_error("installing the deno agent in " + dir, errno);
  return dir;
}

}  // namespace sbx::deno
