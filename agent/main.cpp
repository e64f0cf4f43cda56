// sbx-agent: the process inside every sandbox. It runs commands and moves files
// for the host over the agent protocol (core/protocol.hpp). Small and static so
// that one binary works as the init of a namespaced tree, a gVisor container
// or a micro-VM guest.
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "agent/confine.hpp"
#include "agent/server.hpp"
#include "agent/vm_monitor.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/unix_socket.hpp"

namespace {

void usage() {
  std::fputs(
      "usage: sbx-agent [--listen-fd N | --listen PATH | --serial DEV | --vsock PORT] [--fd N]... [--exit-on-close]\n"
      "                 [--mkdir DIR]... [--no-confine] [--fresh-signals]\n"
      "       sbx-agent --vm-monitor DIR [--relay] -- VMM [ARG...]\n"
      "Serves the sbx agent protocol inside a sandbox (or, with --vm-monitor, runs a\n"
      "micro-VM's VMM and relays the protocol to it on the host). Not meant to be run by hand.\n",
      stderr);
}

int parse_fd(const char* s) {
  char* end;
  long v = std::strtol(s, &end, 10);
  if (*end || v < 0 || v > 65535) {
    std::fprintf(stderr, "sbx-agent: bad descriptor '%s'\n", s);
    std::exit(2);
  }
  return static_cast<int>(v);
}

// For runtimes that cannot hand over a listening descriptor (runsc: the
// container's init is exec'd by gVisor), the agent makes its own socket in a
// directory the host shares with it (runsc --host-uds=all exposes it to the host).
int listen_path(const char* path) {
  try {
    return sbx::agent::listen_owner_only(path);
  } catch (const sbx::Error& e) {
    std::fprintf(stderr, "sbx-agent: %s\n", e.what());
    std::exit(1);
  }
}

// Micro-VM guests (QEMU): the host reaches the agent over one virtio-serial
// port. While no host holds the port open, virtio_console reports POLLHUP and
// reads return EOF, so the agent waits for a host, serves it until it leaves
// (its commands then end, as for any vanished host), and waits again.
int serve_serial(sbx::agent::ServerOptions opts, const char* path) {
  for (;;) {
    int fd = ::open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      std::fprintf(stderr, "sbx-agent: cannot open %s: %s\n", path, std::strerror(errno));
      ::sleep(1);
      continue;
    }
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) >= 0 && !(p.revents & POLLHUP)) break;
      ::usleep(5000);
    }
    opts.stream_fds = {fd};
    opts.exit_when_streams_close = true;
    try {
      sbx::agent::serve(opts);
    } catch (const sbx::Error& e) {
      std::fprintf(stderr, "sbx-agent: %s\n", e.what());
      ::close(fd);
    }
  }
}

// cloud-hypervisor guests: the host connects through the VMM's vsock socket,
// one connection per host client, as over a unix socket.
int listen_vsock(unsigned port) {
  int s = ::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_vm addr{};
  addr.svm_family = AF_VSOCK;
  addr.svm_cid = VMADDR_CID_ANY;
  addr.svm_port = port;
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(s, 128) != 0) {
    std::fprintf(stderr, "sbx-agent: cannot listen on vsock port %u: %s\n", port, std::strerror(errno));
    std::exit(1);
  }
  return s;
}

int vm_monitor_main(int argc, char** argv) {
  sbx::agent::MonitorOptions m;
  int i = 2;
  if (i >= argc) return usage(), 2;
  m.dir = argv[i++];
  if (i < argc && std::string(argv[i]) == "--relay") m.relay = true, ++i;
  if (i >= argc || std::string(argv[i]) != "--") return usage(), 2;
  for (++i; i < argc; ++i) m.vmm.push_back(argv[i]);
  if (m.vmm.empty()) return usage(), 2;
  try {
    return sbx::agent::run_vm_monitor(m);
  } catch (const sbx::Error& e) {
    std::fprintf(stderr, "sbx-agent: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  sbx::agent::ServerOptions opts;
  const char* listen_at = nullptr;
  const char* serial = nullptr;
  int vsock_port = -1;
  // The host titles a sandbox's processes "sbx-sandbox <id> <driver>"
  // (core/driver.hpp); the comm follows, instead of the binary's name (or,
  // exec'd from a descriptor, its number).
  if (argc > 0 && std::strncmp(argv[0], "sbx-sandbox ", 12) == 0) ::prctl(PR_SET_NAME, "sbx-sandbox", 0, 0, 0);
  if (argc > 1 && std::string(argv[1]) == "--vm-monitor") return vm_monitor_main(argc, argv);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--listen-fd") opts.listen_fd = parse_fd(next());
    else if (a == "--listen") listen_at = next();
    else if (a == "--serial") serial = next(), opts.report_oom = true;
    else if (a == "--vsock") vsock_port = parse_fd(next()), opts.report_oom = true;
    else if (a == "--fd") opts.stream_fds.push_back(parse_fd(next()));
    else if (a == "--exit-on-close") opts.exit_when_streams_close = true;
    else if (a == "--fresh-signals") opts.fresh_signals = true;
    else if (a == "--mkdir") {
      const char* dir = next();
      try {
        sbx::make_dirs(dir, 0755);
      } catch (const sbx::Error& e) {
        std::fprintf(stderr, "sbx-agent: %s\n", e.what());
        return 1;
      }
    } else if (a == "--no-confine") opts.confine = false;
    else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else {
      usage();
      return 2;
    }
  }
  if (opts.listen_fd < 0 && opts.stream_fds.empty() && !listen_at && !serial && vsock_port < 0) {
    usage();
    return 2;
  }
  // The descriptors handed to the agent must not leak into commands: an
  // inherited listening socket would let sandboxed code answer the host.
  if (opts.listen_fd >= 0) ::fcntl(opts.listen_fd, F_SETFD, FD_CLOEXEC);
  for (int fd : opts.stream_fds) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  // Not dumpable: sandboxed code running as the same uid cannot ptrace the
  // agent or read its memory through /proc.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  ::umask(022);
  if (opts.confine) {
    if (int e = sbx::agent::install_seccomp_filter()) {
      std::fprintf(stderr, "sbx-agent: cannot build the seccomp filter: %s\n", std::strerror(e));
      return 1;
    }
    if (int e = sbx::agent::lock_agent_privileges()) {
      std::fprintf(stderr, "sbx-agent: cannot lock the commands' privileges: %s\n", std::strerror(e));
      return 1;
    }
  }
  // Made only now, after the filter is in place: a socket that exists means an
  // agent that is confined and about to serve, which the host can wait for.
  if (listen_at) opts.listen_fd = listen_path(listen_at), opts.listen_path = listen_at;
  if (vsock_port >= 0) opts.listen_fd = listen_vsock(static_cast<unsigned>(vsock_port));
  if (serial) return serve_serial(opts, serial);
  try {
    return sbx::agent::serve(opts);
  } catch (const sbx::Error& e) {
    std::fprintf(stderr, "sbx-agent: %s\n", e.what());
    return 1;
  }
}
