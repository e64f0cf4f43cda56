#include "backends/drivers.hpp"

#include "backends/deno/driver.hpp"
#include "backends/microvm/driver.hpp"
#include "backends/runsc/driver.hpp"
#include "backends/subprocess/driver.hpp"

namespace sbx {

const DriverTable& builtin_drivers() {
  static const DriverTable table = {
      {"subprocess", "namespaces + overlayfs + cgroups + seccomp on this host", &subprocess::probe, &subprocess::make, true, true},
      {"runsc", "gVisor (runsc) containers: a user-space kernel between the code and the host", &runsc::probe, &runsc::make, true, true},
      {"microvm", "a micro-VM per sandbox (QEMU microvm or cloud-hypervisor) with its own guest kernel", &microvm::probe, &microvm::make, true, true},
      {"deno", "Python (Pyodide) and JavaScript/TypeScript in a Deno process, files in SQLite; no root needed",
       &deno::probe, &deno::make},
  };
  return table;
}

}  // namespace sbx
