#include "remote/backend.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <exception>
#include <memory>
#include <thread>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/fsutil.hpp"
#include "core/unix_socket.hpp"
#include "core/lazy_libs.hpp"
#include "core/units.hpp"
#include "remote/http.hpp"
#include "remote/index.hpp"

namespace sbx {

using nlohmann::json;

// ---------------------------------------------------------------- HTTP over libcurl

namespace {


using remote_http::Request;
using remote_http::Response;
using remote_http::perform;
using remote_http::url_escape;
using remote_http::decode;

bool tls_failure(CURLcode rc) {
  return rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_SSL_CACERT_BADFILE ||
         rc == CURLE_SSL_CERTPROBLEM;
}

[[noreturn]] void throw_transport(const Request& req, const Response& res) {
  bool connecting = res.rc == CURLE_COULDNT_CONNECT || res.rc == CURLE_COULDNT_RESOLVE_HOST ||
                    res.rc == CURLE_COULDNT_RESOLVE_PROXY || tls_failure(res.rc) ||
                    (res.rc == CURLE_OPERATION_TIMEDOUT && res.status == 0);
  std::string why = res.rc == CURLE_COULDNT_CONNECT && res.os_errno > 0
                        ? std::strerror(static_cast<int>(res.os_errno))
                        : res.curl_message;
  Error e(Errc::unavailable, "manager " + req.shown + (connecting ? " unreachable: " : " failed: ") + why);
  if (tls_failure(res.rc)) e.set_hint("for a manager with a self-signed certificate, set SBX_CA_FILE to its CA file");
  else if (connecting) e.set_hint("check SANDBOX_MANAGER_URL and that sbx serve runs there");
  throw e;
}

// The first line of a body, short enough for a message.
std::string snippet(const std::string& body) {
  std::string s = body.substr(0, body.find('\n'));
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.pop_back();
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return valid_utf8(s) ? s : std::string();
}

[[noreturn]] void throw_http(const Request& req, const Response& res) {
  json j = json::parse(res.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    Error err = error_from_json(j["error"], errc_for_http_status(res.status),
                                "manager " + req.shown + " answered HTTP " + std::to_string(res.status));
    if (err.hint().empty() && err.code() == Errc::unauthenticated) err.set_hint("set ADMIN_API_KEY to the manager's key");
    // A refused key is this host's configuration to fix: say which manager refused it.
    if (err.code() == Errc::unauthenticated || err.code() == Errc::forbidden) err.add_context("manager " + req.shown);
    throw err;
  }
  // The status alone is unambiguous for these, whoever (a proxy?) wrote the body.
  if (res.status == 401)
    throw Error(Errc::unauthenticated, "manager " + req.shown + " refused the API key")
        .set_hint("set ADMIN_API_KEY to the manager's key");
  if (res.status == 403) throw Error(Errc::forbidden, "manager " + req.shown + " denied this API key the operation");
  std::string text = snippet(res.body);
  throw Error(Errc::unavailable,
              "manager " + req.shown + " answered HTTP " + std::to_string(res.status) + (text.empty() ? "" : ": " + text));
}

// perform, with every failure turned into an sbx::Error.
Response perform_checked(const Request& req) {
  Response res = perform(req);
  if (res.rc != CURLE_OK) throw_transport(req, res);
  if (res.status < 200 || res.status >= 300) throw_http(req, res);
  return res;
}

// Hides user:password@ of a URL in anything shown.
std::string redact(const std::string& url) {
  size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  size_t host = scheme + 3;
  size_t end = url.find('/', host);
  size_t at = url.rfind('@', end == std::string::npos ? url.size() : end);
  if (at == std::string::npos || at < host) return url;
  return url.substr(0, host) + "***@" + url.substr(at + 1);
}

std::string normalized_url(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

bool http_url(const std::string& url) { return url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0; }

std::pair<Fd, Fd> make_pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw sys_error("pipe", errno);
  ::fcntl(p[1], F_SETPIPE_SZ, 1 << 20);  // fewer wake-ups per transfer; the default size works too
  return {Fd(p[0]), Fd(p[1])};
}

// A thread for one side of a streamed copy. SIGPIPE is blocked in it: its
// writes into a pipe whose reader gave up fail with EPIPE instead of killing sbx.
template <class F>
std::thread quiet_thread(F f) {
  return std::thread([f = std::move(f)]() mutable {
    block_sigpipe_in_this_thread();
    f();
  });
}

// A pending signal number on the self-pipe, or 0.
int pending_signal(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0 || !(p.revents & (POLLIN | POLLHUP))) return 0;
  int sig = 0;
  ssize_t n = ::read(fd, &sig, sizeof sig);
  if (n == static_cast<ssize_t>(sizeof sig) && sig > 0 && sig < 128) return sig;
  return n > 0 ? 2 : 0;  // a torn write still means the user wants out: SIGINT
}

}  // namespace

// ---------------------------------------------------------------- RemoteBackend

RemoteBackend::RemoteBackend(const Config& cfg, std::string url, std::string api_key)
    : state_dir_(cfg.state_dir),
      default_network_(cfg.default_network),
      url_(normalized_url(std::move(url))),
      api_key_(std::move(api_key)) {
  if (!http_url(url_))
    throw Error(Errc::invalid_argument, "manager URL '" + redact(url_) + "' is not an http:// or https:// URL")
        .set_hint("set SANDBOX_MANAGER_URL, e.g. http://manager:8000");
}

json RemoteBackend::spec_body(const SandboxSpec& spec) const {
  json body = spec_request_json(spec);
  // sbx's own defaults travel with the call, so `sbx create` is the same sandbox
  // whichever backend runs it; the manager's default is for clients that say nothing.
  if (!body.contains("network")) body["network"] = default_network_;
  return body;
}

std::string RemoteBackend::sandbox_path(const std::string& id) const { return "/v1/sandboxes/" + url_escape(id); }

json RemoteBackend::call_json(const std::string& method, const std::string& path, const json* body) {
  Request req;
  req.method = method;
  req.url = url_ + path;
  req.shown = redact(url_);
  req.api_key = api_key_;
  req.headers.push_back("Accept: application/json");
  if (body) {
    req.body = body->dump();
    req.headers.push_back("Content-Type: application/json");
  } else if (method == "POST") {
    req.body = "{}";
    req.headers.push_back("Content-Type: application/json");
  }
  Response res = perform_checked(req);
  if (res.body.empty()) return json();
  return decode("an answer", [&] { return json::parse(res.body); });
}

SandboxRecord RemoteBackend::create(const SandboxSpec& spec, const Progress&) {
  json body = spec_body(spec);
  json answer = call_json("POST", "/v1/sandboxes", &body);
  auto rec = as_seen_here(decode("a sandbox record", [&] { return answer.get<SandboxRecord>(); }));
  remember_or_remove(rec);
  return rec;
}

void RemoteBackend::remember_or_remove(const SandboxRecord& rec) {
  try {
    remember_remote(state_dir_, rec.id, url_, rec.spec.name);
  } catch (Error& e) {
    // An unremembered sandbox could not be reached by id again: do not leave it running.
    try {
      call_json("DELETE", sandbox_path(rec.id), nullptr);
    } catch (const Error&) {
    }
    e.add_context("sandbox " + rec.id + " was removed again: its location cannot be recorded in " + state_dir_);
    throw;
  }
}

std::optional<ExecResult> RemoteBackend::stream_exec(const std::string& path, const json* body, ExecIO& io) {
  NdjsonExecParser parser(io.on_stdout, io.on_stderr);
  int sig = 0;
  Request r;
  r.method = body ? "POST" : "GET";
  r.url = url_ + path;
  r.shown = redact(url_);
  r.api_key = api_key_;
  r.headers = {"Content-Type: application/json", "Accept: application/x-ndjson"};
  if (body) r.body = body->dump();
  r.timeout_ms = 0;  // commands run as long as they need; their own timeout_s bounds them
  r.on_body = [&](std::string_view chunk) { parser.feed(chunk); };
  if (io.signal_fd >= 0) r.abort = [&] { return (sig = pending_signal(io.signal_fd)) != 0; };
  Response res = perform(r);
  if (sig) {
    // Dropping the connection is the protocol's kill: the manager ends the process tree.
    ExecResult killed;
    killed.exit_code = 128 + sig;
    killed.signal = sig;
    return killed;
  }
  if (res.rc != CURLE_OK) throw_transport(r, res);
  if (res.status < 200 || res.status >= 300) throw_http(r, res);
  parser.finish();
  if (!parser.done()) return std::nullopt;
  io.error = parser.error();
  return parser.result();
}

ExecResult RemoteBackend::finished_exec(const std::string& path, const json& body, ExecIO& io) {
  auto r = stream_exec(path, &body, io);
  if (!r) throw Error(Errc::protocol, "the manager closed the stream before the command finished");
  return *r;
}

void RemoteBackend::refused(const std::string& path, int status, const std::string& body) const {
  Request req;
  req.url = url_ + path;
  req.shown = redact(url_);
  Response res;
  res.status = status;
  res.body = body;
  throw_http(req, res);
}

std::vector<SandboxRecord> RemoteBackend::list() {
  json answer = call_json("GET", "/v1/sandboxes", nullptr);
  // A bare array (this API); {"sandboxes": [...]} from a manager of before the platform's contract.
  const json& items = answer.is_object() && answer.contains("sandboxes") ? answer["sandboxes"] : answer;
  auto recs = decode("a sandbox list", [&] { return items.get<std::vector<SandboxRecord>>(); });
  for (auto& r : recs) r = as_seen_here(std::move(r));
  return recs;
}

SandboxRecord RemoteBackend::record_call(const std::string& method, const std::string& path) {
  json answer = call_json(method, path, nullptr);
  return as_seen_here(decode("a sandbox record", [&] { return answer.get<SandboxRecord>(); }));
}

SandboxRecord RemoteBackend::get(const std::string& id) { return record_call("GET", sandbox_path(id)); }

SandboxRecord RemoteBackend::pause(const std::string& id) { return record_call("POST", sandbox_path(id) + "/pause"); }
SandboxRecord RemoteBackend::resume(const std::string& id) { return record_call("POST", sandbox_path(id) + "/resume"); }

SandboxRecord RemoteBackend::as_seen_here(SandboxRecord rec) const {
  // From this host a manager's sandbox runs on "remote"; which driver the
  // manager used, and where, stays in driver_data for `ls --json`.
  rec.driver_data = {{"manager", redact(url_)}, {"manager_driver", rec.spec.driver}};
  rec.spec.driver = "remote";
  return rec;
}

void RemoteBackend::remove(const std::string& id) {
  try {
    call_json("DELETE", sandbox_path(id), nullptr);
  } catch (const Error& e) {
    if (e.code() == Errc::not_found) forget_remote(state_dir_, id);
    throw;
  }
  forget_remote(state_dir_, id);
}

GcReport RemoteBackend::gc(bool dry_run) {
  json body{{"dry_run", dry_run}};
  json answer = call_json("POST", "/v1/gc", &body);
  return decode("a gc report", [&] {
    GcReport report;
    for (auto& a : answer.at("actions")) {
      GcAction act;
      act.kind = str_field(a, "kind");
      act.target = str_field(a, "target");
      act.reason = str_field(a, "reason");
      act.done = a.value("done", false);
      act.error = str_field(a, "error");
      report.actions.push_back(std::move(act));
    }
    return report;
  });
}

std::optional<FileEntry> RemoteBackend::stat(const std::string& id, const std::string& path) {
  json answer;
  try {
    answer = call_json("GET", sandbox_path(id) + "/stat?path=" + url_escape(path), nullptr);
  } catch (const Error& e) {
    if (e.code() != Errc::not_found) throw;
    get(id);  // a missing sandbox must not read as a missing path
    return std::nullopt;
  }
  auto entry = decode("a file entry", [&] { return answer.get<FileEntry>(); });
  entry.path.clear();  // as the local backend: the entry of the path itself
  return entry;
}

uint64_t RemoteBackend::put(const std::string& id, const std::string& target, EntrySource& source, uint64_t max_bytes) {
  std::string t = target;
  while (t.size() > 1 && t.back() == '/') t.pop_back();
  size_t slash = t.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : t.substr(0, slash);
  std::string base = slash == std::string::npos ? t : t.substr(slash + 1);
  // The tar is made while it is sent: a producer thread writes it into a pipe, the request reads the pipe.
  auto [rd, wr] = make_pipe();
  std::atomic<bool> produced{false};  // set before the pipe's EOF: the tar is whole
  std::exception_ptr producer_failure;
  uint64_t moved = 0;
  std::thread producer = quiet_thread([&, wr = std::move(wr)]() mutable {
    try {
      auto sink = tar_sink(wr.get(), base);
      moved = transfer(source, *sink, max_bytes);
      sink.reset();  // flushes the tar's last blocks
      produced = true;
    } catch (...) {
      producer_failure = std::current_exception();
    }
  });
  bool cut_short = false;  // the request stopped because the producer failed
  Request r;
  r.method = "PUT";
  r.url = url_ + sandbox_path(id) + "/files?path=" + url_escape(dir);
  r.shown = redact(url_);
  r.api_key = api_key_;
  r.headers = {"Content-Type: application/x-tar"};
  r.upload_read = [&, fd = rd.get()](char* buf, size_t max) -> size_t {
    ssize_t n;
    do n = ::read(fd, buf, max);
    while (n < 0 && errno == EINTR);
    if (n < 0) throw sys_error("reading the tar being sent", errno);
    if (n == 0 && !produced) {
      cut_short = true;  // never end the body: the manager must see the upload cut off, not whole
      throw Error(Errc::io, "the copy stopped");
    }
    return static_cast<size_t>(n);
  };
  r.timeout_ms = 0;
  r.stall_limit = true;
  std::exception_ptr request_failure;
  try {
    with_context("copying into " + id + ":" + target, [&] { perform_checked(r); });
  } catch (...) {
    request_failure = std::current_exception();
  }
  rd.reset();  // a producer still writing (the manager refused early) gets EPIPE and stops
  producer.join();
  if (producer_failure && (cut_short || !request_failure)) std::rethrow_exception(producer_failure);
  if (request_failure) std::rethrow_exception(request_failure);
  return moved;
}

uint64_t RemoteBackend::get_files(const std::string& id, const std::string& path, EntrySink& sink, uint64_t max_bytes) {
  // Headers and padding can outweigh tiny files, so the tar may exceed the content limit by a margin.
  constexpr uint64_t kSlack = 64ull << 20;
  uint64_t cap = max_bytes > (UINT64_MAX - kSlack) / 2 ? UINT64_MAX : max_bytes * 2 + kSlack;
  // The tar is unpacked while it arrives: the request runs on a thread writing into a pipe, this one reads it.
  auto [rd, wr] = make_pipe();
  std::exception_ptr request_failure;
  std::atomic<bool> fetched{false};  // set before the pipe's EOF: the request is over, well or not
  std::thread fetcher = quiet_thread([&, wr = std::move(wr)]() mutable {
    uint64_t received = 0;
    Request r;
    r.url = url_ + sandbox_path(id) + "/files?path=" + url_escape(path) + "&format=tar";
    r.shown = redact(url_);
    r.api_key = api_key_;
    r.headers = {"Accept: application/x-tar"};
    r.timeout_ms = 0;
    r.stall_limit = true;
    r.on_body = [&](std::string_view chunk) {
      received += chunk.size();
      if (received > cap)
        throw Error(Errc::too_large, "the copy exceeds the limit of " + format_size(max_bytes) + " (its tar passed " +
                                              format_size(cap) + ")")
            .set_hint("raise it with --max-size or cp_max_size in the config");
      write_all(wr.get(), chunk);  // EPIPE once the reader below has given up
    };
    try {
      with_context("copying from " + id + ":" + path, [&] { perform_checked(r); });
    } catch (...) {
      request_failure = std::current_exception();
    }
    fetched = true;
  });
  std::exception_ptr unpack_failure;
  bool unpack_first = false;  // the unpacking failed while the answer still came: its error is the cause
  uint64_t moved = 0;
  try {
    auto raw = tar_source(rd.get());
    // The manager tars "/" as "." (no named root), which tar_source already strips.
    if (path == "/") {
      moved = transfer(*raw, sink, max_bytes);
    } else {
      StripRootSource stripped(*raw);
      moved = transfer(stripped, sink, max_bytes);
    }
  } catch (...) {
    unpack_failure = std::current_exception();
    unpack_first = !fetched;
  }
  rd.reset();  // a fetcher still writing gets EPIPE and stops
  fetcher.join();
  if (unpack_first) std::rethrow_exception(unpack_failure);
  // A failed request explains a tar that ended early, and a tar cut at an entry's end unpacks "whole": no success either.
  if (request_failure) std::rethrow_exception(request_failure);
  if (unpack_failure) std::rethrow_exception(unpack_failure);
  return moved;
}

// ---------------------------------------------------------------- health

namespace {

constexpr int64_t kHealthCacheMs = 5000;

// Returns true (and the cached verdict in `reason`) for a fresh entry about url.
bool cached_health(const std::string& file, const std::string& url, std::optional<std::string>& reason) {
  std::optional<std::string> text;
  try {
    text = read_file_if_exists(file);
  } catch (const Error&) {
    return false;
  }
  if (!text) return false;
  json j = json::parse(*text, nullptr, false);
  if (!j.is_object() || str_field(j, "url") != url) return false;
  auto checked = j.find("checked_ms");
  auto ok = j.find("ok");
  if (checked == j.end() || !checked->is_number_integer() || ok == j.end() || !ok->is_boolean()) return false;
  int64_t age = now_ms() - checked->get<int64_t>();
  if (age < 0 || age >= kHealthCacheMs) return false;
  if (ok->get<bool>()) reason.reset();
  else reason = str_field(j, "reason").empty() ? "unhealthy" : str_field(j, "reason");
  return true;
}

std::string lowercase_first(std::string s) {
  if (!s.empty() && s[0] >= 'A' && s[0] <= 'Z') s[0] = static_cast<char>(s[0] - 'A' + 'a');
  return s;
}

std::optional<std::string> probe_health(const std::string& api_key, const std::string& url) {
  if (!http_url(url)) return "'" + redact(url) + "' is not an http:// or https:// URL";
  Request req;
  req.url = url + "/healthz";
  req.shown = redact(url);
  req.api_key = api_key;
  req.headers = {"Accept: application/json"};
  req.connect_timeout_ms = 300;
  req.timeout_ms = 1500;
  Response res;
  try {
    res = perform(req);
  } catch (const Error& e) {
    return e.message();  // libcurl missing, out of memory
  }
  if (res.rc == CURLE_OPERATION_TIMEDOUT)
    return res.seconds < 1.0 ? "could not connect within 0.3 s" : "timed out after 1.5 s";
  if (res.rc == CURLE_COULDNT_CONNECT && res.os_errno > 0)
    return lowercase_first(std::strerror(static_cast<int>(res.os_errno)));
  if (res.rc != CURLE_OK) return lowercase_first(res.curl_message);
  json j = json::parse(res.body, nullptr, false);
  if (res.status == 200) {
    if (j.is_object()) return std::nullopt;
    return "HTTP 200 without a JSON body (is this an sbx manager?)";
  }
  std::string text;
  if (j.is_object()) {
    if (j.contains("error") && j["error"].is_object()) text = str_field(j["error"], "message");
    if (text.empty()) text = str_field(j, "status");
    if (text.empty()) text = str_field(j, "reason");
  } else {
    text = snippet(res.body);
  }
  std::string status = "HTTP " + std::to_string(res.status) + ": " + (text.empty() ? "no details" : text);
  // A manager that refuses the key is up and says no: that is this host's
  // configuration to fix, and falling back would run the code here instead.
  if (res.status == 401)
    throw Error(Errc::unauthenticated, "manager " + req.shown + " refused the API key (" + status + ")")
        .set_hint("set ADMIN_API_KEY to a key the manager accepts; sbx does not fall back to local "
                  "execution when the manager refuses the key");
  if (res.status == 403)
    throw Error(Errc::forbidden, "manager " + req.shown + " denied this API key (" + status + ")")
        .set_hint("ask the manager's operator for a key it accepts; sbx does not fall back to local "
                  "execution when the manager refuses the key");
  return status;
}

}  // namespace

std::optional<std::string> check_manager_health(const Config& cfg, const std::string& url) {
  // Redacted: the cache is world-readable and must not hold a password from the URL.
  std::string base = redact(normalized_url(url));
  std::string file = cfg.state_dir.empty() ? std::string() : cfg.state_dir + "/remote-health.json";
  std::optional<std::string> reason;
  if (!file.empty() && cached_health(file, base, reason)) return reason;
  reason = probe_health(cfg.api_key, normalized_url(url));
  if (!file.empty()) {
    json entry{{"url", base}, {"ok", !reason}, {"reason", reason.value_or("")}, {"checked_ms", now_ms()}};
    try {
      make_dirs(cfg.state_dir, 0755);
      write_file_atomic(file, entry.dump() + "\n", 0644, Durability::survive_process);
    } catch (const Error&) {
      // A read-only state dir only costs the next call another check.
    }
  }
  return reason;
}

bool StripRootSource::next(FileEntry& entry) {
  if (!inner_.next(entry)) return false;
  size_t slash = entry.path.find('/');
  std::string first = entry.path.substr(0, slash);
  if (!root_) root_ = first;
  else if (first != *root_)
    throw Error(Errc::protocol, "the manager's tar holds '" + entry.path + "' outside its root '" + *root_ + "'");
  entry.path = slash == std::string::npos ? std::string() : entry.path.substr(slash + 1);
  return true;
}

}  // namespace sbx
