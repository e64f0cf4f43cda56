// The agent's signal keys (agent/pty.hpp) on real pseudo-terminals of this
// host: which typed keys are signals, by the terminal's own settings, and how
// they reach the shim.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "agent/pty.hpp"

using namespace sbx::agent;

TEST_CASE("Linux's terminals send the signals themselves", "[pty]") {
  // So the agent leaves them to the kernel here; gVisor 20221219 probes false.
  CHECK(terminal_sends_signals());
}

TEST_CASE("typed_signals finds the keys the terminal's settings name", "[pty]") {
  Pty p = open_pty(0, 0);
  auto found = typed_signals(p.master.get(), std::string("a\x03" "b\x1a" "c\x1c", 6));
  REQUIRE(found.size() == 3);
  CHECK((found[0].at == 1 && found[0].sig == SIGINT));
  CHECK((found[1].at == 3 && found[1].sig == SIGTSTP));
  CHECK((found[2].at == 5 && found[2].sig == SIGQUIT));

  termios t{};
  REQUIRE(::tcgetattr(p.master.get(), &t) == 0);
  t.c_cc[VINTR] = 0x07;  // stty intr ^G
  REQUIRE(::tcsetattr(p.master.get(), TCSANOW, &t) == 0);
  found = typed_signals(p.master.get(), "\x03\x07");
  REQUIRE(found.size() == 1);
  CHECK((found[0].at == 1 && found[0].sig == SIGINT));

  t.c_lflag &= ~static_cast<tcflag_t>(ISIG);  // raw mode, as an editor sets it: keys are bytes
  REQUIRE(::tcsetattr(p.master.get(), TCSANOW, &t) == 0);
  CHECK(typed_signals(p.master.get(), "\x07\x1a").empty());
}

TEST_CASE("shim signals map back to the typed ones", "[pty]") {
  for (int sig : {SIGINT, SIGQUIT, SIGTSTP}) {
    int shim = shim_signal_for(sig);
    CHECK(shim >= SIGRTMIN);
    CHECK(shim <= SIGRTMAX);
    CHECK(typed_signal_of(shim) == sig);
  }
  CHECK(shim_signal_for(SIGTERM) == 0);
  CHECK(typed_signal_of(SIGTERM) == 0);
}

TEST_CASE("feed_terminal writes around a key and signals the shim for it", "[pty]") {
  Pty p = open_pty(0, 0);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t shim = ::fork();
  REQUIRE(shim >= 0);
  if (shim == 0) {  // stands in for the shim: exits with the typed signal it was told of
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGQUIT, SIGTSTP}) sigaddset(&set, shim_signal_for(sig));
    ::sigprocmask(SIG_BLOCK, &set, nullptr);
    if (::write(ready[1], "r", 1) != 1) ::_exit(100);
    timespec wait{5, 0};
    int got = ::sigtimedwait(&set, nullptr, &wait);
    ::_exit(got > 0 ? typed_signal_of(got) : 101);
  }
  char b;
  REQUIRE(::read(ready[0], &b, 1) == 1);
  ::close(ready[0]);
  ::close(ready[1]);
  std::vector<std::string> written;
  feed_terminal(p.master.get(), shim, true, "ab\x03" "cd", [&](std::string_view s) { written.emplace_back(s); });
  int status = 0;
  REQUIRE(::waitpid(shim, &status, 0) == shim);
  CHECK(written == std::vector<std::string>{"ab", "cd"});
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == SIGINT);

  written.clear();  // without signal keys (a kernel that sends them): bytes as typed
  feed_terminal(p.master.get(), shim, false, "ab\x03" "cd", [&](std::string_view s) { written.emplace_back(s); });
  CHECK(written == std::vector<std::string>{"ab\x03" "cd"});
}
