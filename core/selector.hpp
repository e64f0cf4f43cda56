// The fallback chain of the operator guide: the remote manager when it is on,
// configured and healthy; else LOCAL_SANDBOX_BACKEND; `none` fails closed.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/driver.hpp"
#include "core/error.hpp"

namespace sbx {

struct Selection {
  std::string driver;               ///< the chosen driver ("remote" for the manager); empty when none
  std::vector<std::string> steps;   ///< why, one line per link of the chain, for doctor and warnings
  bool fell_back = false;           ///< the remote was wanted but not used
  std::string fallback_reason;      ///< why, when fell_back
  std::optional<Error> failure;     ///< set when the chain ends with no backend
};

/// Asks whether the manager at url is healthy; returns an error text or nullopt
/// when healthy. Throws sbx::Error when the answer is a configuration error
/// rather than ill health (the manager refused the API key).
using HealthCheck = std::function<std::optional<std::string>(const std::string& url)>;

/// Walks the chain and records every step; never throws. With --driver set,
/// that driver is used as given. When the chain ends at `none` (or at a
/// backend this build lacks), `failure` names the manager URL and what went wrong.
/// A health check that throws ends the chain with its error as `failure`: a
/// manager that refuses the key is never a reason to run the code locally.
Selection explain_selection(const Config& cfg, const DriverTable& drivers, const HealthCheck& health);
/// explain_selection, throwing its failure.
Selection select_backend(const Config& cfg, const DriverTable& drivers, const HealthCheck& health);

}  // namespace sbx
