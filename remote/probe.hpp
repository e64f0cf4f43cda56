// What an operator needs to know about a manager, measured from this host:
// the data behind `sbx doctor --remote`.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/config.hpp"

namespace sbx {

struct ManagerProbe {
  std::string url;
  bool reachable = false;      ///< a TCP (and TLS) connection was made
  std::string error;           ///< curl's reason when not reachable
  bool tls = false;            ///< https, certificate verified
  long http_status = 0;
  double rtt_ms = 0;           ///< time for GET /healthz, end to end
  std::optional<nlohmann::json> health;  ///< the /healthz body when it was JSON
  std::optional<int64_t> clock_skew_ms;  ///< manager clock minus ours, corrected for half the round trip
};

/// GETs <url>/healthz with cfg.api_key and measures it (3 s timeout). Never throws for network trouble.
ManagerProbe probe_manager(const Config& cfg, const std::string& url);

}  // namespace sbx
