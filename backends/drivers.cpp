#include "backends/drivers.hpp"

#include "backends/subprocess/driver.hpp"

namespace sbx {

const DriverTable& builtin_drivers() {
  static const DriverTable table = {
      {"subprocess", "namespaces + overlayfs + cgroups + seccomp on this host", &subprocess::probe, &subprocess::make},
  };
  return table;
}

}  // namespace sbx
