// The manager's HTTP API (docs/api.md) independent of any HTTP library:
// a request in, a response (buffered, a file, or a stream) out. The HTTP
// glue (http_server.cpp) only moves bytes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/driver.hpp"
#include "core/local_backend.hpp"
#include "core/server/auth.hpp"
#include "core/server/metrics.hpp"

namespace sbx::server {

/// Caps on what one client may ask for.
struct Limits {
  size_t max_body_bytes = 1 << 20;          ///< JSON bodies
  size_t max_argv_items = 1024;
  size_t max_argv_bytes = 256 * 1024;
  size_t max_env_items = 1024;
  size_t max_env_bytes = 256 * 1024;
  uint64_t max_timeout_s = 86'400;
  size_t max_buffered_output = 16 << 20;    ///< per stream, buffered exec
  int max_sandboxes_per_key = 64;
  int max_execs_per_key = 32;
};

struct HttpRequest {
  std::string method;
  std::string path;
  std::map<std::string, std::string> query;
  std::string accept;
  std::string content_type;
  std::string body;            ///< JSON bodies; file uploads arrive in body_fd
  int body_fd = -1;            ///< an unlinked temp file holding a large upload, or -1
  const ApiKey* key = nullptr; ///< the authenticated caller
  int client_fd = -1;          ///< the connection's socket, to notice a client that hung up
};

/// A response body produced while it is sent.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  /// Blocks for the next bytes: >0 bytes, 0 at the end, -1 when the client is gone.
  virtual ssize_t read(char* buf, size_t max) = 0;
  /// The response was abandoned (client gone, server stopping).
  virtual void cancel() = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  int file_fd = -1;            ///< send this file (owned) instead of body
  uint64_t file_size = 0;
  std::shared_ptr<ResponseStream> stream;  ///< or stream this
};

class Api {
 public:
  Api(const Config& cfg, const DriverTable& drivers, KeyRing keys, Limits limits);
  ~Api();

  /// Authenticates from the X-API-Key header value; nullptr when refused.
  const ApiKey* authenticate(std::string_view presented) const { return keys_.authenticate(presented); }
  /// Answers one request; never throws (errors become JSON error responses).
  HttpResponse handle(const HttpRequest& req);
  /// An error response in the API's JSON shape.
  static HttpResponse error_response(const Error& e, int status_override = 0);

  /// One gc pass (the idle reaper calls this periodically); returns what it removed.
  size_t reap();
  /// Stop taking work: new requests get 503, in-flight ones finish.
  void start_draining() { draining_ = true; }
  /// Requests (and streams) still running.
  int in_flight() const { return in_flight_.load(); }
  /// Kills every command still streaming (after the drain grace period).
  void cancel_all();
  Metrics& metrics() { return metrics_; }
  const Config& config() const { return cfg_; }

 private:
  HttpResponse route(const HttpRequest& req);
  HttpResponse create(const HttpRequest& req);
  HttpResponse list(const HttpRequest& req);
  HttpResponse exec(const HttpRequest& req, const std::string& id, bool one_shot);
  HttpResponse files_get(const HttpRequest& req, const std::string& id);
  HttpResponse files_put(const HttpRequest& req, const std::string& id);
  HttpResponse stat(const HttpRequest& req, const std::string& id);
  HttpResponse gc(const HttpRequest& req);
  HttpResponse healthz(const ApiKey& caller);
  /// Reserves a sandbox slot of the key's cap (released by the returned guard).
  std::shared_ptr<void> reserve_sandbox(const std::string& key);
  HttpResponse metrics_text();

  friend class ExecStream;
  Config cfg_;
  const DriverTable& drivers_;
  KeyRing keys_;
  Limits limits_;
  LocalBackend backend_;
  std::string default_driver_;
  Metrics metrics_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> draining_{false};
  std::mutex mu_;
  std::map<std::string, int> execs_per_key_;
  std::map<std::string, int> creating_per_key_;  ///< creates under way, counted against the cap
  std::vector<std::weak_ptr<ResponseStream>> streams_;
};

/// A record as the API shows it: host-private fields (pids, uid range) left out.
nlohmann::json public_record(const SandboxRecord& rec);

}  // namespace sbx::server
