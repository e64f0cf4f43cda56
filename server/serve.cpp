#include "server/serve.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "core/fsutil.hpp"
#include "core/local_backend.hpp"
#include "server/fleet.hpp"
#include "server/http_server.hpp"
#include "server/preflight.hpp"

namespace sbx::server {

namespace {

// How often the warm pool is topped up; a claim is noticed within this long.
constexpr auto kPoolRefillInterval = std::chrono::milliseconds(500);
// How often /healthz's driver probes are run again (a driver going away shows within this long).
constexpr auto kProbeInterval = std::chrono::seconds(10);

void say(const std::string& line) { std::fprintf(stderr, "sbx serve: %s\n", line.c_str()); }

KeyRing build_keys(const Config& cfg, const std::string& key_file, bool dev) {
  KeyRing ring;
  std::string admin = cfg.api_key;
  if (!key_file.empty()) {
    auto text = read_file(key_file);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    admin = text;
  }
  if (!admin.empty()) {
    if (auto weak = weak_key_reason(admin); !weak.empty())
      say("warning: the admin API key is weak (" + weak + "); use e.g. `openssl rand -hex 32`");
    ring.add({"admin", admin, kAll});
  }
  for (auto& k : cfg.server.api_keys) {
    unsigned perms = 0;
    for (auto& p : k.permissions) perms |= parse_permission(p);
    if (auto weak = weak_key_reason(k.key); !weak.empty()) say("warning: API key '" + k.name + "' is weak (" + weak + ")");
    ring.add({k.name, k.key, perms});
  }
  if (ring.empty()) {
    if (!dev)
      throw Error(Errc::invalid_argument, "refusing to start without an API key")
          .set_hint("set ADMIN_API_KEY (or --api-key-file), or pass --insecure-dev for a loopback-only development server");
    ring.allow_anonymous();
  }
  return ring;
}

std::pair<std::string, uint16_t> parse_listen(const std::string& listen, uint16_t default_port) {
  if (listen.empty()) return {"0.0.0.0", default_port};
  std::string host = listen, port;
  if (listen.front() == '[') {
    auto close = listen.find(']');
    host = listen.substr(1, close - 1);
    if (close + 1 < listen.size() && listen[close + 1] == ':') port = listen.substr(close + 2);
  } else if (auto colon = listen.rfind(':'); colon != std::string::npos) {
    host = listen.substr(0, colon);
    port = listen.substr(colon + 1);
  }
  if (host.empty()) host = "0.0.0.0";
  unsigned long p = default_port;
  if (!port.empty()) {
    char* end;
    p = std::strtoul(port.c_str(), &end, 10);
    if (*end || p > 65535) throw Error(Errc::usage, "bad port in --listen '" + listen + "'").set_hint("--listen HOST:PORT");
  }
  return {host, static_cast<uint16_t>(p)};
}

bool loopback(const std::string& host) { return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost"; }

std::string default_driver_of(const Config& cfg) {
  return cfg.driver_override.empty() ? cfg.local_backend : cfg.driver_override;
}

// The HTTP side's settings: address, TLS, logs, upload cap.
HttpOptions http_options(const Config& cfg, const ServeOptions& opts) {
  std::string listen = opts.listen.empty() ? cfg.server.listen : opts.listen;
  // A development server without a key only ever listens on loopback.
  if (listen.empty() && opts.insecure_dev) listen = "127.0.0.1";
  HttpOptions http;
  std::tie(http.host, http.port) = parse_listen(listen, default_driver_of(cfg) == "microvm" ? 8400 : 8000);
  if (opts.insecure_dev && !loopback(http.host))
    throw Error(Errc::invalid_argument, "--insecure-dev only listens on loopback, not " + http.host)
        .set_hint("--listen 127.0.0.1:8000");
  std::string log_format = opts.log_format.empty() ? cfg.server.log_format : opts.log_format;
  if (log_format != "plain" && log_format != "json")
    throw Error(Errc::usage, "unknown --log-format '" + log_format + "'").set_hint("use plain or json");
  http.json_logs = log_format == "json";
  std::string cert = opts.tls_cert.empty() ? cfg.server.tls_cert : opts.tls_cert;
  std::string key = opts.tls_key.empty() ? cfg.server.tls_key : opts.tls_key;
  if (cert.empty() != key.empty()) throw Error(Errc::usage, "--tls-cert and --tls-key go together");
  if (!cert.empty()) {
    http.tls_cert_pem = with_context("--tls-cert", [&] { return read_file(cert); });
    http.tls_key_pem = with_context("--tls-key", [&] { return read_file(key); });
  }
  return http;
}

// A background loop that runs `step` every `interval` until stop() (and once at once when `first`).
class Ticker {
 public:
  template <class F>
  Ticker(std::chrono::milliseconds interval, bool first, F step)
      : thread_([this, interval, first, step = std::move(step)] {
          std::unique_lock lock(mu_);
          if (first) {
            lock.unlock();
            step();
            lock.lock();
          }
          while (!cv_.wait_for(lock, interval, [this] { return stopping_; })) {
            lock.unlock();
            step();
            lock.lock();
          }
        }) {}
  ~Ticker() { stop(); }
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// One refill of the warm pool; errors said once, not every tick while a driver stays unusable.
void refill_pool(LocalBackend& backend, std::string& last_errors) {
  std::string errors;
  try {
    auto rep = backend.fill_pool();
    if (!rep.started.empty()) say("pool: started " + std::to_string(rep.started.size()));
    for (auto& [d, why] : rep.errors) errors += "sbx serve: pool: cannot fill the " + d + " pool: " + why + "\n";
  } catch (const Error& e) {
    errors = std::string("sbx serve: pool: ") + e.what() + "\n";
  }
  if (errors != last_errors) std::fputs(errors.c_str(), stderr);
  last_errors = errors;
}

// SIGTERM/SIGINT: no new work, in-flight requests get drain_timeout_s, then the rest is cancelled.
void drain(Api& api, HttpServer& srv, const Config& cfg, int sig) {
  say(std::string(sig == SIGTERM ? "SIGTERM" : "SIGINT") + ": draining (no new work; up to " +
      std::to_string(cfg.server.drain_timeout_s) + "s for in-flight requests)");
  api.start_draining();
  srv.quiesce();
  auto busy = [&] { return api.in_flight() > 0 || srv.open_requests() > 0; };
  auto wait_idle = [&](std::chrono::steady_clock::duration d) {
    auto deadline = std::chrono::steady_clock::now() + d;
    while (busy() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  wait_idle(std::chrono::seconds(cfg.server.drain_timeout_s));
  if (busy()) {
    say("cancelling " + std::to_string(srv.open_requests()) + " requests still running");
    api.cancel_all();
    wait_idle(std::chrono::seconds(5));
  }
}

}  // namespace

int serve(const Config& config, const DriverTable& drivers, const ServeOptions& opts) {
  // Sandboxes made here that do not say otherwise (API creates, the warm pool) get the manager's network.
  Config cfg = config;
  cfg.default_network = cfg.server.default_network;
  if (!cfg.driver_override.empty() && !find_driver(drivers, cfg.driver_override))
    throw Error(Errc::invalid_argument, "unknown driver '" + cfg.driver_override + "'")
        .set_hint("drivers: " + driver_names(drivers));
  HttpOptions http = http_options(cfg, opts);
  KeyRing keys = build_keys(cfg, opts.api_key_file, opts.insecure_dev);
  Limits limits;
  limits.max_sandboxes_per_key = cfg.server.max_sandboxes_per_key;
  limits.max_execs_per_key = cfg.server.max_execs_per_key;
  // Before listening: a manager whose driver cannot start sandboxes here refuses, naming what is missing.
  preflight(cfg, drivers, default_driver_of(cfg));

  // Signals are taken synchronously by this thread; block them before any
  // other thread starts so none of those gets them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // In a fleet, new sandbox ids name this manager (server/fleet.hpp) before any is made.
  if (cfg.server.fleet.enabled()) set_sandbox_id_owner(cfg.server.fleet.self);
  LocalBackend backend(cfg, drivers);
  Api api(cfg, drivers, backend, std::move(keys), limits);
  if (cfg.server.fleet.enabled()) api.set_fleet(std::make_shared<Fleet>(cfg.server.fleet));
  // Restart: sandboxes outlived the previous manager; the registry knows them. Reap the dead now.
  size_t reaped = api.reap();
  HttpServer srv(api, http);
  srv.start();
  say("listening on " + std::string(http.tls_cert_pem.empty() ? "http" : "https") + "://" + http.host + ":" +
      std::to_string(srv.port()) + " (default driver " + default_driver_of(cfg) +
      (opts.insecure_dev ? ", INSECURE development mode" : "") + "); reaped " + std::to_string(reaped) +
      " dead sandboxes at start" +
      (cfg.server.fleet.enabled() ? "; fleet manager " + std::to_string(cfg.server.fleet.self) + " of " +
                                        std::to_string(cfg.server.fleet.size) + ", peers at " + cfg.server.fleet.peer_url
                                  : std::string()));

  Ticker reaper(std::chrono::seconds(cfg.server.reap_interval_s), false, [&] {
    try {
      if (size_t n = api.reap()) say("reaper removed " + std::to_string(n));
    } catch (const Error& e) {
      say(std::string("reaper: ") + e.what());
    }
  });
  Ticker prober(kProbeInterval, false, [&] { api.refresh_probes(); });
  bool pooling = false;
  for (auto& [d, n] : cfg.pool_sizes) pooling = pooling || n > 0;
  std::string last_pool_errors;
  std::optional<Ticker> refiller;
  // The warm pool (core/pool.hpp): a create takes a pooled sandbox, this puts one back.
  if (pooling) refiller.emplace(kPoolRefillInterval, true, [&] { refill_pool(backend, last_pool_errors); });

  int sig = 0;
  ::sigwait(&sigs, &sig);
  if (refiller) refiller->stop();
  drain(api, srv, cfg, sig);
  reaper.stop();
  prober.stop();
  srv.stop();
  say("stopped");
  return 0;
}

}  // namespace sbx::server
