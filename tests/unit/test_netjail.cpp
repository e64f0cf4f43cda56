#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "backends/common/net/dns.hpp"
#include "backends/common/net/filter.hpp"
#include "backends/common/net/jail.hpp"
#include "backends/common/net/rtnl.hpp"
#include "core/fsutil.hpp"
#include "core/netaddr.hpp"
#include "tests/unit/helpers.hpp"

using sbx::Cidr4;
using sbx::Errc;
using sbx_test::error_of;
namespace net = sbx::net;

TEST_CASE("netaddr: IPv4 networks parse strictly", "[netjail]") {
  auto c = sbx::parse_cidr4("203.0.113.0/24");
  REQUIRE(c);
  CHECK(c->str() == "203.0.113.0/24");
  CHECK(c->contains(*sbx::parse_ipv4("203.0.113.77")));
  CHECK_FALSE(c->contains(*sbx::parse_ipv4("203.0.114.1")));
  CHECK(sbx::parse_cidr4("198.51.100.7")->str() == "198.51.100.7/32");
  CHECK(sbx::parse_cidr4("0.0.0.0/0")->contains(0xFFFFFFFF));
  for (const char* bad : {"10.0.0.1/8", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/x", "10.1", "1.2.3.4.5", "", "::1/128"})
    CHECK_FALSE(sbx::parse_cidr4(bad));
}

TEST_CASE("netaddr: allowlist entries are networks or names, nothing else", "[netjail]") {
  CHECK(sbx::normalize_allow_entry("203.0.113.0/24") == "203.0.113.0/24");
  CHECK(sbx::normalize_allow_entry("203.0.113.5") == "203.0.113.5/32");
  CHECK(sbx::normalize_allow_entry("PyPI.org.") == "pypi.org");
  CHECK(sbx::normalize_allow_entry("files.pythonhosted.org") == "files.pythonhosted.org");
  for (const char* bad : {"10.0.0.1/8", "999.1.1.1", "1.2.3.4/40", "fd00::/8", "::1", "bad name", "-a.com", "a..b",
                          "a/b", ""}) {
    INFO(bad);
    CHECK(error_of([&] { sbx::normalize_allow_entry(bad); }).code() == Errc::invalid_argument);
  }
  auto e = error_of([] { sbx::normalize_allow_entry("fc00::/7"); });
  CHECK(e.message().find("IPv6") != std::string::npos);
}

TEST_CASE("netjail filter: allowlist networks are merged, jail elements keyed by interface", "[netjail]") {
  auto merged = net::filter::merge({*sbx::parse_cidr4("10.1.0.0/16"), *sbx::parse_cidr4("1.2.3.4"),
                                    *sbx::parse_cidr4("10.0.0.0/8"), *sbx::parse_cidr4("1.2.3.4")});
  REQUIRE(merged.size() == 2);
  CHECK(merged[0].str() == "10.0.0.0/8");
  CHECK(merged[1].str() == "1.2.3.4/32");

  net::filter::JailRules open{"sbxabcdefghijkl", *sbx::parse_ipv4("192.0.2.53"), false, {}};
  std::string s = net::filter::jail_script(open, true);
  CHECK(s.find("add element inet sbx_jail dns4 { \"sbxabcdefghijkl\" : 192.0.2.53 }") != std::string::npos);
  CHECK(s.find("restricted") == std::string::npos);
  net::filter::JailRules narrow = open;
  narrow.restricted = true;
  narrow.allow = {*sbx::parse_cidr4("198.51.100.0/24")};
  s = net::filter::jail_script(narrow, false);
  CHECK(s.find("delete element inet sbx_jail restricted { \"sbxabcdefghijkl\" }") != std::string::npos);
  CHECK(s.find("allow4 { \"sbxabcdefghijkl\" . 198.51.100.0/24 }") != std::string::npos);
  // Everything the host must never forward a jail to is in the table.
  std::string t = net::filter::table_script();
  for (const char* range : {"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
                            "192.168.0.0/16", "224.0.0.0/3"})
    CHECK(t.find(range) != std::string::npos);
  CHECK(t.find("meta nfproto != ipv4 reject") != std::string::npos);
}

TEST_CASE("netjail: names and addresses of a jail", "[netjail]") {
  CHECK(net::ifname_for("sbx_abcdefghijkl") == "sbxabcdefghijkl");
  CHECK(net::ifname_for("sbx_abcdefghijkl").size() == 15);  // IFNAMSIZ - 1
  Cidr4 pool = *sbx::parse_cidr4("10.213.0.0/16");
  CHECK(sbx::ipv4_str(net::block_of(pool, 0)) == "10.213.0.0");
  CHECK(sbx::ipv4_str(net::block_of(pool, 16383)) == "10.213.255.252");
  net::Jail j;
  j.host_addr = *sbx::parse_ipv4("10.213.0.1");
  CHECK(j.resolv_conf().find("nameserver 10.213.0.1\n") != std::string::npos);
}

TEST_CASE("netjail: a pool that overlaps a host route is refused", "[netjail]") {
  const std::string routes =
      "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
      "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"   // default via 192.0.2.1
      "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"   // 192.0.2.0/24
      "docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"  // 172.17.0.0/16
      "sbxabcdefghijkl\t0000D50A\t00000000\t0001\t0\t0\t0\tFCFFFFFF\t0\t0\t0\n";  // a jail's 10.213.0.0/30
  CHECK(net::pool_clash(*sbx::parse_cidr4("10.213.0.0/16"), routes).empty());
  CHECK(net::pool_clash(*sbx::parse_cidr4("172.16.0.0/12"), routes) == "172.17.0.0/16 dev docker0");
  CHECK(net::pool_clash(*sbx::parse_cidr4("172.17.5.0/24"), routes) == "172.17.0.0/16 dev docker0");
  CHECK(net::pool_clash(*sbx::parse_cidr4("192.0.2.128/25"), routes) == "192.0.2.0/24 dev eth0");
}

TEST_CASE("netjail dns: the host's first IPv4 nameserver", "[netjail]") {
  CHECK(net::dns::first_nameserver("# comment\nsearch x\nnameserver fd00::53\nnameserver 10.255.255.53\nnameserver 1.1.1.1\n") ==
        *sbx::parse_ipv4("10.255.255.53"));
  CHECK(net::dns::first_nameserver("nameserver ::1\n") == 0);
  CHECK(net::dns::upstream("192.0.2.53") == *sbx::parse_ipv4("192.0.2.53"));
  CHECK(error_of([] { net::dns::upstream("resolver.example"); }).code() == Errc::invalid_argument);
}

TEST_CASE("netjail dns: resolv.conf is written in place of a symlink, never through it", "[netjail]") {
  sbx_test::TempDir dir("netjail");
  std::string outside = dir.path + "/outside";
  sbx::write_file_atomic(outside, "host's file\n");
  std::string etc = dir.path + "/root/etc";
  sbx::make_dirs(etc);
  REQUIRE(::symlink(outside.c_str(), (etc + "/resolv.conf").c_str()) == 0);
  std::string text = "nameserver 10.213.0.1\n";
  CHECK(net::dns::write_resolv_conf(etc.c_str(), text.data(), text.size()) == 0);
  CHECK(sbx::read_file(outside) == "host's file\n");
  struct stat st {};
  REQUIRE(::lstat((etc + "/resolv.conf").c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK(sbx::read_file(etc + "/resolv.conf") == text);
  // An image without /etc gets one; an /etc that is a symlink is refused.
  std::string bare = dir.path + "/bare/etc";
  sbx::make_dirs(dir.path + "/bare");
  CHECK(net::dns::write_resolv_conf(bare.c_str(), text.data(), text.size()) == 0);
  CHECK(sbx::read_file(bare + "/resolv.conf") == text);
  std::string linked = dir.path + "/linked";
  sbx::make_dirs(linked);
  REQUIRE(::symlink(dir.path.c_str(), (linked + "/etc").c_str()) == 0);
  CHECK(net::dns::write_resolv_conf((linked + "/etc").c_str(), text.data(), text.size()) != 0);
}

namespace {
bool can_make_jails() {
  if (::geteuid() != 0) return false;
  try {
    net::filter::run(net::filter::table_script(), "checking", true);
    return true;
  } catch (const sbx::Error&) {
    return false;
  }
}

std::string fake_id() {
  static const char* alphabet = "abcdefghijklmnopqrstuvwxyz234567";
  std::string id = "sbx_";
  unsigned seed = static_cast<unsigned>(::getpid()) * 2654435761u;
  for (int i = 0; i < 12; ++i, seed = seed * 1103515245u + 12345u) id += alphabet[(seed >> 16) % 32];
  return id;
}
}  // namespace

TEST_CASE("netjail: setup makes namespace, link, addresses and filter; teardown removes them all", "[netjail][root]") {
  if (!can_make_jails()) {
    WARN("skipped: needs root and nf_tables");
    return;
  }
  for (auto attach : {net::Attach::netns, net::Attach::tap}) {
    if (attach == net::Attach::tap && ::access("/dev/net/tun", R_OK | W_OK) != 0) continue;
    net::JailRequest req;
    req.id = fake_id();
    req.state_dir = "/nonexistent/unit-test";
    req.driver = "unit";
    req.pool = *sbx::parse_cidr4("10.214.250.0/24");  // rules only: no packet is sent anywhere
    req.dns = "192.0.2.53";
    req.allow = {"198.51.100.0/24"};
    req.attach = attach;
    net::Jail j = net::setup(req);
    CHECK(net::Rtnl().index(j.ifname) != 0);
    CHECK(sbx::path_exists(net::run_dir() + "/leases/" + req.id));
    CHECK(Cidr4{req.pool}.contains(j.sandbox_addr));
    CHECK(j.host_addr + 1 == j.sandbox_addr);
    CHECK(net::filter::table_exists());
    CHECK(net::leftovers(req.state_dir, "unit", {}) == std::vector<std::string>{req.id});
    CHECK(net::leftovers(req.state_dir, "unit", {req.id}).empty());
    CHECK(net::leftovers(req.state_dir, "other-driver", {}).empty());
    if (attach == net::Attach::netns) {
      CHECK(sbx::path_exists(j.netns));
    } else {
      CHECK(j.netns.empty());
      CHECK(net::open_tap(j));
    }
    net::teardown(req.id);
    CHECK(net::Rtnl().index(j.ifname) == 0);
    CHECK_FALSE(sbx::path_exists(net::run_dir() + "/leases/" + req.id));
    CHECK_FALSE(sbx::path_exists(net::run_dir() + "/netns/" + req.id));
    CHECK(net::leftovers(req.state_dir, "unit", {}).empty());
    net::teardown(req.id);  // idempotent
  }
}
