#include "core/registry.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/fsutil.hpp"

namespace sbx {

namespace {
constexpr uint32_t kIdsPerSandbox = 65536;
constexpr const char* kRecord = "record.json";
constexpr std::string_view kRemoving = ".removing-";  // a sandbox directory on its way out (never a valid id)
constexpr const char* kActivity = "activity";
constexpr const char* kRootLock = "registry.lock";
constexpr const char* kLock = "lock";

// A sandbox keeps its name from its creation (state creating, so a concurrent
// create sees it) until it is removed, dead or not.
void check_name_among(const std::vector<SandboxRecord>& recs, const SandboxSpec& spec, const std::string& self) {
  if (spec.name.empty()) return;
  std::string owner = sandbox_owner(spec);
  for (auto& r : recs) {
    if (r.id == self || r.spec.name != spec.name || sandbox_owner(r.spec) != owner) continue;
    throw Error(Errc::already_exists, "a sandbox named '" + spec.name + "' already exists")
        .set_hint("sandbox " + r.id + " (" + std::string(state_name(r.state)) +
                  ") holds the name; choose another, or remove it with `sbx rm " + r.id + "`");
  }
}

bool id_has_prefix(const std::string& id, const std::string& prefix) {
  return prefix.size() >= 5 && prefix.size() < id.size() && id.compare(0, prefix.size(), prefix) == 0;
}

[[noreturn]] void throw_missing(const std::string& ref) {
  throw Error(Errc::not_found, "sandbox " + ref.substr(0, 80) + " does not exist")
      .set_hint("`sbx ls` lists the sandboxes, with their names");
}

[[noreturn]] void throw_ambiguous(const std::string& ref, bool by_name) {
  throw Error(Errc::invalid_argument, "'" + ref + "' " + (by_name ? "names" : "matches") + " more than one sandbox")
      .set_hint(by_name ? "use the sandbox's id (`sbx ls` shows it)" : "give more characters of the id");
}
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

SandboxRecord Registry::create(const SandboxSpec& spec, Fd* creating, const OneShotClient& one_shot) {
  Fd guard = lock_file(root_ + "/" + kRootLock);
  auto recs = list();
  check_name_among(recs, spec, "");
  std::set<uint32_t> used;
  for (auto& r : recs) used.insert(r.slot);
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
    if (errno != EEXIST || attempt > 8) throw if_full(sys_error("cannot create " + dir(rec.id), errno));
  }
  rec.spec = spec;
  rec.state = SandboxState::creating;
  rec.created_ms = now_ms();
  rec.slot = slot;
  rec.uid_base = static_cast<uint32_t>(base);
  // In the first record: a client killed mid-create leaves nothing gc would keep.
  rec.one_shot = one_shot;
  try {
    if (creating) *creating = lock(rec.id, true);
    fault::point("create.state_dir");
    save(rec);
  } catch (Error& e) {
    // A directory without its record would wait for gc; nothing else was made yet.
    if (creating) creating->reset();
    remove_tree(dir(rec.id));
    throw if_full(std::move(e));
  }
  touch(rec.id);
  fault::point("create.record");
  return rec;
}

Error Registry::if_full(Error e) const {
  if (e.sys_errno() != ENOSPC && e.sys_errno() != EDQUOT) return e;
  return std::move(e.set_hint("the state root's filesystem (" + root_ +
                              ") is full: free space there (`sbx rm`, `sbx gc`), or set SBX_STATE_DIR to a larger one"));
}

void Registry::save(const SandboxRecord& rec) {
  nlohmann::json j = rec;
  // No fsync: a sandbox does not outlive its host, so a record only has to
  // survive its writer's death (rename does that). After a power cut a torn
  // record is an unreadable one, which gc reaps as a stray directory.
  write_file_atomic(dir(rec.id) + "/" + kRecord, j.dump(2) + "\n", 0600, Durability::survive_process);
}

void Registry::save_named(const SandboxRecord& rec) {
  Fd guard = lock_file(root_ + "/" + kRootLock);
  check_name_among(list(), rec.spec, rec.id);
  save(rec);
}

void Registry::check_name_free(const SandboxSpec& spec) const {
  if (!spec.name.empty()) check_name_among(list(), spec, "");
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
        throw_ambiguous(id_or_prefix, false);
      }
      match = name;
    }
    ::closedir(d);
  }
  return match ? load(*match) : std::nullopt;
}

bool Registry::has(const std::string& id) const {
  struct stat st;
  return valid_sandbox_id(id) && ::stat((dir(id) + "/" + kRecord).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

SandboxRecord Registry::get(const std::string& id_or_prefix) const {
  auto r = find(id_or_prefix);
  if (!r) throw_missing(id_or_prefix);
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
  // Renamed away first: whoever waited for the lock finds the sandbox gone at
  // once and whole, not half-removed; gc sweeps what a crash leaves of the rename.
  // The lock file goes last: while it can be opened, whoever holds it is still
  // removing (await_removal), so `rm --all` can wait for a one-shot's teardown.
  std::string going = sandboxes_ + "/" + std::string(kRemoving) + id;
  if (::rename(dir(id).c_str(), going.c_str()) == 0) {
    fault::point("rm.renamed");
    return remove_tree_last(going, kLock);
  }
  if (errno == ENOENT) return;
  remove_tree_last(dir(id), kLock);  // e.g. a crash's leftover holds that name
}

std::vector<std::string> Registry::unfinished_removals() const {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(sandboxes_.c_str())) {
    while (auto* e = ::readdir(d))
      if (std::string_view(e->d_name).starts_with(kRemoving)) out.push_back(sandboxes_ + "/" + e->d_name);
    ::closedir(d);
  }
  return out;
}

Registry::RemovalEnd Registry::await_removal(const std::string& path, std::chrono::steady_clock::time_point deadline) const {
  using namespace std::chrono_literals;
  auto gone = [&] {
    struct stat st {};
    return ::lstat(path.c_str(), &st) != 0 && errno == ENOENT;
  };
  Fd fd(::open((path + "/" + kLock).c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) {
    // The lock file goes last: without it, the remover is at its last rmdir, or died there.
    auto until = std::min(deadline, std::chrono::steady_clock::now() + 200ms);
    while (!gone()) {
      if (std::chrono::steady_clock::now() >= until) return RemovalEnd::abandoned;
      std::this_thread::sleep_for(5ms);
    }
    return RemovalEnd::gone;
  }
  // Polled, not a blocking flock: a remover stopped with SIGSTOP must not hold the caller forever.
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) throw sys_error("cannot lock " + path + "/" + kLock, errno);
    if (std::chrono::steady_clock::now() >= deadline) return RemovalEnd::running;
    std::this_thread::sleep_for(5ms);
  }
  return gone() ? RemovalEnd::gone : RemovalEnd::abandoned;
}

void Registry::finish_removal(const std::string& path) const {
  Fd fd(::open((path + "/" + kLock).c_str(), O_RDWR | O_CLOEXEC));
  if (fd && ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) throw Error(Errc::conflict, "its remover is still at work; kept");
  remove_tree_last(path, kLock);
}

Fd Registry::lock(const std::string& id, bool exclusive) const { return lock_file(dir(id) + "/" + kLock, exclusive); }

Fd Registry::lock_if_present(const std::string& id, bool exclusive) const {
  // No O_CREAT: a lock file made in a directory being removed would keep it from going.
  std::string path = dir(id) + "/" + kLock;
  Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return find(id) ? lock(id, exclusive) : Fd{};  // a record from before lock files
    throw sys_error("cannot open lock " + path, errno);
  }
  flock_wait(fd.get(), exclusive, path);
  // The file this holds may have been unlinked while it waited.
  struct stat held {}, now {};
  if (::fstat(fd.get(), &held) != 0 || ::stat(path.c_str(), &now) != 0 || held.st_ino != now.st_ino || !find(id)) fd.reset();
  return fd;
}

Fd Registry::try_lock(const std::string& id) const {
  Fd fd(::open((dir(id) + "/" + kLock).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd && ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) fd.reset();
  return fd;
}

bool Registry::abandoned(const std::string& id) const {
  // No O_CREAT: a directory without a lock file is judged by its age instead.
  Fd fd(::open((dir(id) + "/" + kLock).c_str(), O_RDWR | O_CLOEXEC));
  return fd && ::flock(fd.get(), LOCK_EX | LOCK_NB) == 0;  // closing fd drops the lock again
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

namespace {
// The one record of recs that fits; a second one makes `ref` ambiguous.
template <class Fits>
std::optional<SandboxRecord> only_one(const std::vector<SandboxRecord>& recs, const std::string& ref, bool by_name,
                                      Fits fits) {
  const SandboxRecord* hit = nullptr;
  for (auto& r : recs) {
    if (!fits(r)) continue;
    if (hit) throw_ambiguous(ref, by_name);
    hit = &r;
  }
  return hit ? std::optional<SandboxRecord>(*hit) : std::nullopt;
}

std::optional<SandboxRecord> named_among(const std::vector<SandboxRecord>& recs, const std::string& name,
                                         const std::optional<std::string>& owner) {
  return only_one(recs, name, true, [&](const SandboxRecord& r) {
    return r.spec.name == name && (!owner || sandbox_owner(r.spec) == *owner);
  });
}
}  // namespace

std::optional<SandboxRecord> find_sandbox(const std::vector<SandboxRecord>& recs, const std::string& ref,
                                          const std::optional<std::string>& owner) {
  for (auto& r : recs)
    if (r.id == ref) return r;
  // An id-shaped word is never a name, and a name is tried before a prefix.
  if (valid_sandbox_name(ref))
    if (auto hit = named_among(recs, ref, owner)) return hit;
  return only_one(recs, ref, false, [&](const SandboxRecord& r) { return id_has_prefix(r.id, ref); });
}

std::optional<SandboxRecord> find_named(const Registry& reg, const std::string& name,
                                        const std::optional<std::string>& owner) {
  if (!valid_sandbox_name(name)) return std::nullopt;
  return named_among(reg.list(), name, owner);
}

std::optional<SandboxRecord> find_sandbox(const Registry& reg, const std::string& ref,
                                          const std::optional<std::string>& owner) {
  if (valid_sandbox_id(ref)) return reg.find(ref);
  if (auto hit = find_named(reg, ref, owner)) return hit;
  return reg.find(ref);  // a prefix, matched against the directory names
}

SandboxRecord resolve_sandbox(const std::vector<SandboxRecord>& recs, const std::string& ref,
                              const std::optional<std::string>& owner) {
  auto r = find_sandbox(recs, ref, owner);
  if (!r) throw_missing(ref);
  return *r;
}

SandboxRecord resolve_sandbox(const Registry& reg, const std::string& ref, const std::optional<std::string>& owner) {
  auto r = find_sandbox(reg, ref, owner);
  if (!r) throw_missing(ref);
  return *r;
}

}  // namespace sbx
