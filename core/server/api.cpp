#include "core/server/api.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/remote_backend.hpp"
#include "core/safe_path.hpp"
#include "core/units.hpp"

namespace sbx::server {

using nlohmann::json;

namespace {

constexpr const char* kOwnerLabel = "sbx.owner";

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

HttpResponse json_response(int status, const json& j) {
  HttpResponse r;
  r.status = status;
  r.body = j.dump() + "\n";
  return r;
}

json parse_body(const HttpRequest& req) {
  if (req.body.empty()) return json::object();
  auto j = json::parse(req.body, nullptr, false);
  if (j.is_discarded()) throw Error(Errc::invalid_argument, "the request body is not valid JSON");
  if (!j.is_object()) throw Error(Errc::invalid_argument, "the request body must be a JSON object");
  return j;
}

// Text goes as a JSON string; bytes that are not UTF-8 go base64-encoded.
void put_output(json& j, const char* name, const std::string& data) {
  if (valid_utf8(data)) j[name] = data;
  else j[std::string(name) + "_b64"] = base64_encode(data);
}

// The exec part of a request body (also used inside /v1/run).
struct ExecBody {
  ExecRequest req;
  std::string stdin_data;
  bool detach = false;
};

ExecBody parse_exec(const json& j, const Limits& lim, bool allow_sandbox_field) {
  std::initializer_list<const char*> fields = {"cmd", "env", "cwd", "stdin", "stdin_b64", "timeout_s", "detach"};
  std::initializer_list<const char*> run_fields = {"cmd",       "env",       "cwd",   "stdin",
                                                   "stdin_b64", "timeout_s", "detach", "sandbox"};
  reject_unknown_fields(j, allow_sandbox_field ? run_fields : fields, "exec request");
  ExecBody b;
  try {
    b.req.argv = j.at("cmd").get<std::vector<std::string>>();
    if (j.contains("env")) b.req.env = j["env"].get<std::map<std::string, std::string>>();
    b.req.cwd = j.value("cwd", "");
    b.detach = j.value("detach", false);
    if (j.contains("stdin")) b.stdin_data = j["stdin"].get<std::string>();
    if (j.contains("stdin_b64")) b.stdin_data = base64_decode(j["stdin_b64"].get<std::string>());
    if (j.contains("timeout_s")) {
      double t = j["timeout_s"].get<double>();
      if (!(t > 0) || t > static_cast<double>(lim.max_timeout_s))
        throw Error(Errc::invalid_argument, "timeout_s must be between 0 and " + std::to_string(lim.max_timeout_s));
      b.req.timeout_ms = static_cast<uint64_t>(t * 1000);
    }
  } catch (const json::exception&) {
    throw Error(Errc::invalid_argument, "exec request: 'cmd' must be an array of strings; env an object of strings")
        .set_hint("{\"cmd\": [\"python3\", \"-c\", \"print(1)\"]}");
  }
  if (b.req.argv.empty()) throw Error(Errc::invalid_argument, "exec request: 'cmd' is empty");
  size_t bytes = 0;
  for (auto& a : b.req.argv) bytes += a.size() + 1;
  if (b.req.argv.size() > lim.max_argv_items || bytes > lim.max_argv_bytes)
    throw Error(Errc::invalid_argument, "the command line is too long (limit " + std::to_string(lim.max_argv_items) +
                                            " arguments, " + format_size(lim.max_argv_bytes) + ")");
  bytes = 0;
  for (auto& [k, v] : b.req.env) bytes += k.size() + v.size() + 2;
  if (b.req.env.size() > lim.max_env_items || bytes > lim.max_env_bytes)
    throw Error(Errc::invalid_argument, "the environment is too large (limit " + std::to_string(lim.max_env_items) +
                                            " variables, " + format_size(lim.max_env_bytes) + ")");
  b.req.stdin_open = !b.stdin_data.empty();
  return b;
}

// Writes to the stream's pipe; a reader that went away turns into false.
bool write_line(int fd, const std::string& line) {
  try {
    write_all(fd, line);
    return true;
  } catch (const Error&) {
    return false;
  }
}

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

Fd temp_file(const std::string& dir) {
  make_dirs(dir, 0700);
  Fd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) throw sys_error("cannot create a temporary file in " + dir, errno);
  return fd;
}

}  // namespace

// Streams one exec as NDJSON: a worker thread runs the command and writes
// lines into a pipe; the HTTP layer reads the pipe as the response body.
class ExecStream : public ResponseStream, public std::enable_shared_from_this<ExecStream> {
 public:
  ExecStream(Api& api, int client_fd, bool detach) : api_(api), client_fd_(client_fd), detach_(detach) {
    int p[2], s[2];
    if (::pipe2(p, O_CLOEXEC) != 0 || ::pipe2(s, O_CLOEXEC | O_NONBLOCK) != 0) throw sys_error("pipe", errno);
    out_r_.reset(p[0]);
    out_w_.reset(p[1]);
    sig_r_.reset(s[0]);
    sig_w_.reset(s[1]);
  }

  /// Starts the worker; `work` runs the command with io and returns the exit line.
  void start(std::function<json(ExecIO&)> work) {
    auto self = shared_from_this();
    ++api_.in_flight_;
    std::thread([self, work = std::move(work)] {
      ExecIO io;
      io.signal_fd = self->sig_r_.get();
      int w = self->out_w_.get();
      io.on_stdout = [w](std::string_view d) {
        json j;
        put_output(j, "stdout", std::string(d));
        write_line(w, j.dump() + "\n");
      };
      io.on_stderr = [w](std::string_view d) {
        json j;
        put_output(j, "stderr", std::string(d));
        write_line(w, j.dump() + "\n");
      };
      json exit_line;
      try {
        exit_line = work(io);
      } catch (const Error& e) {
        exit_line = {{"error", {{"code", code_name(e.code())}, {"message", e.what()}, {"hint", e.hint()}}}};
      }
      write_line(w, exit_line.dump() + "\n");
      self->out_w_.reset();  // EOF for the reader
      --self->api_.in_flight_;
    }).detach();
  }

  ssize_t read(char* buf, size_t max) override {
    for (;;) {
      pollfd p[2] = {{out_r_.get(), POLLIN, 0}, {client_fd_, POLLRDHUP, 0}};
      int n = ::poll(p, client_fd_ >= 0 ? 2 : 1, -1);
      if (n < 0 && errno == EINTR) continue;
      if (client_fd_ >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) return -1;
      if (p[0].revents) {
        ssize_t got = ::read(out_r_.get(), buf, max);
        if (got < 0 && errno == EINTR) continue;
        return got < 0 ? -1 : got;
      }
    }
  }

  void cancel() override {
    // Without detach, a vanished client's command dies with its whole tree.
    if (!detach_) interrupt();
    // Closing our end turns the worker's next write into EPIPE instead of a block.
    out_r_.reset();
  }

  /// Kills the command; the stream then ends with its exit line.
  void interrupt() {
    int sig = SIGKILL;
    ssize_t ignored = ::write(sig_w_.get(), &sig, sizeof sig);
    (void)ignored;
  }

 private:
  Api& api_;
  int client_fd_;
  bool detach_;
  Fd out_r_, out_w_, sig_r_, sig_w_;
};

json public_record(const SandboxRecord& rec) {
  // sbx.* labels are the manager's bookkeeping (the owning key), not the caller's labels.
  SandboxSpec spec = rec.spec;
  std::erase_if(spec.labels, [](const auto& kv) { return kv.first.rfind("sbx.", 0) == 0; });
  return {{"id", rec.id},
          {"spec", spec},
          {"state", state_name(rec.state)},
          {"created_ms", rec.created_ms},
          {"last_active_ms", rec.last_active_ms},
          {"error", rec.error},
          {"from_pool", rec.from_pool}};
}

Api::Api(const Config& cfg, const DriverTable& drivers, KeyRing keys, Limits limits)
    : cfg_(cfg), drivers_(drivers), keys_(std::move(keys)), limits_(limits), backend_(cfg, drivers) {
  if (!cfg.driver_override.empty()) default_driver_ = cfg.driver_override;
  else if (find_driver(drivers, cfg.local_backend)) default_driver_ = cfg.local_backend;
  else default_driver_ = "subprocess";
}

Api::~Api() = default;

HttpResponse Api::error_response(const Error& e, int status_override) {
  json err{{"code", code_name(e.code())}, {"message", e.what()}};
  if (!e.hint().empty()) err["hint"] = e.hint();
  return json_response(status_override ? status_override : http_status(e.code()), {{"error", err}});
}

HttpResponse Api::handle(const HttpRequest& req) {
  ++in_flight_;
  HttpResponse r;
  try {
    if (draining_ && req.path != "/healthz" && req.path != "/metrics")
      throw Error(Errc::unavailable, "the manager is shutting down").set_hint("retry against another manager");
    r = route(req);
  } catch (const Error& e) {
    r = error_response(e);
  } catch (const std::exception& e) {
    r = error_response(Error(Errc::internal, e.what()));
  }
  --in_flight_;
  metrics_.request(req.method, r.status);
  return r;
}

HttpResponse Api::route(const HttpRequest& req) {
  const std::string& p = req.path;
  const std::string& m = req.method;
  auto need = [&](unsigned perm) {
    if (!(req.key->perms & perm))
      throw Error(Errc::forbidden, "the API key '" + req.key->name + "' lacks " + permission_names(perm))
          .set_hint(perm == kRun ? "running code needs sandboxes:run, which no other permission implies"
                                 : "ask the operator for a key with " + permission_names(perm));
  };
  if (p == "/healthz" && m == "GET") return healthz(*req.key);
  if (p == "/metrics" && m == "GET") return metrics_text();
  if (p == "/v1/run" && m == "POST") {
    need(kRun);
    need(kWrite);
    return exec(req, "", true);
  }
  if (p == "/v1/gc" && m == "POST") {
    need(kWrite);
    return gc(req);
  }
  if (p == "/v1/sandboxes") {
    if (m == "POST") return need(kWrite), create(req);
    if (m == "GET") return need(kRead), list(req);
  }
  const std::string prefix = "/v1/sandboxes/";
  if (p.rfind(prefix, 0) == 0) {
    std::string rest = p.substr(prefix.size());
    auto slash = rest.find('/');
    std::string id = rest.substr(0, slash);
    std::string sub = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (!valid_sandbox_id(id))
      throw Error(Errc::not_found, "sandbox " + id.substr(0, 64) + " does not exist");
    if (sub.empty() && m == "GET") return need(kRead), json_response(200, public_record(backend_.get(id)));
    if (sub.empty() && m == "DELETE") {
      need(kWrite);
      try {
        backend_.remove(id);
      } catch (const Error&) {
        metrics_.failure("remove");
        throw;
      }
      HttpResponse r;
      r.status = 204;
      r.content_type.clear();
      return r;
    }
    if (sub == "exec" && m == "POST") return need(kRun), exec(req, id, false);
    if (sub == "stat" && m == "GET") return need(kRead), stat(req, id);
    if (sub == "files" && m == "GET") return need(kRead), files_get(req, id);
    if (sub == "files" && m == "PUT") return need(kWrite), files_put(req, id);
  }
  static const char* known[] = {"/v1/sandboxes", "/v1/run", "/v1/gc", "/healthz", "/metrics"};
  for (auto* k : known)
    if (p == k) throw Error(Errc::invalid_argument, "method " + m + " is not allowed on " + p);
  throw Error(Errc::not_found, "no such endpoint: " + m + " " + p.substr(0, 200)).set_hint("see docs/api.md");
}

HttpResponse Api::create(const HttpRequest& req) {
  auto t0 = std::chrono::steady_clock::now();
  SandboxSpec spec;
  try {
    spec = parse_body(req).get<SandboxSpec>();
  } catch (const json::exception& e) {
    throw Error(Errc::invalid_argument, std::string("sandbox spec: ") + e.what());
  }
  if (spec.driver.empty()) spec.driver = default_driver_;
  for (auto& [k, v] : spec.labels)
    if (k.rfind("sbx.", 0) == 0) throw Error(Errc::invalid_argument, "labels starting with 'sbx.' are reserved");
  spec.labels[kOwnerLabel] = req.key->name;
  auto slot = reserve_sandbox(req.key->name);
  try {
    SandboxRecord rec = backend_.create(spec, nullptr);
    metrics_.create_latency(rec.spec.driver, seconds_since(t0));
    metrics_.create_source(rec.spec.driver, rec.from_pool);
    return json_response(201, public_record(rec));
  } catch (const Error&) {
    metrics_.failure("create");
    throw;
  }
}

std::shared_ptr<void> Api::reserve_sandbox(const std::string& key) {
  // Counted and reserved under one lock: concurrent creates cannot all see room for one more.
  std::lock_guard lock(mu_);
  int owned = creating_per_key_[key];
  for (auto& r : backend_.list())
    if (r.spec.labels.count(kOwnerLabel) && r.spec.labels.at(kOwnerLabel) == key) ++owned;
  if (owned >= limits_.max_sandboxes_per_key)
    throw Error(Errc::limit_exceeded, "the API key '" + key + "' already holds " + std::to_string(owned) +
                                          " sandboxes (the limit)")
        .set_hint("remove some, or raise server.max_sandboxes_per_key");
  ++creating_per_key_[key];
  return std::shared_ptr<void>(nullptr, [this, key](void*) {
    std::lock_guard l(mu_);
    --creating_per_key_[key];
  });
}

HttpResponse Api::list(const HttpRequest& req) {
  json arr = json::array();
  auto q = [&](const char* k) -> const std::string* {
    auto it = req.query.find(k);
    return it == req.query.end() ? nullptr : &it->second;
  };
  for (auto& r : backend_.list()) {
    if (auto s = q("state"); s && state_name(r.state) != *s) continue;
    // The warm pool's unclaimed sandboxes belong to no key: listed only when asked for by state.
    if (r.state == SandboxState::pooled && !q("state")) continue;
    if (auto d = q("driver"); d && r.spec.driver != *d) continue;
    if (auto l = q("label")) {
      auto eq = l->find('=');
      std::string k = l->substr(0, eq), v = eq == std::string::npos ? "" : l->substr(eq + 1);
      auto it = r.spec.labels.find(k);
      if (it == r.spec.labels.end() || (eq != std::string::npos && it->second != v)) continue;
    }
    arr.push_back(public_record(r));
  }
  return json_response(200, {{"sandboxes", arr}});
}

HttpResponse Api::exec(const HttpRequest& req, const std::string& id_in, bool one_shot) {
  json body = parse_body(req);
  ExecBody eb = parse_exec(body, limits_, one_shot);
  SandboxSpec spec;
  if (one_shot && body.contains("sandbox")) {
    try {
      spec = body["sandbox"].get<SandboxSpec>();
    } catch (const json::exception& e) {
      throw Error(Errc::invalid_argument, std::string("sandbox spec: ") + e.what());
    }
  }
  {
    std::lock_guard lock(mu_);
    int& n = execs_per_key_[req.key->name];
    if (n >= limits_.max_execs_per_key)
      throw Error(Errc::limit_exceeded, "the API key '" + req.key->name + "' already runs " + std::to_string(n) +
                                            " commands (the limit)")
          .set_hint("wait for some to finish, or raise server.max_execs_per_key");
    ++n;
  }
  std::string key_name = req.key->name;
  auto release = [this, key_name] {
    std::lock_guard lock(mu_);
    --execs_per_key_[key_name];
  };
  // The work shared by both answers: (create,) exec, (destroy); returns the exit record.
  auto run = [this, eb, spec, id_in, one_shot, key_name](ExecIO& io) -> json {
    auto t0 = std::chrono::steady_clock::now();
    std::string id = id_in;
    std::shared_ptr<void> slot;
    if (one_shot) {
      SandboxSpec s = spec;
      if (s.driver.empty()) s.driver = default_driver_;
      s.labels[kOwnerLabel] = key_name;
      slot = reserve_sandbox(key_name);
      id = backend_.create(s, nullptr).id;
    }
    io.stdin_data = eb.stdin_data;
    ExecResult r;
    try {
      r = backend_.exec(id, eb.req, io);
    } catch (...) {
      metrics_.failure("exec");
      if (one_shot) try { backend_.remove(id); } catch (const Error&) {}
      throw;
    }
    if (one_shot) try { backend_.remove(id); } catch (const Error&) { metrics_.failure("remove"); }
    metrics_.exec_latency(one_shot ? spec.driver.empty() ? default_driver_ : spec.driver : "exec", seconds_since(t0));
    json exit = r;
    exit["error"] = io.error;
    return {{"exit", exit}};
  };
  bool ndjson = req.accept.find("application/x-ndjson") != std::string::npos;
  // A missing or dead sandbox is an HTTP error, not a stream that ends in one.
  if (!one_shot) {
    SandboxRecord rec = backend_.get(id_in);
    if (rec.state != SandboxState::running)
      throw Error(Errc::conflict, "sandbox " + id_in + " is " + std::string(state_name(rec.state)))
          .set_hint(rec.error.empty() ? "remove it and create another" : rec.error);
  }
  if (ndjson) {
    auto stream = std::make_shared<ExecStream>(*this, req.client_fd, eb.detach);
    stream->start([run, release](ExecIO& io) {
      struct Guard {
        std::function<void()> f;
        ~Guard() { f(); }
      } g{release};
      return run(io);
    });
    {
      std::lock_guard lock(mu_);
      std::erase_if(streams_, [](auto& w) { return w.expired(); });
      streams_.push_back(stream);
    }
    HttpResponse r;
    r.content_type = "application/x-ndjson";
    r.stream = stream;
    return r;
  }
  struct Guard {
    std::function<void()> f;
    ~Guard() { f(); }
  } g{release};
  std::string out, err;
  bool truncated = false;
  size_t cap = limits_.max_buffered_output;
  ExecIO io;
  io.on_stdout = [&](std::string_view d) {
    size_t room = cap > out.size() ? cap - out.size() : 0;
    if (d.size() > room) truncated = true;
    out.append(d.substr(0, room));
  };
  io.on_stderr = [&](std::string_view d) {
    size_t room = cap > err.size() ? cap - err.size() : 0;
    if (d.size() > room) truncated = true;
    err.append(d.substr(0, room));
  };
  json exit = run(io)["exit"];
  put_output(exit, "stdout", out);
  put_output(exit, "stderr", err);
  if (truncated) exit["truncated"] = true;
  return json_response(200, exit);
}

HttpResponse Api::stat(const HttpRequest& req, const std::string& id) {
  auto it = req.query.find("path");
  if (it == req.query.end() || it->second.empty() || it->second.front() != '/')
    throw Error(Errc::invalid_argument, "stat needs ?path=/absolute/path");
  auto e = backend_.stat(id, it->second);
  if (!e) throw Error(Errc::not_found, it->second + " does not exist in sandbox " + id);
  return json_response(200, {{"path", it->second}, {"type", e->type}, {"mode", e->mode}, {"size", e->size},
                             {"mtime", e->mtime}, {"target", e->target}});
}

HttpResponse Api::files_get(const HttpRequest& req, const std::string& id) {
  auto it = req.query.find("path");
  if (it == req.query.end() || it->second.empty() || it->second.front() != '/')
    throw Error(Errc::invalid_argument, "files needs ?path=/absolute/path");
  std::string path = clean_path(it->second);
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
  auto it = req.query.find("path");
  if (it == req.query.end() || it->second.empty() || it->second.front() != '/')
    throw Error(Errc::invalid_argument, "files needs ?path=/absolute/path");
  std::string path = clean_path(it->second);
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

HttpResponse Api::gc(const HttpRequest& req) {
  json body = parse_body(req);
  reject_unknown_fields(body, {"dry_run"}, "gc request");
  bool dry = body.value("dry_run", false);
  GcReport rep = backend_.gc(dry);
  metrics_.gc_run();
  json arr = json::array();
  size_t removed = 0;
  for (auto& a : rep.actions) {
    removed += a.done;
    arr.push_back({{"kind", a.kind}, {"target", a.target}, {"reason", a.reason}, {"done", a.done}, {"error", a.error}});
  }
  metrics_.gc_removed(removed);
  return json_response(200, {{"dry_run", dry}, {"actions", arr}});
}

size_t Api::reap() {
  GcReport rep = backend_.gc(false);
  metrics_.gc_run();
  size_t removed = 0;
  for (auto& a : rep.actions) removed += a.done;
  metrics_.gc_removed(removed);
  return removed;
}

HttpResponse Api::healthz(const ApiKey& caller) {
  json drivers = json::array();
  bool default_ok = false;
  for (auto& d : drivers_) {
    if (!d.make) continue;  // "remote" forwards; a manager does not forward further
    bool ok = true;
    json checks = json::array();
    for (auto& p : d.probe(cfg_, false)) {
      ok = ok && (p.ok || p.advisory);
      checks.push_back({{"name", p.name}, {"ok", p.ok}, {"detail", p.detail}});
    }
    if (d.name == default_driver_) default_ok = ok;
    drivers.push_back({{"name", d.name}, {"ok", ok}, {"checks", checks}});
  }
  json counts = json::object();
  int total = 0;
  for (auto& r : backend_.list()) {
    counts[std::string(state_name(r.state))] = counts.value(std::string(state_name(r.state)), 0) + 1;
    ++total;
  }
  bool ok = default_ok && !draining_;
  return json_response(ok ? 200 : 503, {{"status", ok ? "ok" : draining_ ? "draining" : "degraded"},
                                        {"version", SBX_VERSION},
                                        {"default_driver", default_driver_},
                                        {"drivers", drivers},
                                        {"sandboxes", {{"total", total}, {"by_state", counts}}},
                                        {"in_flight", in_flight_.load()},
                                        {"draining", draining_.load()},
                                        {"key", {{"name", caller.name}, {"permissions", permission_names(caller.perms)}}},
                                        {"time_ms", now_ms()}});
}

HttpResponse Api::metrics_text() {
  std::map<std::pair<std::string, std::string>, int> counts;
  for (auto& r : backend_.list()) ++counts[{r.spec.driver, std::string(state_name(r.state))}];
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.render(counts, in_flight_.load());
  return r;
}

void Api::cancel_all() {
  std::lock_guard lock(mu_);
  for (auto& w : streams_)
    if (auto s = w.lock()) std::static_pointer_cast<ExecStream>(s)->interrupt();
  streams_.clear();
}

}  // namespace sbx::server
