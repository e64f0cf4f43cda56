// sbx port-forward: relays connections to 127.0.0.1:LOCAL on this host to a
// port inside a sandbox until Ctrl-C (core/port_forward.hpp).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "cli/common.hpp"
#include "core/port_forward.hpp"

namespace sbx::cli {

namespace {

int g_stop_pipe = -1;

extern "C" void stop_forwarding(int) {
  int saved = errno;
  char b = 1;
  ssize_t ignored = ::write(g_stop_pipe, &b, 1);
  (void)ignored;
  errno = saved;
}

// Ctrl-C and SIGTERM end the forwarding cleanly (exit 0) instead of killing sbx mid-relay.
Fd install_stop_signals() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw sys_error("pipe", errno);
  g_stop_pipe = fds[1];
  struct sigaction sa {};
  sa.sa_handler = stop_forwarding;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(s, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return Fd(fds[0]);
}

}  // namespace

void register_port_forward(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("port-forward", "Forward a port on this host's loopback to a port inside a sandbox");
  struct State {
    std::string id, ports;
  };
  auto st = std::make_shared<State>();
  sub->add_option("id", st->id, "sandbox id, name or unambiguous prefix")->required();
  sub->add_option("ports", st->ports, "[LOCAL:]REMOTE: listen on 127.0.0.1:LOCAL (default REMOTE; 0 any free port)")
      ->required();
  sub->callback([&g, &out, st] {
    ForwardPorts ports = parse_forward_ports(st->ports);
    Config cfg = load_config(g);
    std::string id = st->id;
    auto backend = backend_for_existing(cfg, id);
    Fd stop = install_stop_signals();
    PortForwarder fwd(*backend, id, ports);
    std::printf("Forwarding 127.0.0.1:%u -> %s:%u\n", fwd.local_port(), id.c_str(), ports.remote);
    std::fflush(stdout);
    fwd.run(stop.get(), [](const Error& e) { print_error(e); });
    out.status = 0;
  });
}

}  // namespace sbx::cli
