// `sbx serve`'s lifecycle: keys, listen address and TLS from the
// configuration; the API over one LocalBackend shared with the pool refiller;
// the idle reaper; and on SIGTERM/SIGINT a drain that lets in-flight work
// finish before anything is cancelled. Sandboxes outlive the manager (the
// registry holds them), so a restart re-adopts them.
#pragma once

#include <string>

#include "core/config.hpp"
#include "core/driver.hpp"

namespace sbx::server {

/// What `sbx serve`'s flags add to the configuration (empty = the config's value).
struct ServeOptions {
  std::string listen;        ///< HOST:PORT
  std::string tls_cert;      ///< PEM certificate chain
  std::string tls_key;       ///< its PEM private key
  std::string log_format;    ///< plain | json
  std::string api_key_file;  ///< the admin key, instead of ADMIN_API_KEY
  bool insecure_dev = false; ///< no key, loopback only
};

/// Runs the manager until SIGTERM or SIGINT, then drains; returns the exit status.
/// Throws for a configuration it cannot start with (no key, port taken, bad TLS files).
int serve(const Config& cfg, const DriverTable& drivers, const ServeOptions& opts);

}  // namespace sbx::server
