// What the fuzz targets of the manager's API share: its Api, built as `sbx serve`
// builds it but with no HTTP server in front, on a fake backend.
#pragma once

#include <memory>
#include <string>

#include "core/backend.hpp"
#include "core/config.hpp"
#include "core/driver.hpp"
#include "server/api.hpp"

namespace sbx_fuzz {

/// The Api on `backend` with the one key `key`, its state under `state_dir`.
inline std::unique_ptr<sbx::server::Api> make_api(const std::string& state_dir, const sbx::DriverTable& drivers,
                                                  sbx::Backend& backend, const sbx::server::ApiKey& key) {
  sbx::Config cfg;
  cfg.state_dir = state_dir;
  cfg.local_backend = "subprocess";
  sbx::server::KeyRing keys;
  keys.add(key);
  return std::make_unique<sbx::server::Api>(cfg, drivers, backend, keys, sbx::server::Limits{});
}

}  // namespace sbx_fuzz
