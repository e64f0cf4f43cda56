#include "backends/common/hostview.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx::hostview {

namespace fs = std::filesystem;

namespace {
// Bump when the skeleton's content changes, so old state roots get a fresh one.
constexpr const char* kVersion = "hostview-v1";

// What programs need from /etc to run: the loader's cache, name service
// config, certificates, alternatives symlinks. Nothing that names host users
// or holds a credential.
constexpr const char* kEtcCopies[] = {
    "alternatives", "bash.bashrc", "ca-certificates.conf", "debian_version", "environment", "gai.conf",
    "host.conf",    "inputrc",     "ld.so.cache",          "ld.so.conf",     "ld.so.conf.d", "locale.alias",
    "localtime",    "magic",       "magic.mime",           "mailcap",        "mime.types",   "nsswitch.conf",
    "os-release",   "perl",        "profile",              "profile.d",      "protocols",    "python3",
    "python3.11",   "rpc",         "services",             "shells",         "skel",         "ssl",
    "terminfo",     "timezone",    "vim",                  "xdg"};

constexpr const char* kTopLevel[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};

void copy_tree(const fs::path& from, const fs::path& to) {
  // Regular files, directories and symlinks only, never following a link.
  auto st = fs::symlink_status(from);
  if (fs::is_symlink(st)) {
    fs::create_symlink(fs::read_symlink(from), to);
  } else if (fs::is_directory(st)) {
    fs::create_directory(to);
    fs::permissions(to, st.permissions());
    for (auto& e : fs::directory_iterator(from)) copy_tree(e.path(), to / e.path().filename());
  } else if (fs::is_regular_file(st)) {
    fs::copy_file(from, to);
  }
}

void build(const fs::path& dir) {
  for (auto* d : {"usr", "proc", "dev", "etc", "run", "var", "home", "mnt", "opt", "srv", "root", "work"})
    fs::create_directory(dir / d);
  fs::create_directory(dir / "tmp");
  fs::permissions(dir / "tmp", fs::perms::all | fs::perms::sticky_bit);
  fs::create_directory(dir / "var/tmp");
  fs::permissions(dir / "var/tmp", fs::perms::all | fs::perms::sticky_bit);
  for (auto* d : {"var/lib", "var/cache", "var/log"}) fs::create_directory(dir / d);
  for (auto* name : kTopLevel) {
    fs::path host = fs::path("/") / name;
    auto st = fs::symlink_status(host);
    if (fs::is_symlink(st)) fs::create_symlink(fs::read_symlink(host), dir / name);
    else if (fs::is_directory(st)) fs::create_directory(dir / name);  // bind-mounted at start
  }
  fs::path etc = dir / "etc";
  for (auto* name : kEtcCopies) {
    fs::path host = fs::path("/etc") / name;
    if (fs::exists(fs::symlink_status(host))) copy_tree(host, etc / name);
  }
  write_file_atomic((etc / "passwd").string(),
                    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
  write_file_atomic((etc / "group").string(), "root:x:0:\nnogroup:x:65534:\n");
  write_file_atomic((etc / "hostname").string(), "sandbox\n");
  write_file_atomic((etc / "hosts").string(), "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n");
  write_file_atomic((etc / "resolv.conf").string(), "# no network in this sandbox\n");
}
}  // namespace

std::string ensure_skeleton(const std::string& state_root) {
  std::string base = state_root + "/base";
  std::string dir = base + "/" + kVersion;
  if (path_exists(dir + "/etc/passwd")) return dir;
  make_dirs(base, 0755);
  Fd guard = lock_file(base + "/build.lock");
  if (path_exists(dir + "/etc/passwd")) return dir;  // another process built it meanwhile
  std::string tmp = dir + ".building";
  try {
    if (path_exists(tmp)) remove_tree(tmp);
    fs::create_directory(tmp);
    fs::permissions(tmp, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                             fs::perms::others_read | fs::perms::others_exec);
    build(tmp);
  } catch (const fs::filesystem_error& e) {
    throw Error(errc_from_errno(e.code().value()), std::string("building the base view: ") + e.what());
  }
  if (::rename(tmp.c_str(), dir.c_str()) != 0) throw sys_error("installing " + dir, errno);
  return dir;
}

std::vector<std::string> bind_dirs() {
  std::vector<std::string> out{"/usr"};
  for (auto* name : kTopLevel) {
    std::string host = std::string("/") + name;
    struct stat st {};
    if (::lstat(host.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) out.push_back(host);
  }
  return out;
}

std::vector<std::string> own_dirs(const std::string& workdir) { return {"/root", "/tmp", "/var/tmp", workdir}; }

void check_own_dirs(const std::string& lower, const std::vector<std::string>& dirs) {
  for (const auto& dir : dirs) {
    for (size_t i = 1; i <= dir.size(); ++i) {
      if (i != dir.size() && dir[i] != '/') continue;
      std::string part = dir.substr(0, i);
      if (part.size() >= 3 && (part.compare(part.size() - 3, 3, "/..") == 0 || part.find("/../") != std::string::npos))
        throw Error(Errc::invalid_argument, "directory '" + dir + "' must not contain '..'");
      struct stat st {};
      if (::lstat((lower + part).c_str(), &st) != 0) break;  // missing: created below a real directory
      if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode))
        throw Error(Errc::invalid_argument, "the image's " + part + " is " + (S_ISLNK(st.st_mode) ? "a symlink" : "not a directory") +
                                                ", where the sandbox needs its own directory " + dir)
            .set_hint("make " + part + " a real directory in the image, or choose another --workdir");
    }
  }
}

}  // namespace sbx::hostview
