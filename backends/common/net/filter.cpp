#include "backends/common/net/filter.hpp"

#include <nftables/libnftables.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "core/error.hpp"
#include "core/lazy_libs.hpp"

namespace sbx::net::filter {

namespace {

// Destinations a jail never reaches: "this network", RFC 1918, shared
// address space (carrier NAT), loopback, link-local (cloud metadata at
// 169.254.169.254), and 224/3 (multicast, reserved, limited broadcast).
// The host's own addresses are caught by the input chain: traffic to them
// is delivered locally and never forwarded.
constexpr const char* kBlocked4 =
    "0.0.0.0/8, 10.0.0.0/8, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16, 172.16.0.0/12, 192.168.0.0/16, 224.0.0.0/3";

struct CtxDeleter {
  void operator()(nft_ctx* c) const { nft_api().nft_ctx_free(c); }
};

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

constexpr const char* kReject = "reject with icmpx admin-prohibited";
constexpr const char* kDyn4 = "set dyn4 { type ifname . ipv4_addr; flags timeout; }";

// What a jail may send to a destination that is not the host.
std::string from_jail_rules() {
  std::string reject = kReject;
  std::string r = "    meta nfproto != ipv4 " + reject + "\n";
  r += "    ct status dnat meta l4proto { tcp, udp } th dport 53 iifname . ip daddr @dnsok accept\n";
  r += "    ip daddr @blocked4 " + reject + "\n";
  // A connection opened while its address was allowed outlives the TTL
  // (a download does not break when the name's answer expires); new ones need it open.
  r += "    iifname @restricted ct state != { established, related } iifname . ip daddr != @allow4 "
       "iifname . ip daddr != @dyn4 " + reject + "\n";
  return r;
}

bool dyn4_exists() {
  try {
    run(std::string("list set inet ") + kTable + " dyn4", "looking for the set of names' addresses");
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A table made by an sbx from before egress by name (its jails still
// running) lacks dyn4: add it and replace from_jail's rules, in one
// transaction; the older jails' traffic is judged as before (dyn4 holds none of theirs).
void upgrade_table() {
  std::string t = std::string("inet ") + kTable;
  run("add " + std::string(kDyn4).replace(4, 0, t + " ") + "\nflush chain " + t + " from_jail\n" +
          "table " + t + " {\n  chain from_jail {\n" + from_jail_rules() + "  }\n}\n",
      "upgrading the nftables table inet sbx_jail");
}

}  // namespace

std::string table_script() {
  std::string m = std::string("\"") + kIfPrefix + "*\"";
  std::string reject = kReject;
  std::string t = std::string("table inet ") + kTable + " {\n";
  t += std::string("  set blocked4 { type ipv4_addr; flags interval; elements = { ") + kBlocked4 + " } }\n";
  t += "  map dns4 { type ifname : ipv4_addr; }\n";
  t += "  set dnsok { type ifname . ipv4_addr; }\n";
  t += "  set restricted { type ifname; }\n";
  t += "  set allow4 { type ifname . ipv4_addr; flags interval; }\n";
  // What allowed names resolved to, each for its answer's TTL (the forwarder adds them).
  t += std::string("  ") + kDyn4 + "\n";
  // No spoofing: a jail sends only from the addresses routed to its own link.
  t += "  chain guard { type filter hook prerouting priority -160; policy accept;\n";
  t += "    iifname " + m + " fib saddr . iif oif missing drop\n  }\n";
  // DNS to the jail's gateway goes to the configured upstream resolver.
  t += "  chain dns { type nat hook prerouting priority dstnat; policy accept;\n";
  t += "    iifname " + m + " meta nfproto ipv4 meta l4proto { tcp, udp } th dport 53 fib daddr type local "
       "dnat ip to iifname map @dns4\n  }\n";
  t += "  chain egress { type nat hook postrouting priority srcnat; policy accept;\n";
  t += "    iifname " + m + " oifname != " + m + " masquerade\n  }\n";
  // Nothing enters a jail unless it answers the jail's own connection, so
  // two jails never reach each other whatever the address pool.
  t += "  chain forward { type filter hook forward priority -5; policy accept;\n";
  t += "    iifname " + m + " jump from_jail\n";
  t += "    oifname " + m + " ct state established,related accept\n";
  t += "    oifname " + m + " " + reject + "\n  }\n";
  t += "  chain from_jail {\n" + from_jail_rules() + "  }\n";
  // The host itself (every address it owns, the gateway included) answers a
  // jail only its DNS, and only when the upstream resolver is local.
  t += "  chain input { type filter hook input priority -5; policy accept;\n";
  t += "    iifname " + m + " jump to_host\n  }\n";
  t += "  chain to_host {\n";
  t += "    ct status dnat meta l4proto { tcp, udp } th dport 53 iifname . ip daddr @dnsok accept\n";
  t += "    " + reject + "\n  }\n";
  t += "}\n";
  return t;
}

std::vector<Cidr4> merge(std::vector<Cidr4> nets) {
  std::sort(nets.begin(), nets.end(), [](const Cidr4& a, const Cidr4& b) {
    return a.prefix != b.prefix ? a.prefix < b.prefix : a.addr < b.addr;
  });
  std::vector<Cidr4> out;
  for (auto& n : nets) {
    bool covered = false;
    for (auto& o : out) covered = covered || (o.prefix <= n.prefix && o.contains(n.addr));
    if (!covered) out.push_back(n);
  }
  return out;
}

std::string jail_script(const JailRules& j, bool add) {
  std::string verb = std::string(add ? "add" : "delete") + " element inet " + kTable + " ";
  std::string name = quoted(j.ifname);
  std::string up = ipv4_str(j.dns_via ? j.dns_via : j.dns_upstream);
  std::string s = verb + "dns4 { " + name + " : " + up + " }\n";
  s += verb + "dnsok { " + name + " . " + up + " }\n";
  if (j.restricted) {
    s += verb + "restricted { " + name + " }\n";
    auto nets = merge(j.allow);
    if (!nets.empty()) {
      s += verb + "allow4 { ";
      for (size_t i = 0; i < nets.size(); ++i) s += (i ? ", " : "") + name + " . " + nets[i].str();
      s += " }\n";
    }
  }
  return s;
}

void run(const std::string& script, const char* what, bool dry_run) {
  std::unique_ptr<nft_ctx, CtxDeleter> ctx(nft_api().nft_ctx_new(NFT_CTX_DEFAULT));
  if (!ctx) throw Error(Errc::internal, std::string(what) + ": cannot create an nftables context");
  nft_api().nft_ctx_buffer_output(ctx.get());
  nft_api().nft_ctx_buffer_error(ctx.get());
  nft_api().nft_ctx_set_dry_run(ctx.get(), dry_run);
  if (nft_api().nft_run_cmd_from_buffer(ctx.get(), script.c_str()) != 0) {
    std::string err = nft_api().nft_ctx_get_error_buffer(ctx.get());
    while (!err.empty() && err.back() == '\n') err.pop_back();
    throw Error(Errc::io, std::string(what) + ": nftables: " + err.substr(0, 1500))
        .set_hint("the network jail needs nf_tables (nft list ruleset must work as root)");
  }
}

bool table_exists() {
  try {
    run(std::string("list table inet ") + kTable, "looking for the jail table");
    return true;
  } catch (const Error&) {
    return false;
  }
}

void add_jail(const JailRules& j) {
  try {
    if (table_exists() && !dyn4_exists()) upgrade_table();
    run(jail_script(j, true), "adding the jail's filter elements");
    return;
  } catch (const Error&) {
    if (table_exists()) throw;
  }
  run(table_script(), "creating the nftables table inet sbx_jail");
  run(jail_script(j, true), "adding the jail's filter elements");
}

static std::string opening_element(const std::string& ifname, uint32_t addr) {
  return "element inet " + std::string(kTable) + " dyn4 { " + quoted(ifname) + " . " + ipv4_str(addr);
}

void open_address(const Opening& o) {
  std::string add = "add " + opening_element(o.ifname, o.addr) + " timeout " + std::to_string(o.seconds) + "s }\n";
  // An element's timeout is set when it is added: replace it, in one
  // transaction (no instant without it), or add it when it is not there.
  try {
    run("delete " + opening_element(o.ifname, o.addr) + " }\n" + add, "renewing an allowed address");
  } catch (const Error&) {
    run(add, "opening an allowed address");
  }
}

std::vector<uint32_t> open_addresses(const std::string& ifname) {
  std::unique_ptr<nft_ctx, CtxDeleter> ctx(nft_api().nft_ctx_new(NFT_CTX_DEFAULT));
  if (!ctx) return {};
  nft_api().nft_ctx_buffer_output(ctx.get());
  nft_api().nft_ctx_buffer_error(ctx.get());
  std::vector<uint32_t> out;
  if (nft_api().nft_run_cmd_from_buffer(ctx.get(), (std::string("list set inet ") + kTable + " dyn4").c_str()) != 0) return out;
  // Elements print as "sbxNAME" . a.b.c.d expires ...; pick this jail's.
  std::string text = nft_api().nft_ctx_get_output_buffer(ctx.get());
  std::string key = quoted(ifname) + " . ";
  for (size_t pos = text.find(key); pos != std::string::npos; pos = text.find(key, pos + 1)) {
    size_t start = pos + key.size();
    size_t end = text.find_first_not_of("0123456789.", start);
    if (auto a = parse_ipv4(text.substr(start, end - start))) out.push_back(*a);
  }
  return out;
}

void close_addresses(const std::string& ifname) {
  for (uint32_t a : open_addresses(ifname)) {
    try {
      run("delete " + opening_element(ifname, a) + " }", "closing an allowed address");
    } catch (const Error&) {  // expired meanwhile
    }
  }
}

void remove_jail(const JailRules& j) {
  close_addresses(j.ifname);
  try {
    run(jail_script(j, false), "deleting the jail's filter elements");
    return;
  } catch (const Error&) {
  }
  // Some were gone already (a half-made jail): delete one command at a time.
  std::string script = jail_script(j, false);
  size_t pos = 0;
  while (pos < script.size()) {
    size_t nl = script.find('\n', pos);
    try {
      run(script.substr(pos, nl - pos), "deleting a jail filter element");
    } catch (const Error&) {
    }
    pos = nl + 1;
  }
}

void delete_table() {
  if (table_exists()) run(std::string("delete table inet ") + kTable, "deleting the jail table");
}

}  // namespace sbx::net::filter
