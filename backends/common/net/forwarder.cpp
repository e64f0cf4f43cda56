#include "backends/common/net/forwarder.hpp"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "backends/common/net/dns_message.hpp"
#include "backends/common/net/filter.hpp"
#include "backends/common/net/jail.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx::net::forwarder {

namespace {

using Clock = std::chrono::steady_clock;

// An answer with TTL 0 still has to let its client connect; nothing stays open past a day.
constexpr uint32_t kMinOpen = 2, kMaxOpen = 86400;
constexpr int kMaxInFlight = 128;
constexpr int kUpstreamTimeoutMs = 3000;

std::string lock_path() { return run_dir() + "/dns-forwarder.lock"; }
std::string pid_path() { return run_dir() + "/dns-forwarder.pid"; }
std::string log_path() { return run_dir() + "/dns-forwarder.log"; }

// Aliases a jail's allowed names led to, until their TTL ends: asking for
// one directly is asking for the allowed name's chain.
struct Aliases {
  std::mutex mu;
  std::map<std::string, std::map<std::string, Clock::time_point>> by_jail;

  bool allowed(const std::string& ifname, const std::string& name) {
    std::lock_guard<std::mutex> g(mu);
    auto j = by_jail.find(ifname);
    if (j == by_jail.end()) return false;
    auto n = j->second.find(name);
    return n != j->second.end() && n->second > Clock::now();
  }
  void add(const std::string& ifname, const std::string& name, uint32_t ttl) {
    std::lock_guard<std::mutex> g(mu);
    // Expired aliases go first, of every jail (gone ones included): the map stays as small as what is live.
    auto now = Clock::now();
    for (auto j = by_jail.begin(); j != by_jail.end();) {
      for (auto n = j->second.begin(); n != j->second.end();) n = n->second <= now ? j->second.erase(n) : std::next(n);
      j = j->second.empty() ? by_jail.erase(j) : std::next(j);
    }
    auto& until = by_jail[ifname][name];
    until = std::max(until, Clock::now() + std::chrono::seconds(std::clamp(ttl, kMinOpen, kMaxOpen)));
  }
};

uint32_t open_for(uint32_t ttl) { return std::clamp(ttl, kMinOpen, kMaxOpen); }

// The upstream's answer to msg, or empty after kUpstreamTimeoutMs.
std::vector<uint8_t> ask(uint32_t upstream, const std::vector<uint8_t>& msg, uint16_t id) {
  Fd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return {};
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(53);
  to.sin_addr.s_addr = htonl(upstream);
  // connect(): only datagrams from the upstream reach this socket.
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) return {};
  if (::send(s.get(), msg.data(), msg.size(), 0) < 0) return {};
  auto deadline = Clock::now() + std::chrono::milliseconds(kUpstreamTimeoutMs);
  std::vector<uint8_t> buf(65535);
  while (Clock::now() < deadline) {
    pollfd p{s.get(), POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (::poll(&p, 1, static_cast<int>(std::max<long long>(left, 1))) <= 0) continue;
    ssize_t n = ::recv(s.get(), buf.data(), buf.size(), 0);
    if (n < 2) continue;
    if (((buf[0] << 8) | buf[1]) != id) continue;  // a stray or forged answer
    buf.resize(static_cast<size_t>(n));
    return buf;
  }
  return {};
}

// One query of one sandbox, start to reply.
std::vector<uint8_t> answer(const std::vector<uint8_t>& msg, uint32_t from, Aliases& aliases) {
  auto q = dns::parse_query(msg.data(), msg.size());
  if (!q) return {};  // not a query: no reply
  auto policy = name_policy(from);
  if (!policy) return dns::error_reply(msg.data(), msg.size(), ns_r_refused);
  bool allowed = std::find(policy->names.begin(), policy->names.end(), q->name) != policy->names.end() ||
                 aliases.allowed(policy->ifname, q->name);
  if (!allowed || q->qclass != ns_c_in) return dns::error_reply(msg.data(), msg.size(), ns_r_refused);
  auto reply = ask(policy->upstream, msg, q->id);
  auto granted = reply.empty() ? std::nullopt : dns::chain_answers(reply.data(), reply.size(), *q);
  if (!granted) return dns::error_reply(msg.data(), msg.size(), ns_r_servfail);
  try {
    // Open before the client hears the address: its connect comes right after.
    for (auto& g : granted->addrs) filter::open_address({policy->ifname, g.addr, open_for(g.ttl)});
    // Torn down while the upstream answered: close what was just opened
    // (teardown closes the jail's addresses again after its lease is gone).
    if (!name_policy(from)) {
      filter::close_addresses(policy->ifname);
      return {};
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "sbx dns-forwarder: %s\n", e.what());
    return dns::error_reply(msg.data(), msg.size(), ns_r_servfail);
  }
  for (auto& [name, ttl] : granted->aliases) aliases.add(policy->ifname, name, ttl);
  return reply;
}

Fd listen_socket() {
  Fd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) throw sys_error("creating the DNS forwarder's socket", errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(53);
  a.sin_addr.s_addr = htonl(kAddr);
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    throw sys_error("binding the DNS forwarder to " + ipv4_str(kAddr) + ":53", errno);
  return s;
}

// It parses what sandboxes send: once bound, it keeps CAP_NET_ADMIN (the
// nftables set) and nothing else of root's powers, for good.
void drop_privileges() {
  for (int cap = 0; cap <= 63; ++cap)
    if (cap != CAP_NET_ADMIN && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
      throw sys_error("dropping the DNS forwarder's capabilities", errno);
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  data[0].effective = data[0].permitted = 1u << CAP_NET_ADMIN;
  if (::syscall(SYS_capset, &hdr, data) != 0) throw sys_error("dropping the DNS forwarder's capabilities", errno);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) throw sys_error("setting no_new_privs", errno);
}

// The lock, waiting a while for it: whoever holds it may be a forwarder
// on its way out (stop() sent SIGTERM) or running() probing for a moment,
// and giving up at once would leave ensure_running() waiting for nobody.
Fd wait_for_lock() {
  make_dirs(run_dir(), 0700);
  Fd f(::open(lock_path().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!f) throw sys_error("opening " + lock_path(), errno);
  auto deadline = Clock::now() + std::chrono::seconds(3);
  while (::flock(f.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) throw sys_error("locking " + lock_path(), errno);
    if (Clock::now() >= deadline) return Fd();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return f;
}

// The forwarder's pid, once it answers: the lock is held and the pid file
// names a live forwarder. The lock alone is not enough: running() holds it
// for a moment while it probes, and the pid file outlives a killed forwarder.
pid_t running_pid() {
  if (!running()) return 0;
  pid_t pid = 0;
  try {
    pid = static_cast<pid_t>(std::stol(read_file_if_exists(pid_path()).value_or("")));
  } catch (const std::exception&) {
    return 0;
  }
  // A zombie's cmdline is empty.
  auto cmdline = proc_cmdline(std::to_string(pid)).value_or("");
  auto arg1 = cmdline.find('\0');
  if (arg1 == std::string::npos || cmdline.compare(arg1 + 1, std::string::npos, std::string(kSubcommand) + '\0') != 0)
    return 0;
  return pid;
}

void spawn() {
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) throw sys_error("finding the sbx binary to start the DNS forwarder", errno);
  exe[n] = 0;
  std::string log = log_path();
  pid_t child = ::fork();
  if (child < 0) throw sys_error("starting the DNS forwarder", errno);
  if (child == 0) {
    // Detached twice over: its own session, reparented to init, no fd of
    // ours, no signal blocked or ignored (serve blocks SIGTERM in its threads).
    ::setsid();
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
    if (::fork() != 0) ::_exit(0);
    int devnull = ::open("/dev/null", O_RDWR);
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    ::dup2(devnull, 0);
    ::dup2(out >= 0 ? out : devnull, 1);
    ::dup2(out >= 0 ? out : devnull, 2);
    ::close_range(3, ~0U, 0);
    ::execl(exe, "sbx", kSubcommand, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

int serve() {
  Fd lock = wait_for_lock();
  if (!lock) {
    std::fprintf(stderr, "sbx dns-forwarder: another forwarder holds %s; leaving the jails to it\n",
                 lock_path().c_str());
    return 0;
  }
  ::unlink(pid_path().c_str());
  Fd sock = listen_socket();
  drop_privileges();
  // The pid file appears once the socket is bound: ensure_running waits for it.
  write_file_atomic(pid_path(), std::to_string(::getpid()), 0600, Durability::survive_process);
  std::fprintf(stderr, "sbx dns-forwarder: pid %d on %s:53\n", ::getpid(), ipv4_str(kAddr).c_str());
  Aliases aliases;
  std::atomic<int> in_flight{0};
  std::vector<uint8_t> buf(65535);
  for (;;) {
    sockaddr_in from{};
    socklen_t flen = sizeof from;
    ssize_t n = ::recvfrom(sock.get(), buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &flen);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw sys_error("receiving a DNS query", errno);
    }
    // Past the cap a query is dropped; its client asks again.
    if (in_flight.load() >= kMaxInFlight) continue;
    ++in_flight;
    std::vector<uint8_t> msg(buf.begin(), buf.begin() + n);
    int fd = sock.get();
    std::thread([msg = std::move(msg), from, fd, &aliases, &in_flight] {
      try {
        auto reply = answer(msg, ntohl(from.sin_addr.s_addr), aliases);
        if (!reply.empty())
          ::sendto(fd, reply.data(), reply.size(), 0, reinterpret_cast<const sockaddr*>(&from), sizeof from);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "sbx dns-forwarder: %s\n", e.what());
      }
      --in_flight;
    }).detach();
  }
}

bool running() {
  Fd f(::open(lock_path().c_str(), O_RDWR | O_CLOEXEC));
  if (!f) return false;
  return ::flock(f.get(), LOCK_EX | LOCK_NB) != 0;
}

void ensure_running() {
  if (running_pid() > 0) return;
  spawn();
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline) {
    if (running_pid() > 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw Error(Errc::unavailable, "the jails' DNS forwarder did not start")
      .set_hint("see " + log_path());
}

void stop() {
  pid_t pid = running_pid();
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  for (int i = 0; i < 100 && running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

std::string needs_reconcile() {
  bool wanted = any_names(), up = running();
  if (wanted && !up) return "dns-forwarder restart";
  if (!wanted && up) return "dns-forwarder stop";
  return "";
}

void reconcile(const std::string& what) {
  // Under the jails' lock, as setup and teardown start and stop it: a stop
  // decided before a new jail's lease appeared would leave that jail without one.
  with_jails_locked([&] {
    if (what == "dns-forwarder restart" && any_names()) ensure_running();
    if (what == "dns-forwarder stop" && !any_names()) stop();
  });
}

}  // namespace sbx::net::forwarder
