// Pruning the deno driver's per-host cache (backends/deno/cache_prune.cpp) on
// a real directory, with ages set by utimensat and a real process whose
// command line names one staged agent, as a running sandbox's deno does.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "backends/deno/cache_prune.hpp"
#include "core/fsutil.hpp"
#include "tests/temp_dir.hpp"
#include "tests/unit/helpers.hpp"

namespace {

constexpr int64_t kDay = 86400;

void age(const std::string& path, int64_t now_s, int64_t days) {
  timespec t[2] = {{now_s - days * kDay, 0}, {now_s - days * kDay, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), t, AT_SYMLINK_NOFOLLOW) == 0);
}

// An entry `days` old: a directory with a file in it, or a file.
void entry(const std::string& path, int64_t now_s, int64_t days, bool dir = true) {
  if (dir) {
    sbx::make_dirs(path, 0755);
    sbx_test::write_text(path + "/f", "x");
  } else {
    sbx_test::write_text(path, "x");
  }
  age(path, now_s, days);
}

std::set<std::string> stale_names(const std::string& cache, int64_t now_s) {
  std::set<std::string> out;
  for (auto& e : sbx::deno::stale_cache_entries(cache, now_s)) out.insert(e.path.substr(cache.size() + 1));
  return out;
}

}  // namespace

TEST_CASE("deno cache prune: a family goes with its staged agent, a week unused", "[deno]") {
  sbx_test::TempDir tmp("denocache");
  const std::string c = tmp.path;
  const int64_t now = ::time(nullptr);
  entry(c + "/agent-aaa", now, 30);  // an old version's family
  entry(c + "/emit-aaa-1", now, 30);
  entry(c + "/v8-aaa-2", now, 30);
  entry(c + "/v8-aaa-3.tmp", now, 30);  // a killed make's leftover
  entry(c + "/agent-bbb", now, 1);      // staged yesterday: all of it stays,
  entry(c + "/v8-bbb-4", now, 30);      // however old its own members are
  entry(c + "/emit-0123456789abcdef", now, 8);  // an older build's naming
  entry(c + "/v8-fedcba9876543210", now, 2);
  entry(c + "/pyodide-1-2-old.snap", now, 9, false);
  entry(c + "/pyodide-1-2-new.snap", now, 3, false);
  sbx_test::write_text(c + "/.agent.lock", "");
  age(c + "/.agent.lock", now, 100);

  CHECK(stale_names(c, now) == std::set<std::string>{"agent-aaa", "emit-aaa-1", "v8-aaa-2", "v8-aaa-3.tmp",
                                                     "emit-0123456789abcdef", "pyodide-1-2-old.snap"});
  for (auto& e : sbx::deno::stale_cache_entries(c, now))
    CHECK(sbx_test::contains(e.reason, "deno cache:"));
  // Staged again (a create of that version): the family is used, and stays.
  CHECK(sbx::deno::use_cache_entry(c + "/agent-aaa", c + "/.agent.lock"));
  CHECK(stale_names(c, now) == std::set<std::string>{"emit-0123456789abcdef", "pyodide-1-2-old.snap"});
  CHECK_FALSE(sbx::deno::use_cache_entry(c + "/agent-zzz", c + "/.agent.lock"));
}

TEST_CASE("deno cache prune: what a running process names stays, whatever its age", "[deno]") {
  sbx_test::TempDir tmp("denocache");
  const std::string c = tmp.path;
  const int64_t now = ::time(nullptr);
  entry(c + "/agent-ccc", now, 60);
  entry(c + "/v8-ccc-1", now, 60);
  entry(c + "/pyodide-9-9-x.snap", now, 60, false);
  // A sandbox's deno started two months ago names its agent and snapshot.
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::string agent = c + "/agent-ccc/agent.ts", snap = c + "/pyodide-9-9-x.snap";
    ::execl("/bin/sh", "sh", "-c", "sleep 30", agent.c_str(), "--snapshot", snap.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Its command line is the shell's once it has exec'd.
  for (int i = 0; i < 200 && !sbx_test::contains(sbx::read_file("/proc/" + std::to_string(pid) + "/cmdline"), "agent-ccc"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(stale_names(c, now).empty());
  CHECK_FALSE(sbx::deno::drop_cache_entry(c, c + "/agent-ccc", now));
  CHECK(sbx_test::exists(c + "/agent-ccc/f"));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);

  // Gone with it: gc drops each entry, and judges it again first.
  CHECK(stale_names(c, now) == std::set<std::string>{"agent-ccc", "v8-ccc-1", "pyodide-9-9-x.snap"});
  for (auto& e : sbx::deno::stale_cache_entries(c, now)) CHECK(sbx::deno::drop_cache_entry(c, e.path, now));
  CHECK_FALSE(sbx_test::exists(c + "/agent-ccc"));
  CHECK_FALSE(sbx_test::exists(c + "/pyodide-9-9-x.snap"));
  CHECK_THROWS(sbx::deno::drop_cache_entry(c, "/etc/passwd", now));
  CHECK_THROWS(sbx::deno::drop_cache_entry(c, c + "/.agent.lock", now));
}

TEST_CASE("deno cache prune: the family of a staged agent's path", "[deno]") {
  CHECK(sbx::deno::cache_family("/var/cache/sbx/deno/agent-0f8037266cf99f6e") == "0f8037266cf99f6e");
  CHECK(sbx::deno::cache_family("/usr/libexec/sbx/sbx-agent-deno") == "");
}
