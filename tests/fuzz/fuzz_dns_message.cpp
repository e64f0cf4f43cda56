// The DNS messages the jails' forwarder reads (backends/common/net/dns_message.hpp):
// a sandbox's query and an upstream's answer, both untrusted. Any bytes parse
// or are refused; an answer never opens more addresses than it holds A records.
#include <arpa/nameser.h>

#include <cstdint>
#include <cstdlib>

#include "backends/common/net/dns_message.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace dns = sbx::net::dns;
  auto q = dns::parse_query(data, size);
  if (q) {
    // A refusal is at most the query, and a response: never a query itself.
    auto r = dns::error_reply(data, size, ns_r_refused);
    if (r.size() < 12 || r.size() > size || dns::parse_query(r.data(), r.size())) std::abort();
  }
  // The same bytes as an answer to a query for a fixed name, and to the one they hold.
  dns::Query fixed{static_cast<uint16_t>(size >= 2 ? (data[0] << 8) | data[1] : 0), "example.test", ns_t_a, ns_c_in};
  for (auto* query : {&fixed, q ? &*q : nullptr}) {
    if (!query) continue;
    auto ans = dns::chain_answers(data, size, *query);
    if (ans && ans->addrs.size() * 15 > size) std::abort();  // an A record takes 15 bytes or more
  }
  return 0;
}
