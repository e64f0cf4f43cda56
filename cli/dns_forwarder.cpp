#include "cli/dns_forwarder.hpp"

#include <cstdio>

#include "backends/common/net/forwarder.hpp"
#include "core/error.hpp"

namespace sbx::cli {

static_assert(std::char_traits<char>::length(kDnsForwarder) > 0);

int run_dns_forwarder() {
  try {
    return net::forwarder::serve();
  } catch (const Error& e) {
    std::fprintf(stderr, "sbx dns-forwarder: error: %s\n", e.what());
    return exit_status(e.code());
  }
}

}  // namespace sbx::cli
