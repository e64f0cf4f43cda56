// Files through the API: ours (raw bytes or a tar, streamed through temp
// files) and the platform's JSON form ({"path", "content", "encoding"}).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/copy.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/safe_path.hpp"
#include "core/units.hpp"
#include "core/wire.hpp"
#include "server/api_internal.hpp"

namespace sbx::server {

using nlohmann::json;

namespace {

// Writes one file's content to a descriptor (GET of a regular file, raw).
class RawFileSink : public EntrySink {
 public:
  explicit RawFileSink(int fd) : fd_(fd) {}
  void put(const FileEntry& e, const std::function<bool(std::string&)>& content) override {
    if (e.type != "file") throw Error(Errc::invalid_argument, "not a regular file; ask with format=tar");
    std::string chunk;
    while (content(chunk)) {
      write_all(fd_, chunk);
      chunk.clear();
    }
  }

 private:
  int fd_;
};

// Collects one regular file's content in memory, up to a cap (the JSON GET).
class StringSink : public EntrySink {
 public:
  explicit StringSink(size_t cap) : cap_(cap) {}
  void put(const FileEntry& e, const std::function<bool(std::string&)>& content) override {
    if (e.type != "file") throw Error(Errc::invalid_argument, "not a regular file");
    std::string chunk;
    while (content(chunk)) {
      if (data.size() + chunk.size() > cap_)
        throw Error(Errc::too_large, "the file is larger than " + format_size(cap_) + ", the cap of a JSON read")
            .set_hint("read it raw: GET /v1/sandboxes/{id}/files?path=P without encoding");
      data += chunk;
      chunk.clear();
    }
  }
  std::string data;

 private:
  size_t cap_;
};

// One regular file whose content is a descriptor (PUT of a raw body).
class RawFileSource : public EntrySource {
 public:
  explicit RawFileSource(int fd) : fd_(fd) {}
  bool next(FileEntry& e) override {
    if (done_) return false;
    done_ = true;
    struct stat st {};
    ::fstat(fd_, &st);
    e = FileEntry{"", "file", 0644, static_cast<uint64_t>(st.st_size), 0, ""};
    return true;
  }
  bool read(std::string& chunk) override {
    chunk.resize(64 * 1024);
    ssize_t n = ::read(fd_, chunk.data(), chunk.size());
    if (n < 0) throw sys_error("reading the upload", errno);
    chunk.resize(static_cast<size_t>(n));
    return n > 0;
  }

 private:
  int fd_;
  bool done_ = false;
};

// The missing directories below an existing one, then one file from memory:
// a write that creates its parents, like `mkdir -p` then the write.
class NewFileSource : public EntrySource {
 public:
  NewFileSource(std::vector<std::string> dirs, std::string file, std::string content)
      : dirs_(std::move(dirs)), file_(std::move(file)), content_(std::move(content)) {}
  bool next(FileEntry& e) override {
    if (i_ < dirs_.size()) {
      e = FileEntry{dirs_[i_++], "dir", 0755, 0, 0, ""};
      return true;
    }
    if (i_ > dirs_.size()) return false;
    ++i_;
    e = FileEntry{file_, "file", 0644, content_.size(), 0, ""};
    return true;
  }
  bool read(std::string& chunk) override {
    if (sent_) return false;
    sent_ = true;
    chunk = content_;
    return !chunk.empty();
  }

 private:
  std::vector<std::string> dirs_;
  std::string file_, content_;
  size_t i_ = 0;
  bool sent_ = false;
};

Fd temp_file(const std::string& dir) {
  make_dirs(dir, 0700);
  Fd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) throw sys_error("cannot create a temporary file in " + dir, errno);
  return fd;
}

std::string absolute_path_param(const HttpRequest& req, const char* route) {
  const std::string* p = query(req, "path");
  if (!p || p->empty() || p->front() != '/') throw Error(Errc::invalid_argument, std::string(route) + " needs ?path=/absolute/path");
  return clean_path(*p);
}

// The platform names files relative to the workdir or absolutely.
std::string platform_path(const std::string& path, const SandboxRecord& rec) {
  if (path.empty()) throw Error(Errc::invalid_argument, "files: 'path' is empty");
  return clean_path(path.front() == '/' ? path : rec.spec.workdir + "/" + path);
}

std::string encoding_of(const std::string* given) {
  std::string enc = given ? *given : "utf-8";
  if (enc == "utf8") enc = "utf-8";
  if (enc != "utf-8" && enc != "base64")
    throw Error(Errc::invalid_argument, "unknown encoding '" + enc.substr(0, 40) + "'").set_hint("encoding is utf-8 or base64");
  return enc;
}

}  // namespace

HttpResponse Api::stat(const HttpRequest& req, const std::string& id) {
  std::string path = absolute_path_param(req, "stat");
  auto e = backend_.stat(id, path);
  if (!e) throw Error(Errc::not_found, path + " does not exist in sandbox " + id);
  return json_response(200, {{"path", path}, {"type", e->type}, {"mode", e->mode}, {"size", e->size},
                             {"mtime", e->mtime}, {"target", e->target}});
}

HttpResponse Api::files_get(const HttpRequest& req, const std::string& id) {
  std::string path = absolute_path_param(req, "files");
  bool want_tar = req.query.count("format") && req.query.at("format") == "tar";
  auto e = backend_.stat(id, path);
  if (!e) throw Error(Errc::not_found, path + " does not exist in sandbox " + id);
  Fd fd = temp_file(cfg_.state_dir + "/tmp");
  HttpResponse r;
  if (want_tar || e->type != "file") {
    std::string base = path == "/" ? "." : path.substr(path.rfind('/') + 1);
    auto sink = tar_sink(fd.get(), base);
    backend_.get_files(id, path, *sink, cfg_.cp_max_bytes);
    r.content_type = "application/x-tar";
  } else {
    RawFileSink sink(fd.get());
    backend_.get_files(id, path, sink, cfg_.cp_max_bytes);
    r.content_type = "application/octet-stream";
  }
  struct stat st {};
  ::fstat(fd.get(), &st);
  ::lseek(fd.get(), 0, SEEK_SET);
  r.file_size = static_cast<uint64_t>(st.st_size);
  r.file_fd = fd.release();
  return r;
}

HttpResponse Api::files_put(const HttpRequest& req, const std::string& id) {
  std::string path = absolute_path_param(req, "files");
  if (req.body_fd < 0) throw Error(Errc::internal, "upload was not spooled");
  ::lseek(req.body_fd, 0, SEEK_SET);
  if (req.content_type.rfind("application/x-tar", 0) == 0) {
    auto e = backend_.stat(id, path);
    if (!e || e->type != "dir")
      throw Error(Errc::invalid_argument, "a tar is unpacked into an existing directory, and " + path + " is not one");
    auto source = tar_source(req.body_fd);
    backend_.put(id, path, *source, cfg_.cp_max_bytes);
  } else {
    RawFileSource source(req.body_fd);
    backend_.put(id, path, source, cfg_.cp_max_bytes);
  }
  HttpResponse r;
  r.status = 204;
  r.content_type.clear();
  return r;
}

HttpResponse Api::files_json_get(const HttpRequest& req, const SandboxRecord& rec) {
  const std::string* p = query(req, "path");
  std::string path = platform_path(p ? *p : "", rec);
  std::string enc = encoding_of(query(req, "encoding"));
  auto e = backend_.stat(rec.id, path);
  if (!e) throw Error(Errc::not_found, path + " does not exist in sandbox " + rec.id);
  if (e->type != "file")
    throw Error(Errc::invalid_argument, path + " is a " + e->type + ", not a regular file")
        .set_hint("directories come as a tar: GET .../files?path=P&format=tar");
  StringSink sink(limits_.max_buffered_output);
  backend_.get_files(rec.id, path, sink, cfg_.cp_max_bytes);
  if (enc == "utf-8" && !valid_utf8(sink.data))
    throw Error(Errc::invalid_argument, path + " is not UTF-8 text").set_hint("read it with encoding=base64");
  return json_response(200, {{"path", path},
                             {"content", enc == "base64" ? base64_encode(sink.data) : sink.data},
                             {"encoding", enc},
                             {"size", sink.data.size()}});
}

HttpResponse Api::files_json_post(const HttpRequest& req, const SandboxRecord& rec) {
  json body = parse_body(req);
  reject_unknown_fields(body, {"path", "content", "encoding"}, "files request");
  if (!body.contains("path") || !body["path"].is_string() || !body.contains("content") || !body["content"].is_string())
    throw Error(Errc::invalid_argument, "files request: 'path' and 'content' must be strings")
        .set_hint("{\"path\": \"/work/run.py\", \"content\": \"print(1)\", \"encoding\": \"utf-8\"}");
  std::string path = platform_path(body["path"].get<std::string>(), rec);
  if (path == "/") throw Error(Errc::invalid_argument, "files request: cannot write to /");
  if (body.contains("encoding") && !body["encoding"].is_string())
    throw Error(Errc::invalid_argument, "files request: 'encoding' must be \"utf-8\" or \"base64\"");
  std::string enc = encoding_of(body.contains("encoding") ? &body["encoding"].get_ref<const std::string&>() : nullptr);
  std::string content = body["content"].get<std::string>();
  if (enc == "base64") content = base64_decode(content);
  // Parents are created: find the deepest one that exists, send the rest as new directories.
  std::vector<std::string> parts;
  for (size_t pos = 1; pos < path.size();) {
    size_t slash = path.find('/', pos);
    parts.push_back(path.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos));
    pos = slash == std::string::npos ? path.size() : slash + 1;
  }
  size_t have = parts.size() - 1;  // how many leading components name existing directories
  std::string base = "/";
  for (; have > 0; --have) {
    std::string dir;
    for (size_t i = 0; i < have; ++i) dir += "/" + parts[i];
    auto e = backend_.stat(rec.id, dir);
    if (e && e->type == "dir") {
      base = dir;
      break;
    }
    if (e) throw Error(Errc::invalid_argument, dir + " exists and is not a directory");
  }
  std::vector<std::string> dirs;
  std::string rel;
  for (size_t i = have; i + 1 < parts.size(); ++i) dirs.push_back(rel += (rel.empty() ? "" : "/") + parts[i]);
  std::string file = rel.empty() ? parts.back() : rel + "/" + parts.back();
  NewFileSource source(std::move(dirs), file, std::move(content));
  backend_.put(rec.id, base, source, cfg_.cp_max_bytes);
  return json_response(200, {{"path", path}});
}

}  // namespace sbx::server
