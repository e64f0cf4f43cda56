// The files of an image, from an OCI layout directory or a tar archive.
//
// An archive is read in passes (one to list its members, then one per member
// wanted) instead of being unpacked to a scratch directory: an uncompressed
// archive is skipped through by seeking, and nothing is written but the root.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/lazy_libs.hpp"
#include "core/oci_detail.hpp"
#include "core/safe_path.hpp"

namespace sbx::oci::detail {

const char* const kImageHint =
    "give the output of `docker save`, `podman save` (--format docker-archive or oci-archive) or an OCI layout "
    "directory";

namespace {

const ArchiveApi& la() { return archive_api(); }

class DirSource : public Source {
 public:
  explicit DirSource(const std::string& dir) : root_(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    if (!root_) throw sys_error("cannot open " + dir, errno);
  }
  bool has(const std::string& name) override {
    try {
      struct stat st;
      Fd fd = open_in_root(root_.get(), name, O_RDONLY | O_CLOEXEC);
      return ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode);
    } catch (const Error&) {
      return false;
    }
  }
  void stream(const std::string& name, const std::function<void(const ReadFn&)>& fn) override {
    // RESOLVE_IN_ROOT: a symlink in the layout cannot point sbx at a host file.
    Fd fd = open_in_root(root_.get(), name, O_RDONLY | O_CLOEXEC);
    ReadFn read = [&](char* buf, size_t cap) -> size_t {
      for (;;) {
        ssize_t n = ::read(fd.get(), buf, cap);
        if (n >= 0) return static_cast<size_t>(n);
        if (errno != EINTR) throw sys_error("cannot read " + name, errno);
      }
    };
    fn(read);
  }

 private:
  Fd root_;
};

// Lexically normalises a path inside an archive ("" when it climbs out).
std::string normalise(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string part = path.substr(i, j - i);
    if (part == "..") {
      if (parts.empty()) return "";
      parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out;
  for (auto& p : parts) out += (out.empty() ? "" : "/") + p;
  return out;
}

class TarSource : public Source {
 public:
  explicit TarSource(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (!fd_) throw sys_error("cannot open " + path, errno);
    scan();
  }
  bool has(const std::string& name) override { return !resolve(name).empty(); }
  void stream(const std::string& name, const std::function<void(const ReadFn&)>& fn) override {
    std::string real = resolve(name);
    if (real.empty()) throw Error(Errc::not_found, "the archive has no member " + name).set_hint(kImageHint);
    Reader r(*this);
    archive_entry* e = nullptr;
    while (r.next(e)) {
      if (la().archive_entry_hardlink(e) || la().archive_entry_filetype(e) != AE_IFREG) continue;
      if (normalise(la().archive_entry_pathname(e) ? la().archive_entry_pathname(e) : "") != real) continue;
      ReadFn read = [&](char* buf, size_t cap) -> size_t {
        la_ssize_t n = la().archive_read_data(r.a, buf, cap);
        if (n < 0) r.fail("reading " + name);
        return static_cast<size_t>(n);
      };
      return fn(read);
    }
    throw Error(Errc::not_found, "the archive has no member " + name).set_hint(kImageHint);
  }

 private:
  // One pass over the archive, from its start.
  struct Reader {
    explicit Reader(TarSource& src) : path(src.path_) {
      if (::lseek(src.fd_.get(), 0, SEEK_SET) != 0) throw sys_error("cannot rewind " + path, errno);
      a = la().archive_read_new();
      if (!a) throw Error(Errc::internal, "libarchive cannot allocate a reader");
      la().archive_read_support_filter_gzip(a);
      la().archive_read_support_filter_zstd(a);
      la().archive_read_support_filter_xz(a);
      la().archive_read_support_format_tar(a);
      if (la().archive_read_open_fd(a, src.fd_.get(), 64 * 1024) != ARCHIVE_OK) {
        la().archive_read_free(a);  // the destructor does not run for a constructor that throws
        throw Error(Errc::invalid_argument, path + " is neither a tar archive nor a directory")
            .set_hint(kImageHint);
      }
    }
    ~Reader() { la().archive_read_free(a); }
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;
    bool next(archive_entry*& e) {
      int r = la().archive_read_next_header(a, &e);
      if (r == ARCHIVE_EOF) return false;
      if (r < ARCHIVE_WARN) fail("reading");
      return true;
    }
    [[noreturn]] void fail(const std::string& what) const {
      const char* why = la().archive_error_string(a);
      throw Error(Errc::invalid_argument, what + " " + path + ": " + (why ? why : "unknown error"))
          .set_hint("the archive is damaged or not a tar; save the image again");
    }
    std::string path;
    archive* a = nullptr;
  };

  // Lists the files, and the links among them (old docker saves link a
  // layer shared by two images from the second one's directory).
  void scan() {
    Reader r(*this);
    archive_entry* e = nullptr;
    while (r.next(e)) {
      const char* p = la().archive_entry_pathname(e);
      std::string name = normalise(p ? p : "");
      if (name.empty()) continue;
      if (const char* hl = la().archive_entry_hardlink(e)) {
        links_[name] = normalise(hl);
      } else if (la().archive_entry_filetype(e) == AE_IFLNK && la().archive_entry_symlink(e)) {
        std::string t = la().archive_entry_symlink(e);
        size_t slash = name.rfind('/');
        links_[name] = normalise(t[0] == '/' || slash == std::string::npos ? t : name.substr(0, slash) + "/" + t);
      } else if (la().archive_entry_filetype(e) == AE_IFREG) {
        files_.insert(name);
      }
    }
  }
  std::string resolve(const std::string& name) const {
    std::string n = normalise(name);
    for (int hops = 0; hops < 8 && !n.empty(); ++hops) {
      if (files_.count(n)) return n;
      auto it = links_.find(n);
      if (it == links_.end()) return "";
      n = it->second;
    }
    return "";
  }

  std::string path_;
  Fd fd_;
  std::set<std::string> files_;
  std::map<std::string, std::string> links_;
};

}  // namespace

std::unique_ptr<Source> open_source(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw sys_error("cannot open " + path, errno).set_hint(kImageHint);
  if (S_ISDIR(st.st_mode)) return std::make_unique<DirSource>(path);
  return std::make_unique<TarSource>(path);
}

}  // namespace sbx::oci::detail
