#include "backends/deno/cache_prune.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <string_view>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/fsutil.hpp"

namespace sbx::deno {

namespace {

constexpr const char* kAgentLock = "/.agent.lock";
constexpr const char* kSnapshotLock = "/.snapshot.lock";

// Entries, not lock files (dot files).
std::vector<std::string> names_in(const std::string& dir) {
  auto out = dir_entries(dir);
  std::erase_if(out, [](const std::string& n) { return n[0] == '.'; });
  return out;
}

// Every process's command line, NULs and all: a running deno agent names its
// staged agent (agent-H/agent.ts) and its snapshot there.
std::string command_lines() {
  std::string all;
  for (auto& n : names_in("/proc")) {
    if (n.find_first_not_of("0123456789") != std::string::npos) continue;
    if (auto text = proc_cmdline(n)) all += *text + '\n';
  }
  return all;
}

std::optional<int64_t> mtime_s(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
  return int64_t{st.st_mtim.tv_sec};
}

// emit-H-X and v8-H-X (with .tmp or .run after a killed make): H. Older
// builds named them emit-X and v8-X: "".
std::string family_of_name(const std::string& n) {
  for (std::string_view kind : {"agent-", "emit-", "v8-"}) {
    if (!n.starts_with(kind)) continue;
    std::string rest = n.substr(kind.size());
    if (kind == "agent-") return rest.substr(0, rest.find('.'));
    auto dash = rest.find('-');
    return dash == std::string::npos ? "" : rest.substr(0, dash);
  }
  return "";
}

std::string days(int64_t s) { return std::to_string(s / 86400) + " days"; }

// Why `name` may go, or nothing if it stays.
std::optional<std::string> judge(const std::string& cache, const std::string& name, int64_t now_s,
                                 const std::string& refs) {
  auto own = mtime_s(cache + "/" + name);
  if (!own) return std::nullopt;
  const bool old = now_s - *own >= kCacheUnusedS;
  const std::string fam = family_of_name(name);
  if (!fam.empty()) {
    // One family lives and goes as one: an agent staged within the week, or
    // one a running sandbox names, keeps what was made from it.
    if (refs.find("/agent-" + fam + "/") != std::string::npos) return std::nullopt;
    auto staged = mtime_s(cache + "/agent-" + fam);
    if (staged ? now_s - *staged < kCacheUnusedS : !old) return std::nullopt;
    return "deno cache: made for an agent no sandbox has used for " + days(now_s - (staged ? *staged : *own));
  }
  if (name.starts_with("pyodide-")) {
    if (!old || refs.find(cache + "/" + name) != std::string::npos) return std::nullopt;
    return "deno cache: a Pyodide snapshot no sandbox has used for " + days(now_s - *own);
  }
  if (!old) return std::nullopt;
  return "deno cache: an entry of an older build, unused for " + days(now_s - *own);
}

}  // namespace

std::string cache_family(const std::string& agent_dir) {
  auto slash = agent_dir.find_last_of('/');
  std::string base = slash == std::string::npos ? agent_dir : agent_dir.substr(slash + 1);
  return base.starts_with("agent-") ? base.substr(6) : "";
}

std::vector<StaleCacheEntry> stale_cache_entries(const std::string& cache, int64_t now_s) {
  std::vector<StaleCacheEntry> out;
  auto names = names_in(cache);
  if (names.empty()) return out;
  const std::string refs = command_lines();
  for (auto& n : names)
    if (auto why = judge(cache, n, now_s, refs)) out.push_back({cache + "/" + n, *why});
  return out;
}

bool drop_cache_entry(const std::string& cache, const std::string& path, int64_t now_s) {
  const std::string name = path.substr(path.find_last_of('/') + 1);
  if (path != cache + "/" + name || name.empty() || name[0] == '.')
    throw Error(Errc::invalid_argument, "not an entry of the deno cache " + cache + ": " + path);
  // The lock the entry's fast path takes: a create that stages it meanwhile
  // either came first (and made it fresh) or makes it anew after this.
  Fd lock = lock_file(cache + (name.starts_with("pyodide-") ? kSnapshotLock : kAgentLock));
  if (!judge(cache, name, now_s, command_lines())) return false;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return false;
  if (S_ISDIR(st.st_mode))
    remove_tree(path);
  else if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw sys_error("removing " + path, errno);
  return true;
}

bool use_cache_entry(const std::string& path, const std::string& lock) {
  if (!path_exists(path)) return false;
  // Shared, and without O_CREAT: a cache this user may only read is used as
  // it is (unmarked), and it then has its lock files already.
  Fd guard(::open(lock.c_str(), O_RDONLY | O_CLOEXEC));
  if (guard && ::flock(guard.get(), LOCK_SH) != 0) guard.reset();
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return path_exists(path);
}

}  // namespace sbx::deno
