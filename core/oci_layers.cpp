// Applying one OCI layer to a root directory.
//
// The blob flows through three stages: the bytes as stored (hashed: the
// manifest's digest), libarchive's decompression (gzip, zstd, xz) with the
// "raw" format, whose output is hashed again (the config's diff_id), and
// libarchive's tar reader, whose entries are written here by hand rather than
// by archive_write_disk: every parent is opened with O_NOFOLLOW from the root
// down, so a symlink planted by an earlier entry or layer is never followed,
// and whiteouts need layer-aware bookkeeping anyway.
//
// Choices, for the record: FIFOs are created (harmless, some images have
// /dev/initctl-like ones); sockets are skipped (tar cannot restore them);
// char/block devices are refused (a sandbox gets its own /dev, and a device
// node in a shared read-only image is the classic way out of a container).
// Setuid/setgid bits are kept as the image has them: inside sbx sandboxes
// processes run with no_new_privs and without capabilities, so they grant
// nothing. Ownership is the layer's uid/gid (sbx runs as root; an
// unprivileged caller keeps its own). Extended attributes are not restored.
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/fsutil.hpp"
#include "core/lazy_libs.hpp"
#include "core/oci_detail.hpp"

namespace sbx::oci::detail {

namespace {

const ArchiveApi& la() { return archive_api(); }

constexpr size_t kChunk = 128 * 1024;
constexpr const char* kRebuildHint =
    "the image is broken or hostile: rebuild it so every path stays inside its root, or import a different image";
constexpr const char* kDamagedHint = "the archive is damaged or was altered after it was saved; save the image again";

// ---- the stream: stored bytes -> decompressed bytes -> tar entries ----------

// Exceptions must not cross libarchive's C frames, so a failing callback parks
// its Error here and returns ARCHIVE_FATAL; whoever sees the failure rethrows it.
struct Stream {
  const ReadFn* read = nullptr;
  std::string layer;
  Sha256 raw_hash, diff_hash;
  uint64_t raw_bytes = 0;
  std::vector<char> raw_buf = std::vector<char>(kChunk), diff_buf = std::vector<char>(kChunk);
  archive* decomp = nullptr;  // stage 2: filters + the raw format
  archive* tar = nullptr;     // stage 3: the tar reader
  std::optional<Error> parked;

  ~Stream() {
    if (tar) la().archive_read_free(tar);
    if (decomp) la().archive_read_free(decomp);
  }

  /// Rethrows a parked Error, or describes the failure libarchive reports on `a`.
  [[noreturn]] void fail(archive* a, const std::string& what) const {
    if (parked) throw *parked;
    const char* why = nullptr;
    if (decomp && la().archive_errno(decomp) != 0) why = la().archive_error_string(decomp);
    if (!why && a) why = la().archive_error_string(a);
    throw Error(Errc::invalid_argument, "layer " + layer + ": " + what + ": " + (why ? why : "unknown error"))
        .set_hint(kDamagedHint);
  }
};

la_ssize_t read_stored(archive*, void* p, const void** out) {
  auto* s = static_cast<Stream*>(p);
  try {
    size_t n = (*s->read)(s->raw_buf.data(), s->raw_buf.size());
    s->raw_hash.update(s->raw_buf.data(), n);
    s->raw_bytes += n;
    *out = s->raw_buf.data();
    return static_cast<la_ssize_t>(n);
  } catch (const Error& e) {
    s->parked = e;
  } catch (const std::exception& e) {
    s->parked = Error(Errc::internal, e.what());
  }
  return ARCHIVE_FATAL;
}

la_ssize_t read_decompressed(archive*, void* p, const void** out) {
  auto* s = static_cast<Stream*>(p);
  la_ssize_t n = la().archive_read_data(s->decomp, s->diff_buf.data(), s->diff_buf.size());
  if (n < 0) return ARCHIVE_FATAL;
  try {
    s->diff_hash.update(s->diff_buf.data(), static_cast<size_t>(n));
  } catch (const Error& e) {
    s->parked = e;
    return ARCHIVE_FATAL;
  }
  *out = s->diff_buf.data();
  return n;
}

void open_stream(Stream& s) {
  s.decomp = la().archive_read_new();
  s.tar = la().archive_read_new();
  if (!s.decomp || !s.tar) throw Error(Errc::internal, "libarchive cannot allocate a reader");
  // A missing filter only warns (libarchive then tries an external program).
  la().archive_read_support_filter_gzip(s.decomp);
  la().archive_read_support_filter_zstd(s.decomp);
  la().archive_read_support_filter_xz(s.decomp);
  la().archive_read_support_format_raw(s.decomp);
  if (la().archive_read_open(s.decomp, &s, nullptr, read_stored, nullptr) != ARCHIVE_OK)
    s.fail(s.decomp, "cannot read it");
  archive_entry* e = nullptr;
  int r = la().archive_read_next_header(s.decomp, &e);
  if (r == ARCHIVE_EOF) s.fail(s.decomp, "it is empty, not a tar");
  if (r < ARCHIVE_WARN) s.fail(s.decomp, "cannot decompress it");
  la().archive_read_support_format_tar(s.tar);
  if (la().archive_read_open(s.tar, &s, nullptr, read_decompressed, nullptr) != ARCHIVE_OK)
    s.fail(s.tar, "not a tar archive");
}

// Reads what the tar reader left (end-of-archive padding, a compressor's
// trailer) so both digests cover the whole blob.
void drain(Stream& s) {
  for (;;) {
    la_ssize_t n = la().archive_read_data(s.decomp, s.diff_buf.data(), s.diff_buf.size());
    if (n < 0) s.fail(s.decomp, "cannot decompress it");
    if (n == 0) break;
    s.diff_hash.update(s.diff_buf.data(), static_cast<size_t>(n));
  }
  for (;;) {
    size_t n = (*s.read)(s.raw_buf.data(), s.raw_buf.size());
    if (n == 0) break;
    s.raw_hash.update(s.raw_buf.data(), n);
    s.raw_bytes += n;
  }
}

void verify(Stream& s, const LayerCheck& check) {
  auto mismatch = [&](const std::string& what) {
    return Error(Errc::invalid_argument, "layer " + check.name + ": " + what).set_hint(kDamagedHint);
  };
  if (check.size >= 0 && s.raw_bytes != static_cast<uint64_t>(check.size))
    throw mismatch("it is " + std::to_string(s.raw_bytes) + " bytes, the manifest says " + std::to_string(check.size));
  std::string raw = s.raw_hash.digest(), diff = s.diff_hash.digest();
  if (!check.digest.empty() && raw != check.digest) throw mismatch("its content has digest " + raw);
  if (!check.diff_id.empty() && diff != check.diff_id)
    throw mismatch("its uncompressed content has digest " + diff + ", the image config says " + check.diff_id);
}

// ---- paths --------------------------------------------------------------------

}  // namespace

std::optional<std::vector<std::string>> components(std::string_view name) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= name.size()) {
    size_t j = name.find('/', i);
    if (j == std::string_view::npos) j = name.size();
    std::string_view part = name.substr(i, j - i);
    if (part == "..") return std::nullopt;
    if (!part.empty() && part != ".") out.emplace_back(part);
    i = j + 1;
  }
  return out;
}

namespace {

std::string join(const std::vector<std::string>& parts, size_t n) {
  std::string s;
  for (size_t i = 0; i < n && i < parts.size(); ++i) {
    if (i) s += '/';
    s += parts[i];
  }
  return s;
}

// rm -rf of dir_fd/name without following symlinks.
void remove_tree_at(int dir_fd, const std::string& name) {
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return;
    throw sys_error("cannot inspect " + name, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) throw sys_error("cannot open " + name, errno);
    DIR* d = ::fdopendir(fd);
    if (!d) {
      int err = errno;
      ::close(fd);
      throw sys_error("cannot list " + name, err);
    }
    std::vector<std::string> kids;
    while (dirent* de = ::readdir(d)) {
      std::string k = de->d_name;
      if (k != "." && k != "..") kids.push_back(std::move(k));
    }
    try {
      for (auto& k : kids) remove_tree_at(::dirfd(d), k);
    } catch (...) {
      ::closedir(d);
      throw;
    }
    ::closedir(d);
  }
  if (::unlinkat(dir_fd, name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT)
    throw sys_error("cannot remove " + name, errno);
}

std::string entry_text(const char* mbs, const char* utf8) { return mbs ? mbs : utf8 ? utf8 : ""; }

// ---- writing entries ------------------------------------------------------------

class Applier {
 public:
  Applier(int root_fd, Stream& s) : root_(root_fd), s_(s), privileged_(::geteuid() == 0) {}

  void apply(archive_entry* e);
  /// Sets the directories' mtimes, which writing their children disturbed.
  void finish();

 private:
  struct Meta {
    uid_t uid;
    gid_t gid;
    mode_t perm;
    timespec times[2];
  };
  [[noreturn]] void refuse(const std::string& entry, const std::string& what) const {
    throw Error(Errc::invalid_argument, "layer " + s_.layer + ": entry '" + entry + "' " + what).set_hint(kRebuildHint);
  }
  Error sys(const std::string& entry, const std::string& what, int err) const {
    return sys_error("layer " + s_.layer + ": entry '" + entry + "': " + what, err);
  }
  Fd walk(const std::vector<std::string>& parts, size_t n, bool create, size_t* failed_at) const;
  Fd open_dir(const std::string& entry, const std::vector<std::string>& parts, size_t n, bool create) const;
  int open_parent(const std::string& entry, const std::vector<std::string>& parts, bool create);
  void mark_added(const std::vector<std::string>& parts);
  bool clear_spot(int parent, const std::string& entry, const std::string& base, bool keep_dir);
  void whiteout(const std::string& entry, std::vector<std::string> parts);
  void opaque(const std::string& entry, const std::vector<std::string>& dir);
  void hard_link(const std::string& entry, int parent, const std::vector<std::string>& parts, const std::string& target);
  void write_file(const std::string& entry, int parent, const std::string& base, const Meta& m);
  void make_dir(const std::string& entry, int parent, const std::vector<std::string>& parts, const Meta& m);
  void make_node(const std::string& entry, int parent, const std::string& base, mode_t type, const std::string& target,
                 const Meta& m);
  void set_owner(const std::string& entry, int fd, const char* name, const Meta& m) const;

  int root_;
  Stream& s_;
  bool privileged_;
  // Paths this layer wrote: whiteouts hide only what lower layers wrote.
  std::unordered_set<std::string> added_;
  std::vector<std::pair<std::string, Meta>> dirs_;
  // The last parent opened, for the common run of entries in one directory.
  std::string cached_path_;
  bool cache_valid_ = false;
  Fd cached_fd_;
  std::vector<char> write_buf_ = std::vector<char>(kChunk);
};

// Opens parts[0..n) below the root, one component at a time with O_NOFOLLOW;
// on failure returns an empty Fd with errno set and *failed_at the component.
Fd Applier::walk(const std::vector<std::string>& parts, size_t n, bool create, size_t* failed_at) const {
  Fd cur(::openat(root_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cur) return Fd();
  for (size_t i = 0; i < n; ++i) {
    const char* c = parts[i].c_str();
    int fd = ::openat(cur.get(), c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
      if (::mkdirat(cur.get(), c, 0755) != 0 && errno != EEXIST) fd = -1;
      else fd = ::openat(cur.get(), c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
      *failed_at = i;
      return Fd();
    }
    cur.reset(fd);
  }
  return cur;
}

Fd Applier::open_dir(const std::string& entry, const std::vector<std::string>& parts, size_t n, bool create) const {
  size_t at = 0;
  Fd fd = walk(parts, n, create, &at);
  if (fd) return fd;
  int err = errno;
  std::string prefix = join(parts, at + 1);
  if (err == ELOOP || err == ENOTDIR) {
    Fd up = walk(parts, at, false, &at);
    struct stat st;
    bool link = up && ::fstatat(up.get(), parts[at].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
    refuse(entry, link ? "goes through '" + prefix + "', a symbolic link (which is never followed)"
                       : "goes through '" + prefix + "', which is not a directory");
  }
  if (err == ENOENT && !create) return Fd();
  throw sys(entry, "cannot open the directory " + prefix, err);
}

int Applier::open_parent(const std::string& entry, const std::vector<std::string>& parts, bool create) {
  std::string path = join(parts, parts.size() - 1);
  if (cache_valid_ && path == cached_path_) return cached_fd_.get();
  Fd fd = open_dir(entry, parts, parts.size() - 1, create);
  if (!fd) return -1;
  cached_fd_ = std::move(fd);
  cached_path_ = path;
  cache_valid_ = true;
  return cached_fd_.get();
}

void Applier::mark_added(const std::vector<std::string>& parts) {
  std::string p;
  for (auto& c : parts) {
    if (!p.empty()) p += '/';
    p += c;
    added_.insert(p);
  }
}

// Makes room for a new entry: an existing non-directory goes, and so does an
// existing directory unless `keep_dir` (a directory entry merges into it).
// Returns whether a directory was kept.
bool Applier::clear_spot(int parent, const std::string& entry, const std::string& base, bool keep_dir) {
  struct stat st;
  if (::fstatat(parent, base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return false;
    throw sys(entry, "cannot inspect it", errno);
  }
  if (S_ISDIR(st.st_mode)) {
    if (keep_dir) return true;
    with_context("layer " + s_.layer + ": entry '" + entry + "'", [&] { remove_tree_at(parent, base); });
    cache_valid_ = false;  // the cached parent may have been inside
    return false;
  }
  if (::unlinkat(parent, base.c_str(), 0) != 0) throw sys(entry, "cannot replace it", errno);
  return false;
}

void Applier::apply(archive_entry* e) {
  std::string name = entry_text(la().archive_entry_pathname(e), la().archive_entry_pathname_utf8(e));
  auto parts = components(name);
  if (!parts) refuse(name, "has a '..' component, which would leave the root");
  if (parts->empty()) return;  // the root itself keeps the mode its creator gave it
  const std::string base = parts->back();
  if (base.rfind(".wh.", 0) == 0) return whiteout(name, std::move(*parts));
  const char* hardlink_mbs = la().archive_entry_hardlink(e);
  const char* hardlink_utf8 = hardlink_mbs ? nullptr : la().archive_entry_hardlink_utf8(e);
  mode_t type = la().archive_entry_filetype(e);
  if (!hardlink_mbs && !hardlink_utf8) {
    if (type == AE_IFCHR || type == AE_IFBLK)
      refuse(name, "is a device node; images may not carry devices (a sandbox gets its own /dev)");
    if (type == AE_IFSOCK) return;
  }
  int parent = open_parent(name, *parts, true);
  mark_added(*parts);
  if (hardlink_mbs || hardlink_utf8) return hard_link(name, parent, *parts, entry_text(hardlink_mbs, hardlink_utf8));
  Meta m{la().archive_entry_uid(e) < 0 ? 0 : static_cast<uid_t>(la().archive_entry_uid(e)),
         la().archive_entry_gid(e) < 0 ? 0 : static_cast<gid_t>(la().archive_entry_gid(e)),
         static_cast<mode_t>(la().archive_entry_perm(e) & 07777),
         {}};
  m.times[0].tv_sec = m.times[1].tv_sec = la().archive_entry_mtime(e);
  m.times[0].tv_nsec = m.times[1].tv_nsec = la().archive_entry_mtime_nsec(e);
  switch (type) {
    case AE_IFDIR:
      return make_dir(name, parent, *parts, m);
    case AE_IFREG:
      return write_file(name, parent, base, m);
    case AE_IFLNK:
      return make_node(name, parent, base, type,
                       entry_text(la().archive_entry_symlink(e), la().archive_entry_symlink_utf8(e)), m);
    case AE_IFIFO:
      return make_node(name, parent, base, type, "", m);
    default:
      refuse(name, "has an unknown file type");
  }
}

void Applier::whiteout(const std::string& entry, std::vector<std::string> parts) {
  std::string base = parts.back();
  parts.pop_back();
  if (base == ".wh..wh..opq") return opaque(entry, parts);
  if (base.rfind(".wh..wh.", 0) == 0) return;  // aufs bookkeeping (.wh..wh.plnk, ...), not a whiteout
  std::string victim = base.substr(4);
  if (victim.empty() || victim == "." || victim == "..") refuse(entry, "is a whiteout of nothing");
  parts.push_back(victim);
  if (added_.count(join(parts, parts.size()))) return;  // this layer's own file: only later layers can hide it
  int parent = open_parent(entry, parts, false);
  if (parent < 0) return;
  clear_spot(parent, entry, victim, false);
}

// `.wh..wh..opq`: the directory hides everything lower layers put in it.
void Applier::opaque(const std::string& entry, const std::vector<std::string>& dir) {
  Fd fd = open_dir(entry, dir, dir.size(), true);
  mark_added(dir);
  std::string prefix = dir.empty() ? "" : join(dir, dir.size()) + "/";
  DIR* d = ::fdopendir(::dup(fd.get()));
  if (!d) throw sys(entry, "cannot list its directory", errno);
  std::vector<std::string> lower;
  while (dirent* de = ::readdir(d)) {
    std::string k = de->d_name;
    if (k != "." && k != ".." && !added_.count(prefix + k)) lower.push_back(std::move(k));
  }
  ::closedir(d);
  for (auto& k : lower) clear_spot(fd.get(), entry, k, false);
}

void Applier::hard_link(const std::string& entry, int parent, const std::vector<std::string>& parts,
                        const std::string& target) {
  const std::string& base = parts.back();
  auto t = components(target);
  if (!t || t->empty()) refuse(entry, "is a hard link to '" + target + "', outside the image");
  Fd dir = open_dir(entry, *t, t->size() - 1, false);
  struct stat st;
  if (!dir || ::fstatat(dir.get(), t->back().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    refuse(entry, "is a hard link to '" + target + "', which is not in the image");
  if (S_ISDIR(st.st_mode)) refuse(entry, "is a hard link to the directory '" + target + "'");
  if (*t == parts) return;  // a link to itself: already there
  clear_spot(parent, entry, base, false);
  if (::linkat(dir.get(), t->back().c_str(), parent, base.c_str(), 0) != 0)
    throw sys(entry, "cannot link it to " + target, errno);
}

void Applier::set_owner(const std::string& entry, int fd, const char* name, const Meta& m) const {
  int r = name ? ::fchownat(fd, name, m.uid, m.gid, AT_SYMLINK_NOFOLLOW) : ::fchown(fd, m.uid, m.gid);
  // Unprivileged (tests, a user's own import), files stay the caller's.
  if (r != 0 && !(errno == EPERM && !privileged_)) throw sys(entry, "cannot set its owner", errno);
}

void Applier::write_file(const std::string& entry, int parent, const std::string& base, const Meta& m) {
  clear_spot(parent, entry, base, false);
  Fd fd(::openat(parent, base.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) throw sys(entry, "cannot create it", errno);
  for (;;) {
    la_ssize_t n = la().archive_read_data(s_.tar, write_buf_.data(), write_buf_.size());
    if (n < 0) s_.fail(s_.tar, "reading '" + entry + "'");
    if (n == 0) break;
    try {
      write_all(fd.get(), std::string_view(write_buf_.data(), static_cast<size_t>(n)));
    } catch (Error& e) {
      e.add_context("layer " + s_.layer + ": writing '" + entry + "'");
      throw;
    }
  }
  set_owner(entry, fd.get(), nullptr, m);
  // After chown, which clears setuid bits.
  if (::fchmod(fd.get(), m.perm) != 0) throw sys(entry, "cannot set its mode", errno);
  if (::futimens(fd.get(), m.times) != 0) throw sys(entry, "cannot set its mtime", errno);
}

void Applier::make_dir(const std::string& entry, int parent, const std::vector<std::string>& parts, const Meta& m) {
  const std::string& base = parts.back();
  if (!clear_spot(parent, entry, base, true) && ::mkdirat(parent, base.c_str(), 0700) != 0)
    throw sys(entry, "cannot create the directory", errno);
  Fd fd(::openat(parent, base.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) throw sys(entry, "cannot open the directory", errno);
  set_owner(entry, fd.get(), nullptr, m);
  if (::fchmod(fd.get(), m.perm) != 0) throw sys(entry, "cannot set its mode", errno);
  dirs_.emplace_back(join(parts, parts.size()), m);
}

void Applier::make_node(const std::string& entry, int parent, const std::string& base, mode_t type,
                        const std::string& target, const Meta& m) {
  clear_spot(parent, entry, base, false);
  if (type == AE_IFLNK) {
    if (target.empty()) refuse(entry, "is a symbolic link without a target");
    if (::symlinkat(target.c_str(), parent, base.c_str()) != 0) throw sys(entry, "cannot create the symlink", errno);
  } else if (::mknodat(parent, base.c_str(), S_IFIFO | 0600, 0) != 0) {
    throw sys(entry, "cannot create the FIFO", errno);
  }
  set_owner(entry, parent, base.c_str(), m);
  // A symlink's own mode means nothing on Linux; a FIFO we just made is not a symlink.
  if (type != AE_IFLNK && ::fchmodat(parent, base.c_str(), m.perm, 0) != 0)
    throw sys(entry, "cannot set its mode", errno);
  if (::utimensat(parent, base.c_str(), m.times, AT_SYMLINK_NOFOLLOW) != 0)
    throw sys(entry, "cannot set its mtime", errno);
}

void Applier::finish() {
  // Deepest last is not needed: setting a directory's mtime leaves its parent's alone.
  for (auto& [path, m] : dirs_) {
    auto parts = components(path);
    size_t at = 0;
    Fd fd = walk(*parts, parts->size(), false, &at);
    if (fd) ::futimens(fd.get(), m.times);  // gone or replaced later in the layer: nothing to date
  }
}

}  // namespace

void apply_layer(int root_fd, const ReadFn& read, const LayerCheck& check) {
  Stream s;
  s.read = &read;
  s.layer = check.name;
  open_stream(s);
  Applier applier(root_fd, s);
  for (;;) {
    archive_entry* e = nullptr;
    int r = la().archive_read_next_header(s.tar, &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) s.fail(s.tar, "reading its tar");
    applier.apply(e);
  }
  applier.finish();
  drain(s);
  verify(s, check);
}

}  // namespace sbx::oci::detail
