#include "core/registry.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx {

namespace {
constexpr uint32_t kIdsPerSandbox = 65536;
constexpr const char* kRecord = "record.json";
constexpr const char* kActivity = "activity";
}  // namespace

Registry::Registry(std::string root, uint32_t uid_base)
    : root_(std::move(root)), sandboxes_(root_ + "/sandboxes"), uid_base_(uid_base) {
  try {
    make_dirs(sandboxes_, 0711);
    if (::access(sandboxes_.c_str(), W_OK) != 0) throw sys_error(sandboxes_ + " is not writable", errno);
  } catch (Error& e) {
    e.add_context("opening the state root " + root_);
    e.set_hint("run as root, or choose a writable state root with --state-dir or SBX_STATE_DIR");
    throw;
  }
}

std::string Registry::dir(const std::string& id) const { return sandboxes_ + "/" + id; }

SandboxRecord Registry::create(const SandboxSpec& spec) {
  Fd guard = lock_file(root_ + "/registry.lock");
  std::set<uint32_t> used;
  for (auto& r : list()) used.insert(r.slot);
  // Half-created sandboxes without a record still own their slot's directory
  // name only, not a slot, so they cannot collide.
  uint32_t slot = 0;
  while (used.count(slot)) ++slot;
  uint64_t base = uint64_t{uid_base_} + uint64_t{slot} * kIdsPerSandbox;
  if (base + kIdsPerSandbox > 0xFFFFFFFFull)
    throw Error(Errc::limit_exceeded, "no free uid range for another sandbox")
        .set_hint("remove sandboxes with `sbx rm` or `sbx gc`, or lower uid_base in the config");
  SandboxRecord rec;
  for (int attempt = 0;; ++attempt) {
    rec.id = new_sandbox_id();
    if (::mkdir(dir(rec.id).c_str(), 0711) == 0) break;
    if (errno != EEXIST || attempt > 8) throw sys_error("cannot create " + dir(rec.id), errno);
  }
  rec.spec = spec;
  rec.state = SandboxState::creating;
  rec.created_ms = now_ms();
  rec.slot = slot;
  rec.uid_base = static_cast<uint32_t>(base);
  save(rec);
  touch(rec.id);
  return rec;
}

void Registry::save(const SandboxRecord& rec) {
  nlohmann::json j = rec;
  // No fsync: a sandbox does not outlive its host, so a record only has to
  // survive its writer's death (rename does that). After a power cut a torn
  // record is an unreadable one, which gc reaps as a stray directory.
  write_file_atomic(dir(rec.id) + "/" + kRecord, j.dump(2) + "\n", 0600, Durability::survive_process);
}

std::optional<SandboxRecord> Registry::find(const std::string& id_or_prefix) const {
  auto load = [&](const std::string& id) -> std::optional<SandboxRecord> {
    auto text = read_file_if_exists(dir(id) + "/" + kRecord);
    if (!text) return std::nullopt;
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    try {
      auto rec = j.get<SandboxRecord>();
      rec.last_active_ms = last_active_ms(id);
      return rec;
    } catch (...) {
      return std::nullopt;
    }
  };
  if (valid_sandbox_id(id_or_prefix)) return load(id_or_prefix);
  // Prefixes are matched against directory names only; never used as a path.
  if (id_or_prefix.size() < 5 || id_or_prefix.find('/') != std::string::npos) return std::nullopt;
  std::optional<std::string> match;
  if (DIR* d = ::opendir(sandboxes_.c_str())) {
    while (auto* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (!valid_sandbox_id(name) || name.compare(0, id_or_prefix.size(), id_or_prefix) != 0) continue;
      if (match) {
        ::closedir(d);
        throw Error(Errc::invalid_argument, "'" + id_or_prefix + "' matches more than one sandbox")
            .set_hint("give more characters of the id");
      }
      match = name;
    }
    ::closedir(d);
  }
  return match ? load(*match) : std::nullopt;
}

SandboxRecord Registry::get(const std::string& id_or_prefix) const {
  auto r = find(id_or_prefix);
  if (!r)
    throw Error(Errc::not_found, "sandbox " + id_or_prefix + " does not exist").set_hint("`sbx ls` lists the sandboxes");
  return *r;
}

std::vector<SandboxRecord> Registry::list() const {
  std::vector<SandboxRecord> out;
  DIR* d = ::opendir(sandboxes_.c_str());
  if (!d) throw sys_error("cannot read " + sandboxes_, errno);
  std::vector<std::string> ids;
  while (auto* e = ::readdir(d))
    if (valid_sandbox_id(e->d_name)) ids.emplace_back(e->d_name);
  ::closedir(d);
  for (auto& id : ids)
    if (auto r = find(id)) out.push_back(std::move(*r));
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.created_ms < b.created_ms; });
  return out;
}

std::vector<std::string> Registry::stray_dirs() const {
  std::vector<std::string> out;
  DIR* d = ::opendir(sandboxes_.c_str());
  if (!d) return out;
  while (auto* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (!valid_sandbox_id(name)) continue;
    if (!find(name)) out.push_back(name);  // no record, or one torn beyond reading
  }
  ::closedir(d);
  return out;
}

void Registry::remove(const std::string& id) {
  if (!valid_sandbox_id(id)) throw Error(Errc::invalid_argument, "not a sandbox id: " + id);
  remove_tree(dir(id));
}

Fd Registry::lock(const std::string& id, bool exclusive) const { return lock_file(dir(id) + "/lock", exclusive); }

Fd Registry::try_lock(const std::string& id) const {
  Fd fd(::open((dir(id) + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd && ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) fd.reset();
  return fd;
}

void Registry::touch(const std::string& id) const {
  std::string p = dir(id) + "/" + kActivity;
  if (::utimensat(AT_FDCWD, p.c_str(), nullptr, 0) == 0) return;
  Fd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
}

int64_t Registry::last_active_ms(const std::string& id) const {
  struct stat st {};
  if (::stat((dir(id) + "/" + kActivity).c_str(), &st) != 0) return 0;
  return int64_t{st.st_mtim.tv_sec} * 1000 + st.st_mtim.tv_nsec / 1'000'000;
}

}  // namespace sbx
