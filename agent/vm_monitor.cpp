#include "agent/vm_monitor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "agent/relay_map.hpp"
#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/unix_socket.hpp"

namespace sbx::agent {

namespace {

// A client that has this much output queued has its commands paused until
// the queue falls below kResume; the guest stream is never held back for it.
constexpr size_t kPauseAt = 4u << 20;
constexpr size_t kResumeAt = 512u << 10;
// Clients are not read while this much waits to go into the guest.
constexpr size_t kGuestHighWater = 4u << 20;
constexpr int kVmmConnectTimeoutMs = 30'000;

struct Peer {
  Fd fd;
  proto::Decoder dec;
  std::string out;
  size_t off = 0;
  bool dead = false;
  bool paused = false;
  size_t queued() const { return out.size() - off; }
};

// Writes what the socket takes now; false when the peer is gone.
bool flush(Peer& p) {
  while (p.off < p.out.size()) {
    ssize_t n = ::send(p.fd.get(), p.out.data() + p.off, p.out.size() - p.off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p.off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    return false;
  }
  if (p.off == p.out.size()) {
    p.out.clear();
    p.off = 0;
  } else if (p.off > (1u << 20)) {
    p.out.erase(0, p.off);
    p.off = 0;
  }
  return true;
}

// Reads what is there; false on EOF or error.
bool fill(Peer& p) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(p.fd.get(), buf, sizeof buf);
    if (n > 0) {
      p.dec.feed(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
}

pid_t spawn_vmm(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw sys_error("cannot fork the VMM", errno);
  if (pid == 0) {
    // The VM never outlives its monitor: no relay, no way in, no VM.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "sbx-agent: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

class Monitor {
 public:
  explicit Monitor(const MonitorOptions& o) : opts_(o) {}
  int run();

 private:
  bool handle_signals();  // false once the VMM is gone or we are told to stop
  void accept_vmm();
  void accept_clients();
  void from_guest();
  void from_client(int fd, Peer& c);
  void to_guest(const std::string& bytes) { guest_.out += bytes; }
  void drop_dead_clients();

  MonitorOptions opts_;
  Fd sigfd_, serial_listen_, listen_;
  Peer guest_;
  std::map<int, std::unique_ptr<Peer>> clients_;
  RelayMap map_;
  pid_t vmm_ = -1;
  int status_ = 0;
};

bool Monitor::handle_signals() {
  signalfd_siginfo si;
  bool stop = false;
  while (::read(sigfd_.get(), &si, sizeof si) > 0)
    if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) stop = true;
  int st;
  if (::waitpid(vmm_, &st, WNOHANG) == vmm_) {
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    vmm_ = -1;
    return false;
  }
  if (stop) {
    ::kill(vmm_, SIGKILL);
    ::waitpid(vmm_, &st, 0);
    vmm_ = -1;
    status_ = 0;
    return false;
  }
  return true;
}

void Monitor::accept_vmm() {
  // QEMU connects to serial.sock while it sets up its devices, before the guest runs.
  for (int waited = 0;; waited += 50) {
    int fd = ::accept4(serial_listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      guest_.fd.reset(fd);
      serial_listen_.reset();
      return;
    }
    if (errno != EAGAIN && errno != EINTR) throw sys_error("accepting the VMM's serial connection", errno);
    if (waited > kVmmConnectTimeoutMs) throw Error(Errc::timeout, "the VMM never connected to its serial socket");
    pollfd p[2] = {{serial_listen_.get(), POLLIN, 0}, {sigfd_.get(), POLLIN, 0}};
    ::poll(p, 2, 50);
    if (p[1].revents && !handle_signals()) throw Error(Errc::unavailable, "the VMM exited before connecting");
  }
}

void Monitor::accept_clients() {
  for (;;) {
    int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    auto c = std::make_unique<Peer>();
    c->fd.reset(fd);
    clients_[fd] = std::move(c);
  }
}

void Monitor::from_guest() {
  while (auto f = guest_.dec.pop()) {
    auto routed = map_.from_guest(*f);
    if (!routed) continue;  // its client is gone
    auto it = clients_.find(routed->first);
    if (it == clients_.end() || it->second->dead) continue;
    Peer& c = *it->second;
    c.out += routed->second;
    if (!flush(c)) c.dead = true;
    else if (!c.paused && c.queued() >= kPauseAt) {
      c.paused = true;
      for (auto& b : map_.pause_client(routed->first, true)) to_guest(b);
    }
  }
}

void Monitor::from_client(int fd, Peer& c) {
  try {
    while (auto f = c.dec.pop())
      if (auto bytes = map_.from_client(fd, *f)) to_guest(*bytes);
  } catch (const Error&) {
    c.dead = true;  // garbage from a client ends that client, never the VM
  }
}

void Monitor::drop_dead_clients() {
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (!it->second->dead) {
      ++it;
      continue;
    }
    for (auto& b : map_.drop_client(it->first)) to_guest(b);
    it = clients_.erase(it);
  }
}

int Monitor::run() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGPIPE, SIGHUP}) sigaddset(&mask, s);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  sigfd_.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!sigfd_) throw sys_error("signalfd", errno);
  if (opts_.relay) {
    serial_listen_ = listen_unix(opts_.dir + "/serial.sock");
    ::fcntl(serial_listen_.get(), F_SETFL, O_NONBLOCK);
  }
  vmm_ = spawn_vmm(opts_.vmm);
  if (!opts_.relay) {
    while (handle_signals()) {
      pollfd p{sigfd_.get(), POLLIN, 0};
      ::poll(&p, 1, -1);
    }
    return status_;
  }
  accept_vmm();
  // The socket clients use appears only once the VMM holds the guest's end.
  listen_ = listen_unix(opts_.dir + "/agent.sock");
  ::fcntl(listen_.get(), F_SETFL, O_NONBLOCK);

  std::vector<pollfd> pfds;
  for (;;) {
    pfds.clear();
    pfds.push_back({sigfd_.get(), POLLIN, 0});
    pfds.push_back({listen_.get(), POLLIN, 0});
    pfds.push_back({guest_.fd.get(), static_cast<short>(POLLIN | (guest_.queued() ? POLLOUT : 0)), 0});
    bool guest_full = guest_.queued() >= kGuestHighWater;
    for (auto& [fd, c] : clients_)
      pfds.push_back({fd, static_cast<short>((guest_full ? 0 : POLLIN) | (c->queued() ? POLLOUT : 0)), 0});
    if (::poll(pfds.data(), pfds.size(), -1) < 0 && errno != EINTR) throw sys_error("poll", errno);
    if (pfds[0].revents && !handle_signals()) break;
    if (pfds[1].revents) accept_clients();
    if (pfds[2].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (!fill(guest_)) break;  // the VMM closed the guest's stream: the VM is going down
      from_guest();
    }
    for (size_t i = 3; i < pfds.size(); ++i) {
      auto it = clients_.find(pfds[i].fd);
      if (it == clients_.end() || !pfds[i].revents) continue;
      Peer& c = *it->second;
      if ((pfds[i].revents & POLLOUT) && !flush(c)) c.dead = true;
      if (c.paused && c.queued() <= kResumeAt) {
        c.paused = false;
        for (auto& b : map_.pause_client(it->first, false)) to_guest(b);
      }
      if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        if (!fill(c)) c.dead = true;
        from_client(it->first, c);
      }
    }
    drop_dead_clients();
    if (guest_.queued() && !flush(guest_)) break;
  }
  if (vmm_ > 0) {
    ::kill(vmm_, SIGKILL);
    int st;
    ::waitpid(vmm_, &st, 0);
  }
  return status_;
}

}  // namespace

int run_vm_monitor(const MonitorOptions& opts) {
  Monitor m(opts);
  return m.run();
}

}  // namespace sbx::agent
