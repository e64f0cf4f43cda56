#include "core/fsutil.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "tests/unit/helpers.hpp"

using sbx_test::TempDir;
using sbx_test::write_text;

namespace {
unsigned mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  REQUIRE(S_ISDIR(st.st_mode));
  return st.st_mode & 07777;
}
}  // namespace

TEST_CASE("make_dirs makes every missing part with the mode, and is idempotent") {
  TempDir t{"fsutil"};
  ::umask(022);
  std::string deep = t.path + "/a/b/c";
  sbx::make_dirs(deep, 0700);
  for (auto* part : {"/a", "/a/b", "/a/b/c"}) CHECK(mode_of(t.path + part) == 0700);
  sbx::make_dirs(deep, 0755);  // already there: left as it is
  CHECK(mode_of(deep) == 0700);
  sbx::make_dirs(t.path + "/a/b/d/", 0711);  // a trailing slash
  CHECK(mode_of(t.path + "/a/b/d") == 0711);
}

TEST_CASE("make_dirs names the path when a part is a file") {
  TempDir t{"fsutil"};
  write_text(t.path + "/file", "x");
  try {
    sbx::make_dirs(t.path + "/file/sub/dir", 0700);
    FAIL("no error");
  } catch (const sbx::Error& e) {
    CHECK(std::string(e.what()).find(t.path + "/file/sub") != std::string::npos);
  }
}

// A /proc scan (the deno cache's gc, the micro-VM's monitors, the DNS
// forwarder's check) races every exit. The read after a successful open of a
// process that has just exited fails with ESRCH, which used to end `sbx serve`
// ("cannot read /proc/N/cmdline: No such process", seen in CI).
TEST_CASE("proc_cmdline: a process that exits meanwhile is gone, not an error") {
  auto self = sbx::proc_cmdline(std::to_string(::getpid()));
  REQUIRE(self);
  CHECK(!self->empty());
  CHECK_FALSE(sbx::proc_cmdline("999999999"));
  // Children that exit at once, read while they go: whatever the timing, never an exception.
  for (int i = 0; i < 300; ++i) {
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) ::_exit(0);
    CHECK_NOTHROW(sbx::proc_cmdline(std::to_string(child)));
    int status;
    ::waitpid(child, &status, 0);
    CHECK_FALSE(sbx::proc_cmdline(std::to_string(child)));
  }
}

TEST_CASE("write_file_atomic replaces a file whole and leaves no temp file, in both durabilities") {
  TempDir t{"fsutil"};
  for (auto durability : {sbx::Durability::survive_process, sbx::Durability::survive_crash}) {
    std::string path = t.path + "/record.json";
    ::unlink(path.c_str());
    sbx::write_file_atomic(path, "first", 0600, durability);  // no target yet: a plain rename
    // A reader that opened the old file keeps reading it whole (a swap, or a rename over it).
    FILE* reader = std::fopen(path.c_str(), "r");
    REQUIRE(reader);
    sbx::write_file_atomic(path, "second, longer", 0600, durability);
    char buf[32] = {};
    CHECK(std::string(buf, std::fread(buf, 1, sizeof buf, reader)) == "first");
    std::fclose(reader);
    CHECK(sbx::read_file_if_exists(path).value_or("") == "second, longer");
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    CHECK(sbx::dir_entries(t.path) == std::vector<std::string>{"record.json"});
  }
}
