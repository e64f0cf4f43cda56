#include "backends/common/net/rtnl.hpp"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "core/lazy_libs.hpp"

namespace sbx::net {

namespace {
constexpr size_t kBuf = 8192;

nlmsghdr* start(std::vector<char>& buf, uint16_t type, uint16_t flags, uint32_t seq) {
  buf.assign(kBuf, 0);
  nlmsghdr* nlh = mnl_api().mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = type;
  nlh->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | NLM_F_ACK | flags);
  nlh->nlmsg_seq = seq;
  return nlh;
}
}  // namespace

Rtnl::Rtnl() {
  nl_ = mnl_api().mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
  if (!nl_) throw sys_error("opening an rtnetlink socket", errno);
  if (mnl_api().mnl_socket_bind(nl_, 0, MNL_SOCKET_AUTOPID) < 0) {
    int e = errno;
    mnl_api().mnl_socket_close(nl_);
    throw sys_error("binding an rtnetlink socket", e);
  }
  ioctl_sock_ = Fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!ioctl_sock_) {
    int e = errno;
    mnl_api().mnl_socket_close(nl_);
    throw sys_error("opening a socket", e);
  }
}

Rtnl::~Rtnl() {
  if (nl_) mnl_api().mnl_socket_close(nl_);
}

Rtnl::Rtnl(Rtnl&& o) noexcept : nl_(o.nl_), ioctl_sock_(std::move(o.ioctl_sock_)), seq_(o.seq_) { o.nl_ = nullptr; }

void Rtnl::request(void* msg, const char* what) {
  auto* nlh = static_cast<nlmsghdr*>(msg);
  if (mnl_api().mnl_socket_sendto(nl_, nlh, nlh->nlmsg_len) < 0) throw sys_error(what, errno);
  char buf[kBuf];
  uint32_t portid = mnl_api().mnl_socket_get_portid(nl_);
  for (;;) {
    ssize_t n = mnl_api().mnl_socket_recvfrom(nl_, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw sys_error(what, errno);
    }
    int r = mnl_api().mnl_cb_run(buf, static_cast<size_t>(n), nlh->nlmsg_seq, portid, nullptr, nullptr);
    if (r < 0) throw sys_error(what, errno);
    if (r == MNL_CB_STOP) return;
  }
}

unsigned Rtnl::index(const std::string& name) const {
  ifreq ifr{};
  if (name.size() >= IFNAMSIZ) return 0;
  std::memcpy(ifr.ifr_name, name.c_str(), name.size());
  if (::ioctl(ioctl_sock_.get(), SIOCGIFINDEX, &ifr) != 0) return 0;
  return static_cast<unsigned>(ifr.ifr_ifindex);
}

void Rtnl::add_veth(const std::string& name, const std::string& peer, int peer_netns_fd) {
  std::vector<char> buf;
  nlmsghdr* nlh = start(buf, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, ++seq_);
  auto* ifm = static_cast<ifinfomsg*>(mnl_api().mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  mnl_api().mnl_attr_put_strz(nlh, IFLA_IFNAME, name.c_str());
  nlattr* linkinfo = mnl_api().mnl_attr_nest_start(nlh, IFLA_LINKINFO);
  mnl_api().mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "veth");
  nlattr* data = mnl_api().mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
  nlattr* peer_info = mnl_api().mnl_attr_nest_start(nlh, VETH_INFO_PEER);
  // The peer's attributes follow its own ifinfomsg header inside the nest.
  auto* pifm = static_cast<ifinfomsg*>(mnl_api().mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  pifm->ifi_family = AF_UNSPEC;
  mnl_api().mnl_attr_put_strz(nlh, IFLA_IFNAME, peer.c_str());
  mnl_api().mnl_attr_put_u32(nlh, IFLA_NET_NS_FD, static_cast<uint32_t>(peer_netns_fd));
  mnl_api().mnl_attr_nest_end(nlh, peer_info);
  mnl_api().mnl_attr_nest_end(nlh, data);
  mnl_api().mnl_attr_nest_end(nlh, linkinfo);
  request(nlh, ("creating veth " + name).c_str());
}

void Rtnl::add_addr4(unsigned ifindex, uint32_t addr, int prefix) {
  std::vector<char> buf;
  nlmsghdr* nlh = start(buf, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, ++seq_);
  auto* ifa = static_cast<ifaddrmsg*>(mnl_api().mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)));
  ifa->ifa_family = AF_INET;
  ifa->ifa_prefixlen = static_cast<unsigned char>(prefix);
  ifa->ifa_index = ifindex;
  uint32_t be = htonl(addr);
  mnl_api().mnl_attr_put_u32(nlh, IFA_LOCAL, be);
  mnl_api().mnl_attr_put_u32(nlh, IFA_ADDRESS, be);
  request(nlh, "adding an IPv4 address");
}

void Rtnl::set_up(unsigned ifindex) {
  std::vector<char> buf;
  nlmsghdr* nlh = start(buf, RTM_NEWLINK, 0, ++seq_);
  auto* ifm = static_cast<ifinfomsg*>(mnl_api().mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  ifm->ifi_index = static_cast<int>(ifindex);
  ifm->ifi_flags = IFF_UP;
  ifm->ifi_change = IFF_UP;
  request(nlh, "bringing a link up");
}

void Rtnl::add_default_route4(uint32_t gw) {
  std::vector<char> buf;
  nlmsghdr* nlh = start(buf, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, ++seq_);
  auto* rtm = static_cast<rtmsg*>(mnl_api().mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)));
  rtm->rtm_family = AF_INET;
  rtm->rtm_dst_len = 0;
  rtm->rtm_table = RT_TABLE_MAIN;
  rtm->rtm_protocol = RTPROT_STATIC;
  rtm->rtm_scope = RT_SCOPE_UNIVERSE;
  rtm->rtm_type = RTN_UNICAST;
  mnl_api().mnl_attr_put_u32(nlh, RTA_GATEWAY, htonl(gw));
  request(nlh, "adding the default route");
}

bool Rtnl::del_link(const std::string& name) {
  std::vector<char> buf;
  nlmsghdr* nlh = start(buf, RTM_DELLINK, 0, ++seq_);
  auto* ifm = static_cast<ifinfomsg*>(mnl_api().mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  mnl_api().mnl_attr_put_strz(nlh, IFLA_IFNAME, name.c_str());
  try {
    request(nlh, ("deleting link " + name).c_str());
  } catch (const Error& e) {
    if (e.sys_errno() == ENODEV) return false;
    throw;
  }
  return true;
}

}  // namespace sbx::net
