#include "backends/common/own_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <catch2/catch.hpp>

#include "core/fd.hpp"
#include "tests/unit/helpers.hpp"

using sbx::Fd;
using sbx_test::TempDir;
using sbx_test::write_text;

namespace {

// A sandbox root next to a host directory a planted link points at.
struct Layout {
  TempDir dir{"owndir"};
  std::string root = dir.path + "/root", host = dir.path + "/host";
  Fd root_fd;
  Layout() {
    REQUIRE(::mkdir(root.c_str(), 0755) == 0);
    REQUIRE(::mkdir(host.c_str(), 0755) == 0);
    root_fd = Fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(root_fd);
  }
  int make(const char* d, uid_t uid, bool* replaced) { return sbx::own_dir::make(root_fd.get(), d, uid, uid, replaced); }
};

struct stat stat_of(const std::string& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st;
}

bool empty_dir(const std::string& p) {
  DIR* d = ::opendir(p.c_str());
  REQUIRE(d != nullptr);
  int n = 0;
  while (dirent* e = ::readdir(d))
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
  ::closedir(d);
  return n == 0;
}

}  // namespace

TEST_CASE("own_dir::make makes each missing component and hands over the new ones and the last", "[own_dir]") {
  Layout l;
  REQUIRE(::mkdir((l.root + "/tmp").c_str(), 0755) == 0);  // the image's, stays the image's
  bool replaced = true;
  REQUIRE(l.make("/tmp/w/deep", 4242, &replaced) == 0);
  CHECK_FALSE(replaced);
  CHECK(stat_of(l.root + "/tmp").st_uid == 0);
  CHECK(stat_of(l.root + "/tmp/w").st_uid == 4242);
  CHECK(stat_of(l.root + "/tmp/w/deep").st_uid == 4242);
  CHECK((stat_of(l.root + "/tmp/w/deep").st_mode & 07777) == 0755);
  // Again (a restart): nothing fails, the last is handed over again.
  REQUIRE(::chown((l.root + "/tmp/w/deep").c_str(), 0, 0) == 0);
  REQUIRE(l.make("/tmp/w/deep", 4242, &replaced) == 0);
  CHECK(stat_of(l.root + "/tmp/w/deep").st_uid == 4242);
}

TEST_CASE("own_dir::make never follows a planted link, wherever it sits", "[own_dir]") {
  Layout l;
  REQUIRE(::mkdir((l.root + "/tmp").c_str(), 0755) == 0);
  const char* where = GENERATE("/tmp/w", "/tmp/w/deep");
  if (std::string(where) == "/tmp/w/deep") REQUIRE(::mkdir((l.root + "/tmp/w").c_str(), 0755) == 0);
  REQUIRE(::symlink(l.host.c_str(), (l.root + where).c_str()) == 0);
  bool replaced = false;
  REQUIRE(l.make("/tmp/w/deep", 4242, &replaced) == 0);
  CHECK(replaced);
  CHECK(empty_dir(l.host));
  CHECK(stat_of(l.host).st_uid == 0);
  CHECK(S_ISLNK(stat_of(l.root + where).st_mode));  // the sandbox's link stays
}

TEST_CASE("own_dir::make leaves a file where a directory belongs", "[own_dir]") {
  Layout l;
  write_text(l.root + "/tmp", "not a dir\n");
  bool replaced = false;
  REQUIRE(l.make("/tmp", 4242, &replaced) == 0);
  CHECK(replaced);
  CHECK(stat_of(l.root + "/tmp").st_uid == 0);
}

TEST_CASE("own_dir::make refuses . and .. and hands over the root for /", "[own_dir]") {
  Layout l;
  bool replaced = false;
  CHECK(l.make("/tmp/../host", 4242, &replaced) == EINVAL);
  CHECK(empty_dir(l.host));
  CHECK(l.make("/./tmp", 4242, &replaced) == EINVAL);
  CHECK(l.make("/", 4242, &replaced) == 0);
  CHECK(stat_of(l.root).st_uid == 4242);
  CHECK(l.make("/x", static_cast<uid_t>(-1), &replaced) == 0);  // -1: made, not handed over
  CHECK(stat_of(l.root + "/x").st_uid == 0);
}
