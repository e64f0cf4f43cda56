// sbx serve: the sandbox manager. An HTTP control plane (docs/api.md) over
// this host's drivers, with an idle reaper, a graceful drain on SIGTERM, and
// nothing lost on restart (sandboxes outlive the manager; the registry holds them).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <thread>

#include "backends/drivers.hpp"
#include "cli/common.hpp"
#include "core/fsutil.hpp"
#include "core/local_backend.hpp"
#include "core/server/http_server.hpp"

namespace sbx::cli {

namespace {

// How often the warm pool is topped up; a claim is noticed within this long.
constexpr auto kPoolRefillInterval = std::chrono::milliseconds(500);

server::KeyRing build_keys(const Config& cfg, const std::string& key_file, bool dev) {
  server::KeyRing ring;
  std::string admin = cfg.api_key;
  if (!key_file.empty()) {
    auto text = read_file(key_file);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    admin = text;
  }
  if (!admin.empty()) {
    if (auto weak = server::weak_key_reason(admin); !weak.empty())
      warn("the admin API key is weak (" + weak + "); use e.g. `openssl rand -hex 32`");
    ring.add({"admin", admin, server::kAll});
  }
  for (auto& k : cfg.server.api_keys) {
    unsigned perms = 0;
    for (auto& p : k.permissions) perms |= server::parse_permission(p);
    if (auto weak = server::weak_key_reason(k.key); !weak.empty()) warn("API key '" + k.name + "' is weak (" + weak + ")");
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

}  // namespace

void register_serve(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("serve", "Run the sandbox manager (HTTP API)");
  struct State {
    std::string listen, driver, tls_cert, tls_key, log_format, api_key_file;
    bool dev = false;
  };
  auto st = std::make_shared<State>();
  sub->add_option("--listen", st->listen, "HOST:PORT to listen on (default 0.0.0.0:8000, 8400 for microvm)")
      ->type_name("ADDR");
  sub->add_option("--driver", st->driver, "default driver of new sandboxes")->type_name("NAME");
  sub->add_option("--tls-cert", st->tls_cert, "serve HTTPS with this PEM certificate chain")->type_name("FILE");
  sub->add_option("--tls-key", st->tls_key, "the PEM private key of --tls-cert")->type_name("FILE");
  sub->add_option("--log-format", st->log_format, "plain or json (default plain)")->type_name("FORMAT");
  sub->add_option("--api-key-file", st->api_key_file, "read the admin API key from FILE instead of ADMIN_API_KEY")
      ->type_name("FILE");
  sub->add_flag("--insecure-dev", st->dev, "allow running without a key, on a loopback address only");
  sub->callback([&g, &out, st] {
    Config cfg = load_config(g, st->driver);
    const auto& drivers = builtin_drivers();
    if (!cfg.driver_override.empty() && !find_driver(drivers, cfg.driver_override))
      throw Error(Errc::invalid_argument, "unknown driver '" + cfg.driver_override + "'").set_hint("drivers: " + driver_names(drivers));
    std::string listen = st->listen.empty() ? cfg.server.listen : st->listen;
    // A development server without a key only ever listens on loopback.
    if (listen.empty() && st->dev) listen = "127.0.0.1";
    const std::string& default_driver = cfg.driver_override.empty() ? cfg.local_backend : cfg.driver_override;
    uint16_t default_port = default_driver == "microvm" ? 8400 : 8000;
    auto [host, port] = parse_listen(listen, default_port);
    if (st->dev && !loopback(host))
      throw Error(Errc::invalid_argument, "--insecure-dev only listens on loopback, not " + host)
          .set_hint("--listen 127.0.0.1:8000");
    server::KeyRing keys = build_keys(cfg, st->api_key_file, st->dev);

    server::Limits limits;
    limits.max_sandboxes_per_key = cfg.server.max_sandboxes_per_key;
    limits.max_execs_per_key = cfg.server.max_execs_per_key;
    server::HttpOptions http;
    http.host = host;
    http.port = port;
    std::string log_format = st->log_format.empty() ? cfg.server.log_format : st->log_format;
    if (log_format != "plain" && log_format != "json")
      throw Error(Errc::usage, "unknown --log-format '" + log_format + "'").set_hint("use plain or json");
    http.json_logs = log_format == "json";
    http.max_upload_bytes = cfg.cp_max_bytes + (1 << 20);
    std::string cert = st->tls_cert.empty() ? cfg.server.tls_cert : st->tls_cert;
    std::string key = st->tls_key.empty() ? cfg.server.tls_key : st->tls_key;
    if (cert.empty() != key.empty()) throw Error(Errc::usage, "--tls-cert and --tls-key go together");
    if (!cert.empty()) {
      http.tls_cert_pem = with_context("--tls-cert", [&] { return read_file(cert); });
      http.tls_key_pem = with_context("--tls-key", [&] { return read_file(key); });
    }

    // Signals are taken synchronously by this thread; block them before any
    // other thread starts so none of those gets them.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    ::pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    ::signal(SIGPIPE, SIG_IGN);

    server::Api api(cfg, drivers, std::move(keys), limits);
    // Restart: sandboxes outlived the previous manager; the registry knows them. Reap the dead now.
    size_t reaped = api.reap();
    server::HttpServer srv(api, http);
    srv.start();
    std::fprintf(stderr, "sbx serve: listening on %s://%s:%u (default driver %s%s); reaped %zu dead sandboxes at start\n",
                 cert.empty() ? "http" : "https", host.c_str(), srv.port(),
                 cfg.driver_override.empty() ? cfg.local_backend.c_str() : cfg.driver_override.c_str(),
                 st->dev ? ", INSECURE development mode" : "", reaped);

    std::mutex mu;
    std::condition_variable cv;
    bool stopping = false;
    std::thread reaper([&] {
      std::unique_lock lock(mu);
      while (!cv.wait_for(lock, std::chrono::seconds(cfg.server.reap_interval_s), [&] { return stopping; })) {
        lock.unlock();
        try {
          if (size_t n = api.reap()) std::fprintf(stderr, "sbx serve: reaper removed %zu\n", n);
        } catch (const Error& e) {
          std::fprintf(stderr, "sbx serve: reaper: %s\n", e.what());
        }
        lock.lock();
      }
    });

    // The warm pool (core/pool.hpp): a create takes a pooled sandbox, this puts one back.
    bool pool_stopping = false;
    std::thread refiller;
    bool pooling = false;
    for (auto& [d, n] : cfg.pool_sizes) pooling = pooling || n > 0;
    if (pooling) {
      refiller = std::thread([&] {
        LocalBackend local(cfg, drivers);
        std::string last_errors;
        std::unique_lock lock(mu);
        do {
          lock.unlock();
          std::string errors;
          try {
            auto rep = local.fill_pool();
            if (!rep.started.empty()) std::fprintf(stderr, "sbx serve: pool: started %zu\n", rep.started.size());
            for (auto& [d, why] : rep.errors) errors += "sbx serve: pool: cannot fill the " + d + " pool: " + why + "\n";
          } catch (const Error& e) {
            errors = std::string("sbx serve: pool: ") + e.what() + "\n";
          }
          // Said once, not every second while a driver stays unusable.
          if (errors != last_errors) std::fputs(errors.c_str(), stderr);
          last_errors = errors;
          lock.lock();
        } while (!cv.wait_for(lock, kPoolRefillInterval, [&] { return pool_stopping; }));
      });
    }

    int sig = 0;
    ::sigwait(&sigs, &sig);
    {
      std::lock_guard lock(mu);
      pool_stopping = true;
    }
    cv.notify_all();
    if (refiller.joinable()) refiller.join();
    std::fprintf(stderr, "sbx serve: %s: draining (no new work; up to %llus for in-flight requests)\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", static_cast<unsigned long long>(cfg.server.drain_timeout_s));
    api.start_draining();
    srv.quiesce();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(cfg.server.drain_timeout_s);
    auto busy = [&] { return api.in_flight() > 0 || srv.open_requests() > 0; };
    while (busy() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (busy()) {
      std::fprintf(stderr, "sbx serve: cancelling %d requests still running\n", srv.open_requests());
      api.cancel_all();
      auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (busy() && std::chrono::steady_clock::now() < hard)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    reaper.join();
    srv.stop();
    std::fprintf(stderr, "sbx serve: stopped\n");
    out.status = 0;
  });
}

}  // namespace sbx::cli
