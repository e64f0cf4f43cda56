// sbx serve: the sandbox manager (server/serve.hpp runs it).
#include <cstdio>

#include "backends/drivers.hpp"
#include "backends/microvm/driver.hpp"
#include "cli/common.hpp"
#include "server/serve.hpp"

namespace sbx::cli {

void register_serve(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("serve", "Run the sandbox manager (HTTP API)");
  auto st = std::make_shared<server::ServeOptions>();
  auto driver = std::make_shared<std::string>();
  auto require_kvm = std::make_shared<bool>(false);
  sub->add_option("--listen", st->listen, "HOST:PORT to listen on (default 0.0.0.0:8000, 8400 for microvm)")
      ->type_name("ADDR");
  sub->add_option("--driver", *driver, "default driver of new sandboxes")->type_name("NAME");
  sub->add_option("--tls-cert", st->tls_cert, "serve HTTPS with this PEM certificate chain")->type_name("FILE");
  sub->add_option("--tls-key", st->tls_key, "the PEM private key of --tls-cert")->type_name("FILE");
  sub->add_option("--log-format", st->log_format, "plain or json (default plain)")->type_name("FORMAT");
  sub->add_option("--api-key-file", st->api_key_file, "read the admin API key from FILE instead of ADMIN_API_KEY")
      ->type_name("FILE");
  sub->add_flag("--insecure-dev", st->insecure_dev, "allow running without a key, on a loopback address only");
  sub->add_flag("--require-kvm", *require_kvm,
                "refuse to start unless micro-VMs get hardware KVM (usable /dev/kvm, not PVM) and pass their other checks");
  sub->callback([&g, &out, st, driver, require_kvm] {
    Config cfg = load_config(g, *driver);
    if (*require_kvm) {
      // Each check on stderr (the journal, under systemd), then refuse on any failure.
      auto checks = microvm::kvm_start_checks(cfg);
      for (auto& c : checks) std::fprintf(stderr, "sbx serve: %s %s: %s\n", c.ok ? "ok" : "FAILED", c.name.c_str(), c.detail.c_str());
      microvm::require_checks(checks);
    }
    out.status = server::serve(cfg, builtin_drivers(), *st);
  });
}

}  // namespace sbx::cli
