// safe_path (core/safe_path.hpp) against a planted root: relative, absolute,
// looping and magic symlinks and ".." chains all resolve inside the root, as
// the kernel's RESOLVE_IN_ROOT does; run with SBX_SAFE_PATH_PORTABLE=1 for the
// user-space walk used where openat2 is missing (scripts/fuzz.sh runs both).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <fuzzer/FuzzedDataProvider.h>

#include "core/error.hpp"
#include "core/safe_path.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace {

const sbx_fuzz::TempDir& planted() {
  static sbx_fuzz::TempDir t;
  static bool done = [] {
    for (auto* d : {"root", "root/a", "root/a/b", "outside"})
      if (::mkdir((t / d).c_str(), 0755) != 0) std::abort();
    sbx_fuzz::write_text(t / "outside/secret", "secret");
    sbx_fuzz::write_text(t / "root/a/file", "file");
    struct { const char* target; const char* at; } links[] = {
        {"../../../outside", "root/a/b/up"}, {"/", "root/abs"},          {"/proc/self/root", "root/magic"},
        {"loop2", "root/loop1"},             {"loop1", "root/loop2"},    {"a/b/../../../outside/secret", "root/s"},
        {"b", "root/a/rel"},                 {"../..", "root/a/b/top"},  {"", "root/empty"}};
    for (auto& l : links) (void)::symlink(l.target, (t / l.at).c_str());
    return true;
  }();
  (void)done;
  return t;
}

std::string where(int fd) {
  char buf[PATH_MAX];
  std::string link = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
  if (n < 0) std::abort();
  return {buf, static_cast<size_t>(n)};
}

void must_be_inside(int fd, const std::string& root) {
  std::string at = where(fd);
  if (at != root && at.rfind(root + "/", 0) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& t = planted();
  static const std::string root = t / "root";
  static sbx::Fd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  FuzzedDataProvider in(data, size);
  const int kFlags[] = {O_PATH, O_RDONLY, O_RDONLY | O_DIRECTORY, O_PATH | O_NOFOLLOW};
  int flags = kFlags[in.ConsumeIntegralInRange<size_t>(0, 3)] | O_CLOEXEC;
  bool parent = in.ConsumeBool();
  std::string path = in.ConsumeRemainingBytesAsString();
  try {
    if (parent) {
      auto [dir, name] = sbx::open_parent_in_root(root_fd.get(), path);
      must_be_inside(dir.get(), root);
      if (name.find('/') != std::string::npos) std::abort();
    } else {
      sbx::Fd fd = sbx::open_in_root(root_fd.get(), path, flags);
      must_be_inside(fd.get(), root);
    }
  } catch (const sbx::Error&) {
  }
  (void)sbx::clean_path(path);
  return 0;
}
