#include "core/cp.hpp"

#include <sys/stat.h>

#include <cerrno>

#include "core/error.hpp"
#include "core/safe_path.hpp"

namespace sbx {

CpEndpoint parse_cp_endpoint(const std::string& arg) {
  if (arg.empty()) throw Error(Errc::usage, "empty path in cp");
  if (arg == "-" || arg.front() == '/' || arg.front() == '.') return {"", arg};
  auto colon = arg.find(':');
  // As in docker cp: a colon after a slash belongs to a host path ("dir/a:b").
  if (colon == std::string::npos || colon == 0 || arg.find('/') < colon) return {"", arg};
  std::string path = arg.substr(colon + 1);
  if (path.empty()) path = "/";
  if (path.front() != '/')
    throw Error(Errc::usage, "sandbox path '" + path + "' must be absolute").set_hint("write ID:/path");
  return {arg.substr(0, colon), path};
}

namespace {
std::string base_name(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  if (p.size() > 2 && p.compare(p.size() - 2, 2, "/.") == 0) p.resize(p.size() - 2);
  auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}
bool contents_form(const std::string& p) { return p == "." || (p.size() >= 2 && p.compare(p.size() - 2, 2, "/.") == 0); }
}  // namespace

uint64_t copy_files(Backend& backend, const CpEndpoint& src, const CpEndpoint& dest, uint64_t max_bytes, int stdin_fd,
                    int stdout_fd) {
  if (src.sandbox.empty() == dest.sandbox.empty())
    throw Error(Errc::usage, src.sandbox.empty() ? "cp needs one side in a sandbox (ID:/path)"
                                                 : "cp between two sandboxes is not supported")
        .set_hint("sbx cp ./local ID:/path   or   sbx cp ID:/path ./local");
  if (!src.sandbox.empty()) {
    auto entry = backend.stat(src.sandbox, src.path);
    if (!entry) throw Error(Errc::not_found, src.path + " does not exist in sandbox " + src.sandbox);
    std::string clean = clean_path(src.path);
    if (dest.path == "-") {
      auto sink = tar_sink(stdout_fd, clean == "/" ? "." : base_name(clean));
      return backend.get_files(src.sandbox, clean, *sink, max_bytes);
    }
    struct stat st {};
    DestInfo info;
    if (::stat(dest.path.c_str(), &st) == 0) info = {true, S_ISDIR(st.st_mode)};
    else if (errno != ENOENT) throw sys_error(dest.path, errno);
    std::string target = resolve_cp_target(dest.path, info, clean == "/" ? "root" : base_name(clean),
                                           entry->type == "dir", contents_form(src.path));
    auto sink = host_path_sink(target);
    return backend.get_files(src.sandbox, clean, *sink, max_bytes);
  }
  auto dest_entry = backend.stat(dest.sandbox, dest.path);
  DestInfo info;
  if (dest_entry) info = {true, dest_entry->type == "dir"};
  if (src.path == "-") {
    if (!info.is_dir) throw Error(Errc::invalid_argument, "a tar stream can only be unpacked into an existing directory, and " + dest.path + " is not one");
    auto source = tar_source(stdin_fd);
    return backend.put(dest.sandbox, clean_path(dest.path), *source, max_bytes);
  }
  struct stat st {};
  if (::lstat(src.path.c_str(), &st) != 0) throw sys_error(src.path, errno);
  std::string target = resolve_cp_target(dest.path, info, base_name(src.path), S_ISDIR(st.st_mode), contents_form(src.path));
  auto source = host_path_source(src.path);
  return backend.put(dest.sandbox, clean_path(target), *source, max_bytes);
}

}  // namespace sbx
