#include "backends/drivers.hpp"

#include "backends/deno/driver.hpp"
#include "backends/microvm/driver.hpp"
#include "backends/runsc/driver.hpp"
#include "backends/subprocess/driver.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/remote_backend.hpp"

namespace sbx {

namespace {
std::vector<Probe> probe_remote(const Config& cfg, bool /*deep*/) {
  if (cfg.manager_url.empty())
    return {{false, "manager URL", "SANDBOX_MANAGER_URL is not set", "set SANDBOX_MANAGER_URL to a running sbx serve"}};
  try {
    auto problem = check_manager_health(cfg, cfg.manager_url);
    return {{!problem, "manager " + cfg.manager_url, problem ? *problem : "healthy",
             "start sbx serve there, or check the URL and ADMIN_API_KEY; `sbx doctor --remote` says more"}};
  } catch (const Error& e) {
    return {{false, "manager " + cfg.manager_url, e.message(), e.hint()}};
  }
}
}  // namespace

const DriverTable& builtin_drivers() {
  static const DriverTable table = {
      {"subprocess", "namespaces + overlayfs + cgroups + seccomp on this host", &subprocess::probe, &subprocess::make},
      {"runsc", "gVisor (runsc) containers: a user-space kernel between the code and the host", &runsc::probe, &runsc::make},
      {"microvm", "a micro-VM per sandbox (QEMU microvm or cloud-hypervisor) with its own guest kernel", &microvm::probe, &microvm::make},
      {"deno", "Python (Pyodide) and JavaScript/TypeScript in a Deno process, files in SQLite; no root needed",
       &deno::probe, &deno::make},
      {"remote", "forward to the sbx serve at SANDBOX_MANAGER_URL", &probe_remote, nullptr},
  };
  return table;
}

}  // namespace sbx
