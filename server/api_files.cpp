// Files through the API: ours (raw bytes or a tar, streamed both ways: the
// manager holds a pipe's worth of a transfer, never the whole) and the
// platform's JSON form ({"path", "content", "encoding"}), buffered under caps.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <thread>

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

[[noreturn]] void upload_cut_off() {
  throw Error(Errc::io, "the upload ended before its end (the client went away); nothing was written");
}

// One regular file whose content is a streamed body (PUT of a raw body).
// Its end must be the body's real end: an upload cut off midway fails here,
// so the agent never renames its temp file into place.
class RawFileSource : public EntrySource {
 public:
  explicit RawFileSource(const HttpRequest& req) : req_(req) {}
  bool next(FileEntry& e) override {
    if (done_) return false;
    done_ = true;
    e = FileEntry{"", "file", 0644, 0, 0, ""};  // the size is not known up front; the cap is checked as it flows
    return true;
  }
  bool read(std::string& chunk) override {
    chunk.resize(kChunk);
    ssize_t n;
    do n = ::read(req_.body_fd, chunk.data(), chunk.size());
    while (n < 0 && errno == EINTR);
    if (n < 0) throw sys_error("reading the upload", errno);
    chunk.resize(static_cast<size_t>(n));
    if (n == 0 && !(req_.body_complete && req_.body_complete())) upload_cut_off();
    return n > 0;
  }

 private:
  static constexpr size_t kChunk = 64 * 1024;
  const HttpRequest& req_;
  bool done_ = false;
};

// A streamed tar body whose end must be the body's end: after the tar's last
// entry, the rest of the body (padding) is read, and a body cut off fails.
// Each file of the tar is renamed into place only once whole (the agent
// writes to a temp name), so an upload cut off leaves whole files or none.
class WholeBodySource : public EntrySource {
 public:
  WholeBodySource(const HttpRequest& req, EntrySource& inner) : req_(req), inner_(inner) {}
  bool next(FileEntry& e) override {
    if (inner_.next(e)) return true;
    char buf[64 * 1024];
    ssize_t n;
    while ((n = ::read(req_.body_fd, buf, sizeof buf)) != 0)
      if (n < 0 && errno != EINTR) throw sys_error("reading the upload", errno);
    if (!(req_.body_complete && req_.body_complete())) upload_cut_off();
    return false;
  }
  bool read(std::string& chunk) override { return inner_.read(chunk); }

 private:
  const HttpRequest& req_;
  EntrySource& inner_;
};

// A download produced while it is sent: a worker thread reads the sandbox
// into a pipe, the HTTP layer sends what the pipe holds. A failure midway
// (the sandbox died) cuts the response short: the client sees a transfer
// that did not end properly (chunked encoding without its last chunk).
class DownloadStream : public ResponseStream, public std::enable_shared_from_this<DownloadStream> {
 public:
  explicit DownloadStream(std::atomic<int>& in_flight) : in_flight_(in_flight) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw sys_error("pipe", errno);
    r_.reset(p[0]);
    w_.reset(p[1]);
    ::fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
  }
  /// Runs work(fd) on its own thread; `what` names the download in the log when it fails.
  void start(std::function<void(int)> work, std::string what) {
    auto self = shared_from_this();
    ++in_flight_;
    std::thread([self, work = std::move(work), what = std::move(what)]() mutable {
      try {
        work(self->w_.get());
      } catch (const std::exception& e) {
        self->failed_ = true;
        std::fprintf(stderr, "sbx serve: %s failed midway: %s\n", what.c_str(), e.what());
      }
      work = nullptr;    // what it holds goes while the Api surely stands (see ExecStream::start)
      self->w_.reset();  // EOF for the reader, after failed_ is set
      --self->in_flight_;
    }).detach();
  }
  ssize_t read(char* buf, size_t max) override {
    for (;;) {
      ssize_t n = ::read(r_.get(), buf, max);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) return failed_ ? -1 : 0;
      return n < 0 ? -1 : n;
    }
  }
  // The client is gone: the worker's next write fails (EPIPE) and it stops.
  void cancel() override { r_.reset(); }

 private:
  std::atomic<int>& in_flight_;
  Fd r_, w_;
  std::atomic<bool> failed_{false};
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

// An upload into a sandbox that dies under it (removed, OOM-killed) breaks
// the agent's connection: "Connection reset by peer" alone tells the client
// nothing, so the answer says what happened.
void put_while_alive(Backend& backend, const std::string& id, const std::string& path, EntrySource& source,
                     uint64_t max_bytes) {
  try {
    backend.put(id, path, source, max_bytes);
  } catch (const Error& e) {
    int err = e.sys_errno();
    if (err != EPIPE && err != ECONNRESET && e.code() != Errc::protocol) throw;
    throw Error(Errc::unavailable, "sandbox " + id + " went away during the upload: its agent closed the connection (" +
                                       e.what() + ")")
        .set_hint("nothing was written; see the sandbox's state with `sbx ls`");
  }
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
  // Checked before the answer starts, so a missing path is a 404, not a cut-off 200.
  auto e = backend_.stat(id, path);
  if (!e) throw Error(Errc::not_found, path + " does not exist in sandbox " + id);
  bool tar = want_tar || e->type != "file";
  auto stream = std::make_shared<DownloadStream>(in_flight_);
  stream->start(
      [this, id, path, tar](int fd) {
        if (tar) {
          auto sink = tar_sink(fd, path == "/" ? "." : path.substr(path.rfind('/') + 1));
          backend_.get_files(id, path, *sink, cfg_.cp_max_bytes);
        } else {
          RawFileSink sink(fd);
          backend_.get_files(id, path, sink, cfg_.cp_max_bytes);
        }
      },
      "download of " + path + " from " + id);
  HttpResponse r;
  r.content_type = tar ? "application/x-tar" : "application/octet-stream";
  r.stream = stream;
  return r;
}

HttpResponse Api::files_put(const HttpRequest& req, const std::string& id) {
  std::string path = absolute_path_param(req, "files");
  if (req.body_fd < 0) throw Error(Errc::internal, "the upload was not streamed");
  if (req.content_type.rfind("application/x-tar", 0) == 0) {
    auto e = backend_.stat(id, path);
    if (!e || e->type != "dir")
      throw Error(Errc::invalid_argument, "a tar is unpacked into an existing directory, and " + path + " is not one");
    auto tar = tar_source(req.body_fd);
    WholeBodySource source(req, *tar);
    put_while_alive(backend_, id, path, source, cfg_.cp_max_bytes);
  } else {
    RawFileSource source(req);
    put_while_alive(backend_, id, path, source, cfg_.cp_max_bytes);
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
