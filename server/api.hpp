// The manager's HTTP API (docs/api.md) independent of any HTTP library:
// a request in, a response (buffered, a file, or a stream) out. The HTTP
// glue (http_server.cpp) only moves bytes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/driver.hpp"
#include "core/error.hpp"
#include "core/backend.hpp"
#include "server/auth.hpp"
#include "server/metrics.hpp"
#include "server/tokens.hpp"

namespace sbx::ws {
class Connection;
}

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
  int body_fd = -1;            ///< a file upload, streamed as it arrives (a pipe), or -1
  std::function<bool()> body_complete;  ///< after body_fd's EOF: whether the whole upload came (false: the client went away)
  const ApiKey* key = nullptr; ///< the authenticated caller
  int client_fd = -1;          ///< the connection's socket, to notice a client that hung up
  std::string request_id;      ///< X-Request-Id of the answer (also in error bodies and the log line)
  std::string websocket_key;   ///< Sec-WebSocket-Key of a well-formed WebSocket upgrade (RFC 6455), else empty
  std::optional<TokenGrant> token;  ///< set when the caller came with ?token= instead of X-API-Key
  std::vector<std::pair<std::string, std::string>> headers;  ///< every request header, in order (the port proxy passes them on)
  std::vector<std::pair<std::string, std::string>> args;     ///< the query's arguments in order, repeats kept (decoded)
  std::string raw_target;      ///< the request target as the client sent it, still percent-encoded (proxies pass it on)
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
  int64_t stream_size = -1;    ///< the stream's length when known (sent as Content-Length), else -1
  std::vector<std::pair<std::string, std::string>> headers;  ///< extra headers (Allow, Retry-After)
  /// A WebSocket session: the HTTP layer answers 101 and runs this on a thread of
  /// its own with the upgraded connection (needs the request's websocket_key).
  std::function<void(ws::Connection&)> websocket;
  /// Or the same with the raw upgraded socket and the bytes the client sent after
  /// its request (a WebSocket another manager serves, relayed: server/fleet.hpp).
  std::function<void(int sock, std::string extra_in)> upgraded;
};

struct ExecBody;  // an exec request's body, parsed (api_internal.hpp)
class Fleet;      // many managers (server/fleet.hpp)

class Api {
 public:
  /// `backend` runs the sandboxes (shared with the pool refiller; a fake in unit
  /// tests); `drivers` is what /healthz probes and create's default comes from.
  /// cfg.default_network is what API creates on a driver with a jail get when they do not say.
  Api(const Config& cfg, const DriverTable& drivers, Backend& backend, KeyRing keys, Limits limits);
  ~Api();

  /// Authenticates from the X-API-Key header value; nullptr when refused.
  const ApiKey* authenticate(std::string_view presented) const { return keys_.authenticate(presented); }
  /// Authenticates a ?token= for `path`: its key, and the grant in `grant`; nullptr when
  /// the token is forged, expired, for another sandbox or route, or its key is gone.
  const ApiKey* authenticate_token(std::string_view token, std::string_view path, TokenGrant& grant) const;
  /// Answers one request; never throws (errors become JSON error responses).
  HttpResponse handle(const HttpRequest& req);
  /// An error response in the API's JSON shape.
  static HttpResponse error_response(const Error& e, int status_override = 0);

  /// One gc pass (the idle reaper calls this periodically); returns what it removed.
  size_t reap();
  /// Runs every driver's probes again for /healthz (serve calls it in the background:
  /// probes take 50-110 ms, a health check must not).
  void refresh_probes();
  /// Stop taking work: new requests get 503, in-flight ones finish.
  void start_draining() { draining_ = true; }
  /// Requests (and streams) still running.
  int in_flight() const { return in_flight_.load(); }
  /// Kills every command still streaming (after the drain grace period).
  void cancel_all();
  Metrics& metrics() { return metrics_; }
  /// Makes this manager one of a fleet: requests for sandboxes other managers own go there.
  void set_fleet(std::shared_ptr<const Fleet> fleet) { fleet_ = std::move(fleet); }
  /// In a fleet, the ordinal of the manager a request for `path` must go to, or -1 to
  /// answer it here (fleet.cpp); throws when a passed-on request names another manager.
  int fleet_owner(const std::string& path, bool forwarded);
  const Config& config() const { return cfg_; }

 private:
  HttpResponse route(const HttpRequest& req);
  HttpResponse sandbox_route(const HttpRequest& req, const std::string& rest);
  HttpResponse create(const HttpRequest& req);
  HttpResponse list(const HttpRequest& req);
  /// POST .../snapshot ({"name"}: 201 the snapshot) and .../fork (201 the new sandbox) (api_snapshots.cpp).
  HttpResponse snapshot_action(const HttpRequest& req, const SandboxRecord& rec, const std::string& sub);
  /// For a create with from_snapshot: not_found unless the key may use that snapshot.
  void check_snapshot_access(const HttpRequest& req, const std::string& ref);
  /// GET /v1/snapshots, DELETE /v1/snapshots/{name}; status 0 when no route matches.
  HttpResponse snapshots_route(const HttpRequest& req);
  /// The list's answer: `here` alone, or with every peer's in a fleet (fleet.cpp).
  HttpResponse fleet_list(const HttpRequest& req, nlohmann::json here);
  /// `req` passed on to the manager `owner` (fleet.cpp).
  HttpResponse fleet_forward(const HttpRequest& req, int owner);
  HttpResponse remove(const HttpRequest& req, const SandboxRecord& rec);
  /// Our exec (argv) on `rec`, or /v1/run's one-shot when rec is nullptr.
  HttpResponse exec(const HttpRequest& req, const SandboxRecord* rec);
  HttpResponse commands(const HttpRequest& req, const SandboxRecord& rec);
  /// POST .../exec with "background": 202 {pid} (api_procs.cpp).
  HttpResponse background(const HttpRequest& req, const ExecBody& eb, const SandboxRecord* rec);
  /// GET .../exec/ws (rec) and GET /v1/run/ws (nullptr): an interactive command (api_ws.cpp).
  HttpResponse exec_ws(const HttpRequest& req, const SandboxRecord* rec);
  /// GET .../processes/{pid}/attach: a background process's output and input over a WebSocket.
  HttpResponse attach_ws(const HttpRequest& req, const SandboxRecord& rec, int pid);
  /// GET .../tcp/{port}: bytes to and from 127.0.0.1:port in the sandbox over a WebSocket.
  HttpResponse tcp_ws(const HttpRequest& req, const SandboxRecord& rec, uint16_t port);
  /// POST .../tokens: a short-lived token for the sandbox's WebSocket routes or a port.
  HttpResponse tokens(const HttpRequest& req, const SandboxRecord& rec);
  /// .../processes[/{pid}/{logs,signal}] (api_procs.cpp); sub is "processes...".
  HttpResponse processes_route(const HttpRequest& req, const SandboxRecord& rec, const std::string& sub);
  /// Runs one interactive session on c: the client's input to the command, its
  /// output and final message to the client (api_ws.cpp). `work` gets the
  /// client's first message when `first_message` (else an empty object).
  void interactive(ws::Connection& c, bool first_message,
                   const std::function<nlohmann::json(const nlohmann::json& first, ExecIO& io)>& work);
  /// Relays a tcp/{port} WebSocket to the sandbox's socket fd until both directions ended.
  void tunnel(ws::Connection& c, int fd);
  /// Counts a WebSocket session in flight and lets cancel_all reach its `cancel` (until the guard goes).
  std::shared_ptr<void> track_session(std::function<void()>* cancel);
  /// A one-shot's sandbox spec from a /v1/run body.
  SandboxSpec one_shot_spec(const nlohmann::json& body, const ApiKey& key) const;
  /// The command of an exec (on `id`) or one-shot (id empty, `spec`); returns {"exit": ...}.
  nlohmann::json run_command(const ExecBody& eb, const SandboxSpec& spec, const std::string& id,
                             const std::string& key_name, ExecIO& io);
  HttpResponse files_get(const HttpRequest& req, const std::string& id);
  HttpResponse files_put(const HttpRequest& req, const std::string& id);
  HttpResponse files_json_get(const HttpRequest& req, const SandboxRecord& rec);
  HttpResponse files_json_post(const HttpRequest& req, const SandboxRecord& rec);
  HttpResponse stat(const HttpRequest& req, const std::string& id);
  /// /v1/sandboxes/{id}/ports/{port}/{path...}: the HTTP reverse proxy (api_ports.cpp); sub is "ports/...".
  HttpResponse port_proxy(const HttpRequest& req, const SandboxRecord& rec, const std::string& sub);
  HttpResponse gc(const HttpRequest& req);
  HttpResponse healthz(const ApiKey& caller);
  HttpResponse metrics_text();

  /// The sandbox `id` names, when the caller may see it: its owner's key or an
  /// admin. Anyone else gets the same 404 as for a sandbox that never existed.
  SandboxRecord owned(const HttpRequest& req, const std::string& id);
  /// A request's spec made into what this manager runs: the owner, the default
  /// driver and network, and `image` resolved from the names the operator listed.
  SandboxSpec manager_spec(SandboxSpec spec, const nlohmann::json& body, const ApiKey& key) const;
  /// Reserves a sandbox slot of the key's cap (released by the returned guard).
  std::shared_ptr<void> reserve_sandbox(const std::string& key);
  /// Reserves an exec slot of the key's cap; every copy of the guard shares it, the last one frees it.
  std::shared_ptr<void> reserve_exec(const std::string& key);
  /// Runs a /commands string on a driver without a shell (deno) as the
  /// documented subset (core/shell_subset.hpp): one exec per step.
  ExecResult run_shell_subset(const SandboxRecord& rec, const std::string& command, uint64_t timeout_ms, ExecIO& io);
  /// A buffered command's outcome.
  struct Buffered {
    nlohmann::json exit;     ///< the exit record (exit_code, signal, timed_out, ...)
    std::string out, err;    ///< output up to the cap
    bool truncated = false;  ///< output went past the cap
  };
  /// Runs one command buffered: output collected up to the cap, the command
  /// killed with its tree when the client hangs up (unless detach).
  Buffered run_buffered(const HttpRequest& req, bool detach, const std::function<nlohmann::json(ExecIO&)>& run);

  friend class ExecStream;
  Config cfg_;
  const DriverTable& drivers_;
  KeyRing keys_;
  Limits limits_;
  Backend& backend_;
  /// Registers a started NDJSON stream (cancel_all interrupts it) and answers with it.
  HttpResponse ndjson_response(std::shared_ptr<ResponseStream> stream);
  std::string default_driver_;
  Metrics metrics_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> draining_{false};
  std::mutex mu_;
  std::map<std::string, int> execs_per_key_;
  std::map<std::string, int> creating_per_key_;  ///< creates under way, counted against the cap
  std::vector<std::weak_ptr<ResponseStream>> streams_;  ///< live NDJSON streams (under mu_), interrupted by cancel_all
  std::vector<std::function<void()>*> sessions_;  ///< live WebSocket sessions' cancel hooks (under mu_)
  std::string token_secret_ = new_token_secret();
  std::mutex probes_mu_;
  nlohmann::json probed_drivers_ = nlohmann::json::array();  ///< /healthz's drivers, from refresh_probes()
  bool default_driver_ok_ = false;
  std::shared_ptr<const Fleet> fleet_;
};

/// A record as the API shows it: host-private fields (pids, uid range) left out.
nlohmann::json public_record(const SandboxRecord& rec);

}  // namespace sbx::server
