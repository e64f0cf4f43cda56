#include "core/safe_path.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <string>

#include <catch2/catch.hpp>

#include "core/fd.hpp"
#include "core/fsutil.hpp"
#include "tests/unit/helpers.hpp"

using sbx::Errc;
using sbx::Fd;
using sbx_test::error_of;
using sbx_test::exists;
using sbx_test::TempDir;
using sbx_test::write_text;

namespace {

const std::string kMarker = "MARKER: this is ROOT/etc/passwd, not the host's\n";

// A root laid out like a sandbox's filesystem, with escape attempts planted in it.
struct Root {
  TempDir dir{"safepath"};
  Fd fd;
  Root() {
    REQUIRE(sbx::openat2_supported());
    mk("etc");
    write_text(dir / "etc/passwd", kMarker);
    mk("data");
    write_text(dir / "data/file.txt", "data\n");
    mk("a");
    write_text(dir / "x", "ROOT/x\n");
    link("/etc", "abs_etc");                          // absolute symlink to a host dir
    link("/etc/passwd", "abs_passwd");                // absolute symlink to a host file
    link("../../../../etc", "data/rel_up");           // relative symlink climbing out
    link("../../../../etc/passwd", "data/rel_passwd");
    link("chain2", "chain1");                         // chain: chain1 -> chain2 -> /chain3 -> ../../etc/passwd
    link("/chain3", "chain2");
    link("../../etc/passwd", "chain3");
    link("loop2", "loop1");                           // loop
    link("loop1", "loop2");
    fd.reset(::open(dir.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(fd);
  }
  void mk(const std::string& rel) const { REQUIRE(::mkdir((dir / rel).c_str(), 0755) == 0); }
  void link(const std::string& target, const std::string& rel) const {
    REQUIRE(::symlink(target.c_str(), (dir / rel).c_str()) == 0);
  }
  std::string real_root() const {
    char buf[PATH_MAX];
    REQUIRE(::realpath(dir.path.c_str(), buf) != nullptr);
    return buf;
  }
};

// The host path an fd refers to, as the kernel sees it.
std::string fd_path(int fd) {
  char buf[PATH_MAX];
  std::string link = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  REQUIRE(n > 0);
  return std::string(buf, static_cast<size_t>(n));
}

bool same_file(int fd, const std::string& path) {
  struct stat a {}, b {};
  REQUIRE(::fstat(fd, &a) == 0);
  if (::lstat(path.c_str(), &b) != 0) return false;
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

std::string read_all(const Fd& fd) { return sbx_test::read_fd(fd.get()); }

}  // namespace

TEST_CASE("safe_path: every escape attempt to /etc/passwd lands on ROOT/etc/passwd", "[safe_path]") {
  Root r;
  std::string inside = r.dir / "etc/passwd";
  auto path = GENERATE(as<std::string>{}, "/etc/passwd", "etc/passwd", "../../etc/passwd", "/../../../etc/passwd",
                       "abs_passwd", "/abs_passwd", "abs_etc/passwd", "data/rel_up/passwd", "data/rel_passwd",
                       "chain1", "data/../../../etc/passwd", "a/../../etc/passwd", "./abs_etc/../etc/passwd",
                       "abs_etc/../../abs_etc/passwd", "//etc//passwd");
  CAPTURE(path);
  Fd f = sbx::open_in_root(r.fd.get(), path, O_RDONLY);
  REQUIRE(f);
  CHECK(same_file(f.get(), inside));
  CHECK(fd_path(f.get()).rfind(r.real_root() + "/", 0) == 0);
  CHECK(read_all(f) == kMarker);
}

TEST_CASE("safe_path: a/../../x resolves to ROOT/x", "[safe_path]") {
  Root r;
  for (const char* path : {"a/../../x", "../x", "/../../../../x", "data/rel_up/../x"}) {
    CAPTURE(path);
    Fd f = sbx::open_in_root(r.fd.get(), path, O_RDONLY);
    CHECK(same_file(f.get(), r.dir / "x"));
    CHECK(read_all(f) == "ROOT/x\n");
  }
}

TEST_CASE("safe_path: links into the host fail with not_found when the target is absent in the root",
          "[safe_path]") {
  Root r;
  REQUIRE(::unlink((r.dir / "etc/passwd").c_str()) == 0);
  // /etc/passwd and /etc/hostname exist on the host; inside the root they do not.
  auto path = GENERATE(as<std::string>{}, "abs_passwd", "abs_etc/passwd", "data/rel_up/passwd", "chain1",
                       "../../etc/passwd", "abs_etc/hostname", "abs_etc/shadow");
  CAPTURE(path);
  auto e = error_of([&] { sbx::open_in_root(r.fd.get(), path, O_RDONLY); });
  CHECK(e.code() == Errc::not_found);
  CHECK(e.sys_errno() == ENOENT);
  CHECK(sbx_test::contains(e.what(), path));
}

TEST_CASE("safe_path: a directory symlink to /etc opens ROOT/etc", "[safe_path]") {
  Root r;
  for (const char* path : {"abs_etc", "data/rel_up", "abs_etc/."}) {
    CAPTURE(path);
    Fd f = sbx::open_in_root(r.fd.get(), path, O_RDONLY | O_DIRECTORY);
    CHECK(same_file(f.get(), r.dir / "etc"));
  }
}

TEST_CASE("safe_path: a symlink loop fails with ELOOP, not a hang", "[safe_path]") {
  Root r;
  auto e = error_of([&] { sbx::open_in_root(r.fd.get(), "loop1", O_RDONLY); });
  CHECK(e.sys_errno() == ELOOP);
  CHECK(e.code() == Errc::invalid_argument);
}

TEST_CASE("safe_path: O_CREAT through an escaping symlink creates inside the root", "[safe_path]") {
  Root r;
  std::string name = "sbx-test-created-" + std::to_string(::getpid());
  REQUIRE_FALSE(exists("/etc/" + name));
  {
    Fd f = sbx::open_in_root(r.fd.get(), "abs_etc/" + name, O_WRONLY | O_CREAT | O_EXCL, 0600);
    sbx::write_all(f.get(), "inside");
  }
  CHECK_FALSE(exists("/etc/" + name));
  CHECK(sbx_test::read_text(r.dir / ("etc/" + name)) == "inside");
  struct stat st {};
  REQUIRE(::stat((r.dir / ("etc/" + name)).c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
}

TEST_CASE("safe_path: O_CREAT through a dangling link to a host path stays in the root", "[safe_path]") {
  Root r;
  TempDir host{"safepath-host"};  // a real host directory the link names
  std::string victim = host / "victim";
  r.link(victim, "dangling");
  // The link's target directory does not exist inside the root: creation fails.
  auto e = error_of([&] { sbx::open_in_root(r.fd.get(), "dangling", O_WRONLY | O_CREAT, 0600); });
  CHECK(e.code() == Errc::not_found);
  CHECK_FALSE(exists(victim));
  // With the directory present inside the root, the file is created there.
  sbx::make_dirs(r.dir.path + host.path, 0755);
  {
    Fd f = sbx::open_in_root(r.fd.get(), "dangling", O_WRONLY | O_CREAT, 0600);
    sbx::write_all(f.get(), "x");
  }
  CHECK_FALSE(exists(victim));
  CHECK(sbx_test::read_text(r.dir.path + victim) == "x");
}

TEST_CASE("safe_path: O_NOFOLLOW on the final symlink refuses instead of following", "[safe_path]") {
  Root r;
  auto e = error_of([&] { sbx::open_in_root(r.fd.get(), "abs_passwd", O_RDONLY | O_NOFOLLOW); });
  CHECK(e.sys_errno() == ELOOP);
  // O_PATH | O_NOFOLLOW opens the link itself.
  Fd f = sbx::open_in_root(r.fd.get(), "abs_passwd", O_PATH | O_NOFOLLOW);
  struct stat st {};
  REQUIRE(::fstatat(f.get(), "", &st, AT_EMPTY_PATH) == 0);
  CHECK(S_ISLNK(st.st_mode));
}

TEST_CASE("safe_path: the root itself opens for empty, / and ..", "[safe_path]") {
  Root r;
  for (const char* path : {"", "/", ".", "..", "/../..", "a/../.."}) {
    CAPTURE(path);
    Fd f = sbx::open_in_root(r.fd.get(), path, O_RDONLY | O_DIRECTORY);
    CHECK(same_file(f.get(), r.dir.path));
  }
}

TEST_CASE("safe_path: a path with a NUL byte is refused, never cut short at it", "[safe_path][fuzz]") {
  // Found by tests/fuzz/fuzz_safe_path (portable walk): the component "..\0"
  // is no ".." to the walk, but openat saw "..", the directory above the root.
  Root r;
  using namespace std::string_literals;
  for (const std::string& path : {"./..\0\0\0\0/x"s, "..\0"s, "data/..\0/..\0/etc/passwd"s, "etc/passwd\0.txt"s}) {
    CAPTURE(path);
    CHECK(error_of([&] { sbx::open_in_root(r.fd.get(), path, O_RDONLY); }).code() == Errc::invalid_argument);
    CHECK(error_of([&] { sbx::open_in_root(r.fd.get(), path, O_PATH | O_DIRECTORY); }).code() ==
          Errc::invalid_argument);
    CHECK(error_of([&] { sbx::open_parent_in_root(r.fd.get(), path); }).code() == Errc::invalid_argument);
  }
}

TEST_CASE("safe_path: a link to /proc/self/root does not reach the host's root", "[safe_path]") {
  Root r;
  // The link's target is resolved inside the root, as ROOT/proc/self/root,
  // which does not exist; the host's /proc magic link is never reached.
  r.link("/proc/self/root", "procroot");
  auto e = error_of([&] { sbx::open_in_root(r.fd.get(), "procroot/etc/passwd", O_RDONLY); });
  CHECK(e.code() == Errc::not_found);
}

TEST_CASE("safe_path: open_parent_in_root returns the final component unresolved", "[safe_path]") {
  Root r;
  SECTION("a symlink as the final component is not followed") {
    auto [parent, name] = sbx::open_parent_in_root(r.fd.get(), "abs_passwd");
    CHECK(name == "abs_passwd");
    CHECK(same_file(parent.get(), r.dir.path));
    struct stat st {};
    REQUIRE(::fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0);
    CHECK(S_ISLNK(st.st_mode));
  }
  SECTION("symlinks in the parent are resolved inside the root") {
    auto [parent, name] = sbx::open_parent_in_root(r.fd.get(), "abs_etc/passwd");
    CHECK(name == "passwd");
    CHECK(same_file(parent.get(), r.dir / "etc"));
    Fd f(::openat(parent.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    REQUIRE(f);
    CHECK(read_all(f) == kMarker);
  }
  SECTION("relative escaping parent") {
    auto [parent, name] = sbx::open_parent_in_root(r.fd.get(), "data/rel_up/shadow");
    CHECK(name == "shadow");
    CHECK(same_file(parent.get(), r.dir / "etc"));
  }
  SECTION("dot-dot in the parent is clamped to the root") {
    auto [parent, name] = sbx::open_parent_in_root(r.fd.get(), "../../x");
    CHECK(name == "x");
    CHECK(same_file(parent.get(), r.dir.path));
    auto [p2, n2] = sbx::open_parent_in_root(r.fd.get(), "a/../../data/file.txt");
    CHECK(n2 == "file.txt");
    CHECK(same_file(p2.get(), r.dir / "data"));
  }
  SECTION("a trailing slash or dot still names the entry") {
    auto [parent, name] = sbx::open_parent_in_root(r.fd.get(), "/data/rel_up/");
    CHECK(name == "rel_up");
    CHECK(same_file(parent.get(), r.dir / "data"));
    auto [p2, n2] = sbx::open_parent_in_root(r.fd.get(), "data/.");
    CHECK(n2 == "data");
    CHECK(same_file(p2.get(), r.dir.path));
  }
  SECTION("a missing parent is not_found") {
    auto e = error_of([&] { sbx::open_parent_in_root(r.fd.get(), "nope/x"); });
    CHECK(e.code() == Errc::not_found);
  }
  SECTION("a parent that is a file is refused") {
    auto e = error_of([&] { sbx::open_parent_in_root(r.fd.get(), "x/y"); });
    CHECK(e.sys_errno() == ENOTDIR);
  }
  SECTION("the root itself and a final .. are refused") {
    for (const char* path : {"/", "", ".", "//", "a/..", "/.."}) {
      CAPTURE(path);
      CHECK(error_of([&] { sbx::open_parent_in_root(r.fd.get(), path); }).code() == Errc::invalid_argument);
    }
  }
}

TEST_CASE("safe_path: clean_path normalises lexically and keeps ..", "[safe_path]") {
  auto [in, out] = GENERATE(table<std::string, std::string>({
      {"", "/"},
      {"/", "/"},
      {".", "/"},
      {"./", "/"},
      {"///", "/"},
      {"a", "/a"},
      {"/a", "/a"},
      {"a//b/./c/", "/a/b/c"},
      {"/a/b/c", "/a/b/c"},
      {"./a/./b/.", "/a/b"},
      {"..", "/.."},
      {"../x", "/../x"},
      {"a/../b", "/a/../b"},
      {"a/..", "/a/.."},
      {"...", "/..."},
      {".hidden/.x", "/.hidden/.x"},
  }));
  CAPTURE(in);
  CHECK(sbx::clean_path(in) == out);
}

TEST_CASE("safe_path: a mode given without O_CREAT is ignored, as open(2) does", "[safe_path][bug]") {
  // safe_path.cpp: how.mode is kept when `flags & (O_CREAT | O_TMPFILE)`, but
  // O_TMPFILE includes the O_DIRECTORY bit, so an O_DIRECTORY open with a mode
  // passes a non-zero mode to openat2, which refuses it with EINVAL.
  Root r;
  Fd plain = sbx::open_in_root(r.fd.get(), "data", O_RDONLY, 0755);
  CHECK(same_file(plain.get(), r.dir / "data"));
  try {
    Fd dir = sbx::open_in_root(r.fd.get(), "data", O_RDONLY | O_DIRECTORY, 0755);
    CHECK(same_file(dir.get(), r.dir / "data"));
  } catch (const sbx::Error& e) {
    FAIL("open_in_root(O_DIRECTORY, mode 0755) threw: " << e.what());
  }
}
