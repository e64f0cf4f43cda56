#include "core/snapshots.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/sha256.hpp"

namespace sbx {

using nlohmann::json;

void to_json(json& j, const SnapshotInfo& s) {
  j = json{{"name", s.name},         {"digest", s.digest},         {"source", s.source},
           {"spec", s.spec},         {"uid_base", s.uid_base},     {"created_ms", s.created_ms},
           {"bytes", s.bytes},       {"copy_ms", s.copy_ms},       {"memory", s.memory}};
  if (s.memory) j["memory_bytes"] = s.memory_bytes;
}
void from_json(const json& j, SnapshotInfo& s) {
  s.name = j.at("name").get<std::string>();
  s.digest = j.at("digest").get<std::string>();
  s.source = j.value("source", "");
  s.spec = j.at("spec").get<SandboxSpec>();
  s.uid_base = j.value("uid_base", 0u);
  s.created_ms = j.value("created_ms", int64_t{0});
  s.bytes = j.value("bytes", uint64_t{0});
  s.copy_ms = j.value("copy_ms", uint64_t{0});
  s.memory = j.value("memory", false);
  s.memory_bytes = j.value("memory_bytes", uint64_t{0});
}

void start_on_snapshot(SandboxSpec& spec, const SnapshotInfo& snap) {
  spec.driver = snap.spec.driver;
  spec.image = snap.spec.image;
  spec.limits.disk_mb = snap.spec.limits.disk_mb;
  spec.from_snapshot = snap.memory ? snap.name : snap.digest;
}

void check_snapshot_name(const std::string& name) {
  if (!valid_sandbox_name(name))
    throw Error(Errc::invalid_argument, "invalid snapshot name '" + name.substr(0, 80) + "'")
        .set_hint("1-63 of a-z 0-9 _ . -, starting with a letter or digit");
}

namespace {

// The digest covers what the layer holds and where: each data extent's offset,
// length and bytes (holes read as zeros, so skipping them changes nothing a
// reader sees), plus the file's size. Reading only the extents keeps a mostly
// empty 1 GiB layer's hash to its few MiB of data.
std::string layer_digest(const std::string& path, uint64_t& bytes) {
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!f) throw sys_error("cannot open " + path, errno);
  off_t size = ::lseek(f.get(), 0, SEEK_END);
  Sha256 h;
  h.update("sbx-layer-v1 size=" + std::to_string(size) + "\n");
  std::vector<char> buf(1 << 20);
  bytes = 0;
  for (off_t off = 0;;) {
    off_t data = ::lseek(f.get(), off, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;
      throw sys_error("reading " + path, errno);
    }
    off_t hole = ::lseek(f.get(), data, SEEK_HOLE);
    if (hole < 0) throw sys_error("reading " + path, errno);
    h.update("extent " + std::to_string(data) + " " + std::to_string(hole - data) + "\n");
    for (off_t at = data; at < hole;) {
      ssize_t n = ::pread(f.get(), buf.data(), static_cast<size_t>(std::min<off_t>(hole - at, buf.size())), at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw sys_error("reading " + path, n < 0 ? errno : EIO);
      h.update(buf.data(), static_cast<size_t>(n));
      at += n;
    }
    bytes += static_cast<uint64_t>(hole - data);
    off = hole;
  }
  return h.digest();
}

void fsync_path(const std::string& path) {
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!f || ::fsync(f.get()) != 0) throw sys_error("syncing " + path, errno);
}

// A checkpoint directory is flat (runsc writes checkpoint.img and, in newer releases, a few more files).
template <class F>
void each_file(const std::string& dir, F&& f) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw sys_error("reading " + dir, errno);
  while (dirent* e = ::readdir(d)) {
    struct stat st {};
    std::string path = dir + "/" + e->d_name;
    if (e->d_name[0] != '.' && ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) f(path, st);
  }
  ::closedir(d);
}

uint64_t tree_bytes(const std::string& dir) {
  uint64_t n = 0;
  each_file(dir, [&](const std::string&, const struct stat& st) { n += static_cast<uint64_t>(st.st_size); });
  return n;
}

void sync_tree(const std::string& dir) {
  each_file(dir, [](const std::string& path, const struct stat&) { fsync_path(path); });
  fsync_path(dir);
}

}  // namespace

SnapshotStore::SnapshotStore(const std::string& state_root) : root_(state_root + "/snapshots") {
  make_dirs(root_ + "/layers", 0700);
  make_dirs(root_ + "/refs", 0700);
  make_dirs(root_ + "/tmp", 0700);
  make_dirs(root_ + "/memory", 0700);
}

std::string SnapshotStore::temp_path() const { return root_ + "/tmp/" + new_sandbox_id() + ".img"; }

std::string SnapshotStore::layer_path(const SnapshotInfo& s) const {
  return root_ + "/layers/" + s.digest.substr(s.digest.find(':') + 1) + ".img";
}

std::string SnapshotStore::memory_path(const SnapshotInfo& s) const { return root_ + "/memory/" + s.name; }

SnapshotInfo SnapshotStore::add(const std::string& temp, SnapshotInfo info, const std::string& memory) {
  check_snapshot_name(info.name);
  try {
    info.digest = layer_digest(temp, info.bytes);
    info.memory = !memory.empty();
    if (info.memory) info.memory_bytes = tree_bytes(memory);
    Fd guard = lock_file(root_ + "/lock");
    // The name's old checkpoint goes (a files-only snapshot of that name has none); the new one takes its place.
    remove_tree(memory_path(info));
    if (info.memory) {
      sync_tree(memory);
      if (::rename(memory.c_str(), memory_path(info).c_str()) != 0) throw sys_error("installing " + memory_path(info), errno);
    }
    std::string layer = layer_path(info);
    if (path_exists(layer)) {
      ::unlink(temp.c_str());  // the same files are there already
    } else {
      fsync_path(temp);  // a snapshot survives a power cut, not only a restart
      if (::rename(temp.c_str(), layer.c_str()) != 0) throw sys_error("installing " + layer, errno);
    }
    std::optional<SnapshotInfo> old = find(info.name);
    write_file_atomic(root_ + "/refs/" + info.name + ".json", json(info).dump() + "\n", 0600);
    if (old && old->digest != info.digest) {
      bool used = false;
      for (auto& s : list()) used = used || s.digest == old->digest;
      if (!used) ::unlink(layer_path(*old).c_str());
    }
  } catch (...) {
    ::unlink(temp.c_str());
    try {
      if (!memory.empty()) remove_tree(memory);
    } catch (const Error&) {
      // The filing's error is the one to report; gc removes the directory once it is stale.
    }
    throw;
  }
  return info;
}

std::vector<SnapshotInfo> SnapshotStore::list() const {
  std::vector<SnapshotInfo> out;
  DIR* d = ::opendir((root_ + "/refs").c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.size() < 6 || n.compare(n.size() - 5, 5, ".json") != 0) continue;
    try {
      out.push_back(json::parse(read_file(root_ + "/refs/" + n)).get<SnapshotInfo>());
    } catch (const std::exception&) {
      // A ref half-written by an older crash cannot be: write_file_atomic renames. Skip junk.
    }
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.created_ms < b.created_ms; });
  return out;
}

std::optional<SnapshotInfo> SnapshotStore::find(const std::string& ref) const {
  if (valid_sandbox_name(ref)) {
    if (auto text = read_file_if_exists(root_ + "/refs/" + ref + ".json")) return json::parse(*text).get<SnapshotInfo>();
  }
  std::string hex = ref.rfind("sha256:", 0) == 0 ? ref.substr(7) : ref;
  if (hex.size() < 8) return std::nullopt;
  std::optional<SnapshotInfo> hit;
  for (auto& s : list())
    if (s.digest.compare(7, hex.size(), hex) == 0) {
      if (hit && hit->digest != s.digest)
        throw Error(Errc::invalid_argument, "snapshot digest prefix '" + hex + "' is ambiguous");
      hit = s;
    }
  return hit;
}

SnapshotInfo SnapshotStore::get(const std::string& ref) const {
  auto s = find(ref);
  if (!s) throw Error(Errc::not_found, "no such snapshot: " + ref.substr(0, 80)).set_hint("`sbx snapshot ls` lists them");
  return *s;
}

void SnapshotStore::remove(const std::string& name) {
  Fd guard = lock_file(root_ + "/lock");
  SnapshotInfo s = get(name);
  if (::unlink((root_ + "/refs/" + s.name + ".json").c_str()) != 0) throw sys_error("removing snapshot " + s.name, errno);
  remove_tree(memory_path(s));
  for (auto& other : list())
    if (other.digest == s.digest) return;  // another name keeps the layer
  ::unlink(layer_path(s).c_str());
}

std::vector<std::string> stale_snapshot_copies(const std::string& state_root, int64_t now_ms, int64_t grace_ms) {
  std::vector<std::string> out;
  const std::string tmp = state_root + "/snapshots/tmp";
  DIR* d = ::opendir(tmp.c_str());
  if (!d) return out;
  auto ms = [](const struct stat& st) { return int64_t{st.st_mtim.tv_sec} * 1000; };
  while (dirent* e = ::readdir(d)) {
    std::string path = tmp + "/" + e->d_name;
    struct stat st {};
    if (e->d_name[0] == '.' || ::lstat(path.c_str(), &st) != 0) continue;
    int64_t last = ms(st);
    if (S_ISDIR(st.st_mode)) {
      // A memory checkpoint on its way (NAME.mem): last written when its newest file was.
      if (!path.ends_with(".mem")) continue;
      try {
        each_file(path, [&](const std::string&, const struct stat& f) { last = std::max(last, ms(f)); });
      } catch (const Error&) {
        continue;  // unreadable: not this gc's to judge
      }
    } else if (!S_ISREG(st.st_mode)) {
      continue;
    }
    if (now_ms - last >= grace_ms) out.push_back(path);
  }
  ::closedir(d);
  return out;
}

}  // namespace sbx
