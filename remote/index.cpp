#include "remote/index.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/spec.hpp"

namespace sbx {

namespace {

std::string index_dir(const std::string& state_dir) { return state_dir + "/remote"; }

// Ids arrive from users and managers; only a well-formed id may become a file name.
std::optional<std::string> entry_path(const std::string& state_dir, const std::string& id) {
  if (!valid_sandbox_id(id)) return std::nullopt;
  return index_dir(state_dir) + "/" + id;
}

// Names are kept apart from the id entries, as names/<name> holding the id;
// a valid name is a safe file name.
std::optional<std::string> name_path(const std::string& state_dir, const std::string& name) {
  if (!valid_sandbox_name(name)) return std::nullopt;
  return index_dir(state_dir) + "/names/" + name;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// The one line an index file holds, or nullopt when there is none.
std::optional<std::string> entry_text(const std::optional<std::string>& path) {
  if (!path) return std::nullopt;
  auto text = read_file_if_exists(*path);
  if (!text) return std::nullopt;
  std::string line = trimmed(*text);
  if (line.empty()) return std::nullopt;
  return line;
}

}  // namespace

void remember_remote(const std::string& state_dir, const std::string& id, const std::string& url,
                     const std::string& name) {
  auto path = entry_path(state_dir, id);
  if (!path) throw Error(Errc::invalid_argument, "'" + id + "' is not a sandbox id");
  if (url.empty() || url.find('\n') != std::string::npos)
    throw Error(Errc::invalid_argument, "cannot remember sandbox " + id + ": bad manager URL");
  make_dirs(index_dir(state_dir), 0755);
  // A lost index entry only strands the sandbox until its idle timeout, so no fsync.
  write_file_atomic(*path, url + "\n", 0644, Durability::survive_process);
  if (name.empty()) return;
  auto named = name_path(state_dir, name);
  if (!named) throw Error(Errc::invalid_argument, "cannot remember sandbox " + id + ": bad name");
  make_dirs(index_dir(state_dir) + "/names", 0755);
  write_file_atomic(*named, id + "\n", 0644, Durability::survive_process);
}

std::optional<std::string> remote_named(const std::string& state_dir, const std::string& name) {
  auto id = entry_text(name_path(state_dir, name));
  // A forgotten sandbox (removed) no longer answers to its name.
  if (!id || !remote_location(state_dir, *id)) return std::nullopt;
  return id;
}

std::optional<std::string> remote_location(const std::string& state_dir, const std::string& id) {
  return entry_text(entry_path(state_dir, id));
}

void forget_remote(const std::string& state_dir, const std::string& id) {
  auto path = entry_path(state_dir, id);
  if (!path) return;
  if (::unlink(path->c_str()) != 0 && errno != ENOENT) throw sys_error("cannot remove " + *path, errno);
}

std::vector<std::pair<std::string, std::string>> remote_sandboxes(const std::string& state_dir) {
  std::vector<std::pair<std::string, std::string>> out;
  std::string dir = index_dir(state_dir);
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno == ENOENT) return out;
    throw sys_error("cannot list " + dir, errno);
  }
  std::vector<std::string> ids;
  while (dirent* ent = ::readdir(d)) {
    // Skips ".", "..", and write_file_atomic's temp files.
    if (valid_sandbox_id(ent->d_name)) ids.emplace_back(ent->d_name);
  }
  ::closedir(d);
  std::sort(ids.begin(), ids.end());
  for (auto& id : ids)
    if (auto url = remote_location(state_dir, id)) out.emplace_back(id, *url);
  return out;
}

}  // namespace sbx
