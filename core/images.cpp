#include "core/images.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx::images {

namespace {

bool is_hex(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string hex_of(const std::string& id) { return id.rfind("sha256:", 0) == 0 ? id.substr(7) : id; }

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The store's own lock: exclusive for what changes names or deletes images,
// shared for recording a user (so rm cannot delete an image a create is
// about to start on).
Fd store_lock(const std::string& dir, bool exclusive) {
  make_dirs(dir, 0755);
  return lock_file(dir + "/lock", exclusive);
}

// An image's directory, if `rootfs` is a store entry's root.
std::optional<std::string> entry_of(const std::string& rootfs) {
  auto slash = rootfs.find_last_of('/');
  if (slash == std::string::npos || slash == 0 || rootfs.substr(slash + 1) != "rootfs") return std::nullopt;
  std::string dir = rootfs.substr(0, slash);
  if (!path_exists(dir + "/image.json")) return std::nullopt;
  return dir;
}

std::string store_of(const std::string& image_dir) { return image_dir.substr(0, image_dir.find_last_of('/')); }

// Apparent size of a tree's files (not its directories), each inode once (a
// rootfs has hard links), not crossing mounts.
uint64_t tree_size(const std::string& root) {
  uint64_t total = 0;
  std::set<std::pair<dev_t, ino_t>> seen;
  std::vector<std::string> todo{root};
  struct stat top {};
  if (::lstat(root.c_str(), &top) != 0) return 0;
  while (!todo.empty()) {
    std::string dir = std::move(todo.back());
    todo.pop_back();
    for (auto& n : dir_entries(dir)) {
      std::string p = dir + "/" + n;
      struct stat st {};
      if (::lstat(p.c_str(), &st) != 0 || st.st_dev != top.st_dev) continue;
      if (S_ISDIR(st.st_mode)) {
        todo.push_back(p);
        continue;
      }
      if (st.st_nlink > 1 && !seen.insert({st.st_dev, st.st_ino}).second) continue;
      total += static_cast<uint64_t>(st.st_size);
    }
  }
  return total;
}

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

void check_image_name(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64 && (std::isalnum(static_cast<unsigned char>(name[0])) != 0);
  for (char c : name)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-');
  if (!ok)
    throw Error(Errc::invalid_argument, "'" + name.substr(0, 80) + "' is not an image name")
        .set_hint("use 1-64 of a-z, 0-9, _ . - starting with a letter or digit");
  if (name == kHostView)
    throw Error(Errc::invalid_argument, "'host' is not an image name: --image host means the host view")
        .set_hint("choose another name");
  if (name.size() >= 6 && is_hex(name))
    throw Error(Errc::invalid_argument, "'" + name + "' looks like an image id, not a name")
        .set_hint("use a name with a character outside 0-9 a-f");
}

Store::Store(std::string dir) : dir_(std::move(dir)) {}

std::optional<Image> Store::load(const std::string& hex) const {
  std::string d = dir_ + "/" + hex;
  auto text = read_file_if_exists(d + "/image.json");
  if (!text || !is_dir(d + "/rootfs")) return std::nullopt;
  Image img;
  img.id = "sha256:" + hex;
  img.dir = d;
  img.rootfs = d + "/rootfs";
  try {
    img.meta = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception&) {
    img.meta = nlohmann::json::object();  // still removable by id; gc judges it by its names and users
  }
  img.names = names_of(img.id);
  img.meta["names"] = img.names;
  return img;
}

std::vector<std::string> Store::names_of(const std::string& id) const {
  std::vector<std::string> out;
  for (auto& n : dir_entries(dir_ + "/names"))
    if (auto t = read_file_if_exists(dir_ + "/names/" + n); t && trim(*t) == id) out.push_back(n);
  return out;
}

std::optional<Image> Store::find(const std::string& ref) const {
  if (ref.empty()) return std::nullopt;
  if (ref.find('/') == std::string::npos && ref[0] != '.')
    if (auto t = read_file_if_exists(dir_ + "/names/" + ref)) return load(hex_of(trim(*t)));
  std::string hex = hex_of(ref);
  if (!is_hex(hex) || hex.size() < 6) return std::nullopt;
  if (hex.size() == 64) return load(hex);
  std::optional<Image> hit;
  for (auto& n : dir_entries(dir_)) {
    if (n.size() != 64 || n.compare(0, hex.size(), hex) != 0) continue;
    if (hit)
      throw Error(Errc::invalid_argument, "image id prefix '" + ref + "' is ambiguous")
          .set_hint("give more digits (see `sbx image ls`)");
    hit = load(n);
  }
  return hit;
}

Image Store::get(const std::string& ref) const {
  if (auto img = find(ref)) return *img;
  throw Error(Errc::not_found, "no image '" + ref.substr(0, 200) + "' in " + dir_)
      .set_hint(ref == kDefaultName ? "run `sbx image build default`"
                                    : "build it with `sbx image build " + ref.substr(0, 64) +
                                          " --packages ...`, or see `sbx image ls`");
}

std::vector<Image> Store::list() const {
  std::vector<Image> out;
  for (auto& n : dir_entries(dir_))
    if (n.size() == 64 && is_hex(n))
      if (auto img = load(n)) out.push_back(std::move(*img));
  std::sort(out.begin(), out.end(), [](const Image& a, const Image& b) {
    return a.meta.value("created_ms", int64_t{0}) < b.meta.value("created_ms", int64_t{0});
  });
  return out;
}

std::vector<User> Store::users(const Image& img) const {
  std::vector<User> out;
  for (auto& n : dir_entries(img.dir + "/users")) {
    auto dir = read_file_if_exists(img.dir + "/users/" + n);
    if (dir && is_dir(trim(*dir))) out.push_back({n, trim(*dir)});
  }
  return out;
}

void Store::write_names(const std::string& hex) {
  std::string d = dir_ + "/" + hex;
  auto text = read_file_if_exists(d + "/image.json");
  if (!text) return;
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception&) {
    return;
  }
  meta["names"] = names_of("sha256:" + hex);
  write_file_atomic(d + "/image.json", meta.dump(2) + "\n", 0644);
}

Image Store::add(const std::string& id, const std::function<nlohmann::json(const std::string&)>& fill, bool* hit) {
  std::string hex = hex_of(id);
  if (!id.empty() && (!is_hex(hex) || hex.size() != 64))
    throw Error(Errc::internal, "image id '" + id + "' is not a sha256 digest");
  make_dirs(dir_ + "/tmp", 0700);
  // An id known up front (a recipe's) is built once at a time: a second build
  // waits here, then finds the first's image. One learnt from the content (an
  // OCI manifest) gets a private temp name.
  std::string key = id.empty() ? "import-" + std::to_string(::getpid()) + "-" + std::to_string(now_ms()) : hex;
  Fd build_lock = lock_file(dir_ + "/tmp/" + key + ".lock", true);
  if (hit) *hit = false;
  if (auto img = id.empty() ? std::nullopt : load(hex)) {
    if (hit) *hit = true;
    return *img;
  }
  std::string tmp = dir_ + "/tmp/" + key + ".build";
  if (path_exists(tmp)) remove_tree(tmp);  // a killed build's leftovers: we hold its lock
  make_dirs(tmp + "/rootfs", 0755);
  try {
    nlohmann::json got = fill(tmp + "/rootfs");
    if (id.empty()) hex = hex_of(got.value("id", ""));
    if (!is_hex(hex) || hex.size() != 64) throw Error(Errc::internal, "the new image has no sha256 id");
    if (auto img = load(hex)) {  // the same content was imported before
      remove_tree(tmp);
      if (hit) *hit = true;
      return *img;
    }
    nlohmann::json meta = {{"id", "sha256:" + hex},
                           {"names", nlohmann::json::array()},
                           {"created_ms", now_ms()},
                           {"source", got.value("source", nlohmann::json::object())},
                           {"packages", got.value("packages", nlohmann::json::object())},
                           {"size", tree_size(tmp + "/rootfs")}};
    write_file_atomic(tmp + "/image.json", meta.dump(2) + "\n", 0644);
    if (::chmod(tmp.c_str(), 0755) != 0 || ::chmod((tmp + "/rootfs").c_str(), 0755) != 0)
      throw sys_error("making " + tmp + " readable", errno);
    Fd guard = store_lock(dir_, true);
    if (::rename(tmp.c_str(), (dir_ + "/" + hex).c_str()) != 0) throw sys_error("storing image " + hex, errno);
  } catch (...) {
    try {
      if (path_exists(tmp)) remove_tree(tmp);
    } catch (const Error&) {
    }
    if (id.empty()) ::unlink((dir_ + "/tmp/" + key + ".lock").c_str());
    throw;
  }
  if (id.empty()) ::unlink((dir_ + "/tmp/" + key + ".lock").c_str());
  return *load(hex);
}

void Store::tag(const std::string& name, const std::string& id) {
  check_image_name(name);
  std::string hex = hex_of(id);
  Fd guard = store_lock(dir_, true);
  if (!load(hex)) throw Error(Errc::not_found, "no image " + id + " to name " + name);
  make_dirs(dir_ + "/names", 0755);
  auto old = read_file_if_exists(dir_ + "/names/" + name);
  write_file_atomic(dir_ + "/names/" + name, "sha256:" + hex + "\n", 0644);
  if (old && hex_of(trim(*old)) != hex) write_names(hex_of(trim(*old)));
  write_names(hex);
}

void Store::delete_image(const Image& img) {
  // Out of sight first (a rename is atomic), then deleted at leisure.
  std::string trash = dir_ + "/tmp/" + hex_of(img.id) + ".trash";
  make_dirs(dir_ + "/tmp", 0700);
  if (path_exists(trash)) remove_tree(trash);
  if (::rename(img.dir.c_str(), trash.c_str()) != 0) throw sys_error("removing image " + img.id, errno);
  for (auto& n : img.names) ::unlink((dir_ + "/names/" + n).c_str());
  remove_tree(trash);
}

std::vector<std::string> Store::remove(const std::string& ref) {
  Fd guard = store_lock(dir_, true);
  Image img = get(ref);
  bool by_name = std::find(img.names.begin(), img.names.end(), ref) != img.names.end();
  std::vector<std::string> gone;
  if (by_name && img.names.size() > 1) {
    if (::unlink((dir_ + "/names/" + ref).c_str()) != 0) throw sys_error("removing the name " + ref, errno);
    write_names(hex_of(img.id));
    return {"name " + ref};
  }
  auto users = this->users(img);
  if (!users.empty()) {
    std::string ids;
    for (auto& u : users) ids += (ids.empty() ? "" : ", ") + u.sandbox_id;
    throw Error(Errc::conflict, "image " + (by_name ? ref + " (" + img.id.substr(0, 19) + ")" : img.id) + " is used by " +
                                    std::to_string(users.size()) + " sandbox" + (users.size() == 1 ? "" : "es") + ": " + ids)
        .set_hint("remove them first (`sbx rm ID`)");
  }
  for (auto& n : img.names) gone.push_back("name " + n);
  delete_image(img);
  gone.push_back("image " + img.id);
  return gone;
}

std::vector<GcAction> Store::gc(bool dry_run, const std::string& apt_cache) {
  std::vector<GcAction> out;
  auto act = [&](GcAction a, const std::function<void()>& fn) { run_gc_action(out, dry_run, std::move(a), fn); };
  if (!is_dir(dir_)) return out;
  Fd guard = store_lock(dir_, true);
  std::set<std::string> kept_debs;  // "name_version" of every package a kept image holds
  for (auto& img : list()) {
    auto users = this->users(img);
    for (auto& n : dir_entries(img.dir + "/users"))
      if (std::none_of(users.begin(), users.end(), [&](const User& u) { return u.sandbox_id == n; }))
        act({"image_user", img.id.substr(0, 19) + " " + n, "its sandbox is gone", false, ""},
            [&] { ::unlink((img.dir + "/users/" + n).c_str()); });
    if (img.names.empty() && users.empty()) {
      act({"image", img.id, "no name and no sandbox uses it", false, ""}, [&] { delete_image(img); });
      continue;
    }
    if (auto pkgs = img.meta.find("packages"); pkgs != img.meta.end() && pkgs->is_object())
      for (auto& [pkg, version] : pkgs->items())
        if (version.is_string()) kept_debs.insert(pkg + "_" + version.get<std::string>());
  }
  // A build holds its id's lock while it runs: what is left without one was abandoned.
  for (auto& n : dir_entries(dir_ + "/tmp")) {
    auto dot = n.find('.');
    if (dot == std::string::npos || n.substr(dot) == ".lock") continue;
    Fd lock(::open((dir_ + "/tmp/" + n.substr(0, dot) + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!lock || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) continue;
    act({"image_tmp", dir_ + "/tmp/" + n, "an abandoned build", false, ""}, [&] { remove_tree(dir_ + "/tmp/" + n); });
  }
  if (apt_cache.empty()) return out;
  // The cache's files are NAME_VERSION_ARCH.deb with the version's ':' written as %3a.
  for (auto& n : dir_entries(apt_cache)) {
    if (n.size() < 5 || n.substr(n.size() - 4) != ".deb") continue;
    std::string key = n.substr(0, n.rfind('_'));
    for (size_t p; (p = key.find("%3a")) != std::string::npos;) key.replace(p, 3, ":");
    if (kept_debs.count(key)) continue;
    act({"apt_cache", apt_cache + "/" + n, "no stored image holds this package version", false, ""}, [&] {
      if (::unlink((apt_cache + "/" + n).c_str()) != 0) throw sys_error("removing " + n, errno);
    });
  }
  return out;
}

Store store_for(const Config& cfg) { return Store(cfg.images_dir); }

namespace {
// What resolve needs on every create: the rootfs a name or full id points at,
// without parsing image.json or listing names (a create must stay cheap).
std::optional<std::string> quick_rootfs(const std::string& store, const std::string& ref) {
  std::string hex;
  if (ref.find('/') == std::string::npos && ref[0] != '.')
    if (auto t = read_file_if_exists(store + "/names/" + ref)) hex = hex_of(trim(*t));
  if (hex.empty() && hex_of(ref).size() == 64 && is_hex(hex_of(ref))) hex = hex_of(ref);
  if (hex.empty()) return std::nullopt;
  std::string dir = store + "/" + hex;
  if (!is_dir(dir + "/rootfs") || !path_exists(dir + "/image.json")) return std::nullopt;
  return dir + "/rootfs";
}
}  // namespace

std::string resolve(const std::string& ref, const std::string& driver, const Config& cfg, const DriverTable& drivers) {
  if (ref == kHostView) return "";
  // A path: a directory of the caller's (normalize_spec checks it is absolute and there).
  if (ref.find('/') != std::string::npos) return ref;
  if (!ref.empty()) {
    if (auto rootfs = quick_rootfs(cfg.images_dir, ref)) return *rootfs;
    return store_for(cfg).get(ref).rootfs;  // an id prefix, or not there: get() says which
  }
  auto* info = find_driver(drivers, driver);
  if (!info || !info->default_image || cfg.default_image == kHostView) return "";
  if (auto rootfs = quick_rootfs(cfg.images_dir, cfg.default_image)) return *rootfs;
  auto origin = cfg.origin.find("defaults.image");
  // The built-in default not built yet: the host view, as before images existed (doctor says so).
  if (origin == cfg.origin.end() || origin->second == "default") return "";
  return with_context("the default image (defaults.image, from " + origin->second + ")",
                      [&] { return store_for(cfg).get(cfg.default_image).rootfs; });
}

void add_user(const std::string& rootfs, const std::string& sandbox_id, const std::string& sandbox_dir) {
  if (rootfs.empty()) return;
  if (!is_dir(rootfs))
    throw Error(Errc::not_found, "the image at " + rootfs + " was removed").set_hint("see `sbx image ls`");
  auto dir = entry_of(rootfs);
  if (!dir) return;
  Fd guard = store_lock(store_of(*dir), false);
  // Under the lock, rm has either deleted the image (then this fails) or sees the marker.
  if (!is_dir(rootfs))
    throw Error(Errc::not_found, "the image at " + rootfs + " was removed").set_hint("see `sbx image ls`");
  make_dirs(*dir + "/users", 0755);
  write_file_atomic(*dir + "/users/" + sandbox_id, sandbox_dir + "\n", 0644, Durability::survive_process);
}

void drop_user(const std::string& rootfs, const std::string& sandbox_id) {
  auto dir = entry_of(rootfs);
  if (!dir) return;
  ::unlink((*dir + "/users/" + sandbox_id).c_str());
}

}  // namespace sbx::images
