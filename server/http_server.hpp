// The HTTP side of sbx serve: libmicrohttpd (loaded at start of serve only),
// one thread per connection, TLS when given a certificate, size caps and
// timeouts, one log line per request.
#pragma once

#include <memory>
#include <string>

#include "server/api.hpp"

namespace sbx::server {

struct HttpOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 8000;
  std::string tls_cert_pem;   ///< certificate chain, PEM; empty = plain HTTP
  std::string tls_key_pem;
  bool json_logs = false;
  unsigned idle_timeout_s = 60;          ///< idle keep-alive and slow-client cutoff
  size_t header_memory = 64 * 1024;      ///< per-connection buffer: caps header size
  unsigned max_connections = 512;
};

class HttpServer {
 public:
  HttpServer(Api& api, HttpOptions opts);
  ~HttpServer();
  /// Binds and starts serving in background threads; throws when the port is taken.
  void start();
  /// Stops accepting new connections (existing ones finish).
  void quiesce();
  /// Stops everything.
  void stop();
  /// The port actually bound (for --listen with port 0).
  uint16_t port() const;
  /// Requests received whose answer has not been sent in full yet.
  int open_requests() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sbx::server
