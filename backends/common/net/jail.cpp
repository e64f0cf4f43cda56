#include "backends/common/net/jail.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "backends/common/net/dns.hpp"
#include "backends/common/net/filter.hpp"
#include "backends/common/net/forwarder.hpp"
#include "backends/common/net/rtnl.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/fsutil.hpp"

namespace sbx::net {

using nlohmann::json;

namespace {

constexpr const char* kPeer = "eth0";

std::string leases_dir() { return run_dir() + "/leases"; }
std::string addrs_dir() { return run_dir() + "/addrs"; }
std::string netns_dir() { return run_dir() + "/netns"; }
std::string forward_marker() { return run_dir() + "/ip_forward-was-off"; }

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') out.emplace_back(e->d_name);
  ::closedir(d);
  return out;
}

void sysctl(const std::string& path, const char* value) {
  with_context("setting " + path, [&] { write_knob(path, value); });
}

// What teardown needs, written before anything is created.
struct Lease {
  std::string id, state_dir, driver, ifname, netns, addr_key;
  filter::JailRules rules;
  std::vector<std::string> names;  // allowed domains, enforced by the forwarder
};

json to_json(const Lease& l) {
  json allow = json::array();
  for (auto& c : l.rules.allow) allow.push_back(c.str());
  return {{"id", l.id},         {"state_dir", l.state_dir},   {"driver", l.driver},
          {"ifname", l.ifname}, {"netns", l.netns},           {"addr", l.addr_key},
          {"dns", ipv4_str(l.rules.dns_upstream)}, {"restricted", l.rules.restricted}, {"allow", allow},
          {"names", l.names}, {"dns_via", l.rules.dns_via ? ipv4_str(l.rules.dns_via) : ""}};
}

std::optional<Lease> read_lease(const std::string& id) {
  auto text = read_file_if_exists(leases_dir() + "/" + id);
  if (!text) return std::nullopt;
  Lease l;
  try {
    json j = json::parse(*text);
    l.id = j.value("id", id);
    l.state_dir = j.value("state_dir", "");
    l.driver = j.value("driver", "");
    l.ifname = j.value("ifname", ifname_for(id));
    l.netns = j.value("netns", "");
    l.addr_key = j.value("addr", "");
    l.rules.ifname = l.ifname;
    l.rules.dns_upstream = parse_ipv4(j.value("dns", "")).value_or(0);
    l.rules.restricted = j.value("restricted", false);
    for (auto& a : j.value("allow", json::array()))
      if (auto c = parse_cidr4(a.get<std::string>())) l.rules.allow.push_back(*c);
    l.rules.dns_via = parse_ipv4(j.value("dns_via", "")).value_or(0);
    l.names = j.value("names", std::vector<std::string>{});
  } catch (const json::exception&) {
    // A torn lease still names the id: tear down by the derived names.
    l.id = id;
    l.ifname = ifname_for(id);
    l.rules.ifname = l.ifname;
  }
  return l;
}

void write_lease(const Lease& l) {
  write_file_atomic(leases_dir() + "/" + l.id, to_json(l).dump(), 0600, Durability::survive_process);
}

// A fresh namespace, made by a short-lived thread (unshare affects only the
// calling thread) and pinned by a bind mount; the thread also opens the
// rtnetlink socket that configures the inside, which stays bound to it.
Rtnl make_netns(const std::string& path) {
  Fd f(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444));
  if (!f) throw sys_error("creating " + path, errno);
  f.reset();
  std::optional<Rtnl> inside;
  std::exception_ptr failure;
  std::thread t([&] {
    try {
      if (::unshare(CLONE_NEWNET) != 0) throw sys_error("creating a network namespace", errno);
      if (::mount("/proc/thread-self/ns/net", path.c_str(), nullptr, MS_BIND, nullptr) != 0)
        throw sys_error("pinning the network namespace at " + path, errno);
      // No IPv6 on the jail's link (the host routes none for it); loopback keeps ::1.
      sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
      inside.emplace();
    } catch (...) {
      failure = std::current_exception();
    }
  });
  t.join();
  if (failure) std::rethrow_exception(failure);
  return std::move(*inside);
}

void configure_inside(Rtnl& in, const Jail& j) {
  unsigned lo = in.index("lo");
  if (lo) in.set_up(lo);
  unsigned eth = in.index(kPeer);
  if (!eth) throw Error(Errc::io, "the jail's eth0 did not appear in its namespace");
  in.add_addr4(eth, j.sandbox_addr, j.prefix);
  in.set_up(eth);
  in.add_default_route4(j.host_addr);
}

Fd attach_tap(const std::string& name) {
  Fd tun(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  if (!tun) throw sys_error("opening /dev/net/tun", errno);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  if (::ioctl(tun.get(), TUNSETIFF, &ifr) != 0) throw sys_error("attaching to tap " + name, errno);
  return tun;
}

void make_tap(const std::string& name) {
  Fd tun = attach_tap(name);
  // Persistent: it lives until teardown deletes it, not until this fd closes.
  if (::ioctl(tun.get(), TUNSETPERSIST, 1) != 0) throw sys_error("making tap " + name + " persistent", errno);
}

void configure_host(Rtnl& host, const Jail& j, bool via_forwarder) {
  unsigned idx = host.index(j.ifname);
  if (!idx) throw Error(Errc::io, "the jail's host interface " + j.ifname + " did not appear");
  sysctl("/proc/sys/net/ipv6/conf/" + j.ifname + "/disable_ipv6", "1");
  // DNAT to a loopback resolver (127.0.0.53 and the like) needs this on the jail's link only.
  if ((j.dns_upstream >> 24) == 127 || via_forwarder) sysctl("/proc/sys/net/ipv4/conf/" + j.ifname + "/route_localnet", "1");
  host.add_addr4(idx, j.host_addr, j.prefix);
  host.set_up(idx);
}

void enable_forwarding() {
  auto v = read_file_if_exists("/proc/sys/net/ipv4/ip_forward").value_or("1");
  if (!v.empty() && v[0] == '0') {
    // Remembered, so the last teardown puts the host back as it was.
    write_file_atomic(forward_marker(), "", 0600, Durability::survive_process);
    sysctl("/proc/sys/net/ipv4/ip_forward", "1");
  }
}

// Everything of one jail, in reverse order of creation; each step tolerates
// "already gone". Caller holds the lock.
void teardown_locked(const std::string& id) {
  auto lease = read_lease(id);
  std::string ifname = lease ? lease->ifname : ifname_for(id);
  if (lease && lease->rules.dns_upstream) filter::remove_jail(lease->rules);
  Rtnl host;
  host.del_link(ifname);
  std::string ns = netns_dir() + "/" + id;
  ::umount2(ns.c_str(), MNT_DETACH);
  if (::unlink(ns.c_str()) != 0 && errno != ENOENT) throw sys_error("removing " + ns, errno);
  // The claim: the lease names it, but a setup cut short may have claimed before recording it.
  for (auto& key : entries(addrs_dir())) {
    std::string link = addrs_dir() + "/" + key;
    char target[64] = {};
    ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    if (n > 0 && std::string(target, static_cast<size_t>(n)) == id) ::unlink(link.c_str());
  }
  std::string lp = leases_dir() + "/" + id;
  if (::unlink(lp.c_str()) != 0 && errno != ENOENT) throw sys_error("removing " + lp, errno);
  // A query the forwarder took before the lease went may have opened an address since.
  if (lease && !lease->names.empty() && filter::table_exists()) filter::close_addresses(ifname);
  if (!any_names()) forwarder::stop();
  if (entries(leases_dir()).empty()) {
    filter::delete_table();
    if (path_exists(forward_marker())) {
      sysctl("/proc/sys/net/ipv4/ip_forward", "0");
      ::unlink(forward_marker().c_str());
    }
  }
}

Fd lock() {
  make_dirs(leases_dir(), 0700);
  make_dirs(addrs_dir(), 0700);
  make_dirs(netns_dir(), 0700);
  return lock_file(run_dir() + "/lock");
}

}  // namespace

std::string Jail::resolv_conf() const {
  return "# sbx network jail: DNS through the host\nnameserver " + ipv4_str(host_addr) + "\noptions timeout:2 attempts:2\n";
}

JailRequest request_for(const SandboxRecord& rec, const Config& cfg, const std::string& driver) {
  JailRequest r;
  r.id = rec.id;
  r.state_dir = cfg.state_dir;
  r.driver = driver;
  if (auto p = parse_cidr4(cfg.net_pool)) r.pool = *p;
  r.dns = cfg.net_dns;
  r.allow = rec.spec.allow;
  return r;
}

json describe(const Jail& j) {
  return {{"ifname", j.ifname}, {"address", ipv4_str(j.sandbox_addr) + "/" + std::to_string(j.prefix)},
          {"gateway", ipv4_str(j.host_addr)}, {"dns_upstream", ipv4_str(j.dns_upstream)}};
}

// Host-wide, never per state root: the filter table is host-wide too, and
// "the last jail is gone" must count every jail on the host.
std::string run_dir() { return "/run/sbx/netjail"; }

std::string ifname_for(const std::string& id) { return filter::kIfPrefix + id.substr(id.size() > 12 ? id.size() - 12 : 0); }

uint32_t block_of(const Cidr4& pool, uint64_t i) { return pool.addr + static_cast<uint32_t>(i * 4); }

std::string pool_clash(const Cidr4& pool, const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string iface, dst, gw, flags, refcnt, use, metric, mask;
    if (!(f >> iface >> dst >> gw >> flags >> refcnt >> use >> metric >> mask)) continue;
    if (iface.rfind(filter::kIfPrefix, 0) == 0) continue;
    // The file holds addresses in network byte order, printed as a host-order hex word.
    uint32_t d = ntohl(static_cast<uint32_t>(std::stoul(dst, nullptr, 16)));
    uint32_t m = ntohl(static_cast<uint32_t>(std::stoul(mask, nullptr, 16)));
    int prefix = __builtin_popcount(m);
    if (prefix == 0) continue;  // the default route: where jails go out, no clash
    Cidr4 route{d & m, prefix};
    bool overlap = route.prefix <= pool.prefix ? route.contains(pool.addr) : pool.contains(route.addr);
    if (overlap) return route.str() + " dev " + iface;
  }
  return "";
}

Jail setup(const JailRequest& req) {
  if (req.pool.prefix > 30) throw Error(Errc::invalid_argument, "network pool " + req.pool.str() + " is smaller than a /30");
  if (auto clash = pool_clash(req.pool, read_file_if_exists("/proc/net/route").value_or("")); !clash.empty())
    throw Error(Errc::conflict, "network pool " + req.pool.str() + " overlaps this host's route " + clash)
        .set_hint("set network.pool (or SBX_NET_POOL) to a range no route or address of the host uses");
  Jail j;
  j.id = req.id;
  j.ifname = ifname_for(req.id);
  j.dns_upstream = dns::upstream(req.dns);
  filter::JailRules rules;
  rules.ifname = j.ifname;
  rules.dns_upstream = j.dns_upstream;
  rules.restricted = !req.allow.empty();
  // Names are enforced where they are used: the forwarder opens what they
  // resolve to, for their TTL, when the sandbox asks (forwarder.hpp).
  std::vector<std::string> names;
  for (auto& entry : req.allow) {
    if (auto c = parse_cidr4(entry))
      rules.allow.push_back(*c);
    else
      names.push_back(entry);
  }
  if (!names.empty()) rules.dns_via = forwarder::kAddr;

  Fd guard = lock();
  Lease lease{req.id, req.state_dir, req.driver, j.ifname, "", "", rules, names};
  if (req.attach == Attach::netns) lease.netns = j.netns = netns_dir() + "/" + req.id;
  write_lease(lease);
  fault::point("create.jail.lease");
  try {
    // The id's hash picks the first candidate, so a restart never reshuffles
    // and two creators rarely race for the same block; symlink() is the atomic claim.
    uint64_t blocks = req.pool.size() / 4;
    uint64_t start = std::hash<std::string>{}(req.id) % blocks;
    for (uint64_t k = 0; k < blocks && lease.addr_key.empty(); ++k) {
      uint32_t net = block_of(req.pool, (start + k) % blocks);
      std::string key = ipv4_str(net);
      if (::symlink(req.id.c_str(), (addrs_dir() + "/" + key).c_str()) == 0) {
        lease.addr_key = key;
        j.host_addr = net + 1;
        j.sandbox_addr = net + 2;
      } else if (errno != EEXIST) {
        throw sys_error("claiming " + key + " in " + addrs_dir(), errno);
      }
    }
    if (lease.addr_key.empty())
      throw Error(Errc::limit_exceeded, "network pool " + req.pool.str() + " is full (" + std::to_string(blocks) + " jails)")
          .set_hint("remove sandboxes, or set a larger network.pool");
    write_lease(lease);

    Rtnl host;
    if (req.attach == Attach::netns) {
      Rtnl inside = make_netns(j.netns);
      Fd nsfd(::open(j.netns.c_str(), O_RDONLY | O_CLOEXEC));
      if (!nsfd) throw sys_error("opening " + j.netns, errno);
      host.add_veth(j.ifname, kPeer, nsfd.get());
      configure_host(host, j, !lease.names.empty());
      configure_inside(inside, j);
      fault::point("create.jail.link");
    } else {
      make_tap(j.ifname);
      configure_host(host, j, !lease.names.empty());
    }
    enable_forwarding();
    filter::add_jail(rules);
    fault::point("create.jail.nft");
    if (!names.empty()) forwarder::ensure_running();
  } catch (Error& e) {
    try {
      teardown_locked(req.id);
    } catch (const Error& cleanup) {
      e.add_context("(cleaning up the half-made jail also failed: " + std::string(cleanup.what()) + ")");
    }
    throw e.add_context("setting up the network jail");
  }
  return j;
}

void teardown(const std::string& id) {
  if (id.empty() || id.find('/') != std::string::npos) return;
  // Nothing was ever made for this id (and none can be in the making: setup
  // writes the lease first, under the lock): stay off the lock.
  std::string ns = netns_dir() + "/" + id;
  if (!path_exists(leases_dir() + "/" + id) && !path_exists(ns)) return;
  Fd guard = lock();
  with_context("tearing down the network jail of " + id, [&] { teardown_locked(id); });
}

std::vector<std::string> leftovers(const std::string& state_dir, const std::string& driver,
                                   const std::set<std::string>& live_ids) {
  std::vector<std::string> out;
  for (auto& id : entries(leases_dir())) {
    if (live_ids.count(id)) continue;
    auto l = read_lease(id);
    if (l && l->state_dir == state_dir && l->driver == driver) out.push_back(id);
  }
  return out;
}

std::optional<NamePolicy> name_policy(uint32_t sandbox_addr) {
  // The lease names the /30's network; the sandbox has its second address.
  std::string key = ipv4_str(sandbox_addr - 2);
  char target[256] = {};
  ssize_t n = ::readlink((addrs_dir() + "/" + key).c_str(), target, sizeof target - 1);
  if (n <= 0) return std::nullopt;
  auto l = read_lease(std::string(target, static_cast<size_t>(n)));
  if (!l || l->names.empty() || l->addr_key != key) return std::nullopt;
  return NamePolicy{l->id, l->ifname, l->rules.dns_upstream, l->names};
}

bool any_names() {
  for (auto& id : entries(leases_dir()))
    if (auto l = read_lease(id); l && !l->names.empty()) return true;
  return false;
}

void with_jails_locked(const std::function<void()>& fn) {
  Fd guard = lock();
  fn();
}

Fd open_tap(const Jail& jail) { return attach_tap(jail.ifname); }

}  // namespace sbx::net
