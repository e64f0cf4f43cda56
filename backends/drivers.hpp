// The driver table: one row per driver this build has.
#pragma once

#include "core/driver.hpp"

namespace sbx {

/// Every driver compiled in, in the order doctor lists them.
const DriverTable& builtin_drivers();

}  // namespace sbx
