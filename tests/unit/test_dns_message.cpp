// What the jails' DNS forwarder reads of a query and of the upstream's answer
// (backends/common/net/dns_message.hpp): which addresses an allowed name opens.
#include <arpa/nameser.h>
#include <resolv.h>

#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "backends/common/net/dns_message.hpp"
#include "backends/common/net/filter.hpp"
#include "core/netaddr.hpp"

namespace dns = sbx::net::dns;
using Bytes = std::vector<uint8_t>;

namespace {

Bytes name_wire(const std::string& name) {
  Bytes out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    out.push_back(static_cast<uint8_t>(dot - start));
    out.insert(out.end(), name.begin() + static_cast<long>(start), name.begin() + static_cast<long>(dot));
    start = dot + 1;
  }
  out.push_back(0);
  return out;
}

void put16(Bytes& b, unsigned v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}

struct Rr {
  std::string owner;
  unsigned type;
  uint32_t ttl;
  Bytes rdata;
};

Bytes message(uint16_t id, bool response, const std::string& qname, const std::vector<Rr>& answers, unsigned rcode = 0) {
  Bytes b;
  put16(b, id);
  put16(b, (response ? 0x8180u : 0x0100u) | rcode);
  put16(b, 1);
  put16(b, static_cast<unsigned>(answers.size()));
  put16(b, 0);
  put16(b, 0);
  Bytes q = name_wire(qname);
  b.insert(b.end(), q.begin(), q.end());
  put16(b, ns_t_a);
  put16(b, ns_c_in);
  for (auto& rr : answers) {
    Bytes o = name_wire(rr.owner);
    b.insert(b.end(), o.begin(), o.end());
    put16(b, rr.type);
    put16(b, ns_c_in);
    put16(b, rr.ttl >> 16);
    put16(b, rr.ttl & 0xffff);
    put16(b, static_cast<unsigned>(rr.rdata.size()));
    b.insert(b.end(), rr.rdata.begin(), rr.rdata.end());
  }
  return b;
}

Rr a(const std::string& owner, const char* addr, uint32_t ttl) {
  uint32_t v = *sbx::parse_ipv4(addr);
  return {owner, ns_t_a, ttl, {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)}};
}

Rr cname(const std::string& owner, const std::string& target) { return {owner, ns_t_cname, 60, name_wire(target)}; }

std::vector<std::string> addrs(const dns::Answer& ans) {
  std::vector<std::string> out;
  for (auto& g : ans.addrs) out.push_back(sbx::ipv4_str(g.addr) + "/" + std::to_string(g.ttl));
  return out;
}

}  // namespace

TEST_CASE("dns message: a query's name, type and class; anything else is no query", "[netjail][dns]") {
  Bytes q = message(0x1234, false, "PyPI.Org", {});
  auto parsed = dns::parse_query(q.data(), q.size());
  REQUIRE(parsed);
  CHECK(parsed->id == 0x1234);
  CHECK(parsed->name == "pypi.org");
  CHECK(parsed->qtype == ns_t_a);
  CHECK(parsed->qclass == ns_c_in);
  Bytes resp = message(0x1234, true, "pypi.org", {});
  CHECK_FALSE(dns::parse_query(resp.data(), resp.size()));
  for (size_t cut = 0; cut < q.size(); ++cut) CHECK_FALSE(dns::parse_query(q.data(), cut));
  // The refusal keeps id and question, says REFUSED and carries nothing else.
  Bytes r = dns::error_reply(q.data(), q.size(), ns_r_refused);
  REQUIRE(r.size() == q.size());
  CHECK((r[2] & 0x80) != 0);
  CHECK((r[3] & 0x0f) == ns_r_refused);
  CHECK(Bytes(r.begin() + 12, r.end()) == Bytes(q.begin() + 12, q.end()));
}

TEST_CASE("dns message: an answer opens the A records of the name and its CNAME chain only", "[netjail][dns]") {
  Bytes qb = message(7, false, "alias.test", {});
  auto q = *dns::parse_query(qb.data(), qb.size());
  // Out of order, with an A record of a name nobody asked for.
  Bytes resp = message(7, true, "alias.test",
                       {a("public-b.test", "198.51.100.11", 30), a("evil.test", "203.0.113.9", 30),
                        cname("hop.test", "public-b.test"), cname("Alias.Test", "hop.test")});
  auto ans = dns::chain_answers(resp.data(), resp.size(), q);
  REQUIRE(ans);
  CHECK(addrs(*ans) == std::vector<std::string>{"198.51.100.11/30"});
  REQUIRE(ans->aliases.size() == 2);
  CHECK(ans->aliases[0].first == "hop.test");
  CHECK(ans->aliases[1].first == "public-b.test");

  // Not the answer to this query: another id, another name.
  Bytes other_id = message(8, true, "alias.test", {a("alias.test", "198.51.100.11", 30)});
  CHECK_FALSE(dns::chain_answers(other_id.data(), other_id.size(), q));
  Bytes other_name = message(7, true, "evil.test", {a("evil.test", "203.0.113.9", 30)});
  CHECK_FALSE(dns::chain_answers(other_name.data(), other_name.size(), q));
  // NXDOMAIN opens nothing, whatever it carries.
  Bytes nx = message(7, true, "alias.test", {a("alias.test", "198.51.100.11", 30)}, ns_r_nxdomain);
  auto none = dns::chain_answers(nx.data(), nx.size(), q);
  REQUIRE(none);
  CHECK(none->addrs.empty());
}

TEST_CASE("netjail filter: a jail with names sends its DNS to the forwarder; dyn4 holds what they opened",
          "[netjail][dns]") {
  sbx::net::filter::JailRules r{"sbxabcdefghijkl", *sbx::parse_ipv4("192.0.2.53"), true, {}, 0x7F020D35};
  std::string s = sbx::net::filter::jail_script(r, true);
  CHECK(s.find("dns4 { \"sbxabcdefghijkl\" : 127.2.13.53 }") != std::string::npos);
  CHECK(s.find("dnsok { \"sbxabcdefghijkl\" . 127.2.13.53 }") != std::string::npos);
  std::string t = sbx::net::filter::table_script();
  CHECK(t.find("set dyn4 { type ifname . ipv4_addr; flags timeout; }") != std::string::npos);
  CHECK(t.find("iifname . ip daddr != @allow4 iifname . ip daddr != @dyn4 reject") != std::string::npos);
}
