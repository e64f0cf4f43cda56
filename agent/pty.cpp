#include "agent/pty.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "core/error.hpp"

namespace sbx::agent {

namespace {
constexpr uint16_t kDefaultRows = 24, kDefaultCols = 80;
}

Pty open_pty(uint16_t rows, uint16_t cols) {
  Pty p;
  p.master.reset(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!p.master) throw sys_error("cannot open a terminal (/dev/ptmx)", errno);
  char name[128];
  if (::grantpt(p.master.get()) != 0 || ::unlockpt(p.master.get()) != 0 ||
      ::ptsname_r(p.master.get(), name, sizeof name) != 0)
    throw sys_error("cannot set up a terminal", errno);
  p.slave_path = name;
  set_window_size(p.master.get(), rows ? rows : kDefaultRows, cols ? cols : kDefaultCols);
  return p;
}

void set_window_size(int master, uint16_t rows, uint16_t cols) {
  winsize ws{};
  ws.ws_row = rows;
  ws.ws_col = cols;
  if (rows && cols) ::ioctl(master, TIOCSWINSZ, &ws);  // a size of 0 would tell programs nothing
}

namespace {

// The probe's child: leads a session whose controlling terminal is `slave`,
// says so on `ready`, and exits 0 if a SIGINT arrives within half a second.
[[noreturn]] void probe_child(const char* slave, int ready) {
  sigset_t intr;
  sigemptyset(&intr);
  sigaddset(&intr, SIGINT);
  ::sigprocmask(SIG_BLOCK, &intr, nullptr);
  if (::setsid() < 0) ::_exit(2);
  int t = ::open(slave, O_RDWR);
  if (t < 0) ::_exit(2);
  ::ioctl(t, TIOCSCTTY, 0);
  if (::write(ready, "r", 1) != 1) ::_exit(2);
  timespec wait{0, 500'000'000};
  ::_exit(::sigtimedwait(&intr, nullptr, &wait) == SIGINT ? 0 : 1);
}

bool probe_terminal_signals() {
  Pty p;
  try {
    p = open_pty(0, 0);
  } catch (const Error&) {
    return true;  // no terminals at all: nothing to make up for
  }
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return true;
  Fd rd(ready[0]), wr(ready[1]);
  pid_t c = ::fork();
  if (c < 0) return true;
  if (c == 0) probe_child(p.slave_path.c_str(), wr.get());
  wr.reset();
  char b;
  bool up = ::read(rd.get(), &b, 1) == 1;
  if (up) {
    ssize_t ignored = ::write(p.master.get(), "\x03", 1);
    (void)ignored;
  }
  int status = 0;
  while (::waitpid(c, &status, 0) < 0 && errno == EINTR) {
  }
  // A child that could not take the terminal proves nothing: trust the kernel.
  if (!up || !WIFEXITED(status) || WEXITSTATUS(status) == 2) return true;
  return WEXITSTATUS(status) == 0;
}

constexpr int kTypedSignals[] = {SIGINT, SIGQUIT, SIGTSTP};

}  // namespace

bool terminal_sends_signals() {
  static const bool sends = probe_terminal_signals();
  return sends;
}

std::vector<TypedSignal> typed_signals(int master, std::string_view typed) {
  std::vector<TypedSignal> out;
  termios t{};
  if (::tcgetattr(master, &t) != 0 || !(t.c_lflag & ISIG)) return out;
  const cc_t keys[] = {t.c_cc[VINTR], t.c_cc[VQUIT], t.c_cc[VSUSP]};
  for (size_t i = 0; i < typed.size(); ++i) {
    auto c = static_cast<cc_t>(typed[i]);
    for (size_t k = 0; k < 3; ++k)
      if (keys[k] != _POSIX_VDISABLE && c == keys[k]) {
        out.push_back({i, kTypedSignals[k]});
        break;
      }
  }
  return out;
}

int shim_signal_for(int sig) {
  for (int k = 0; k < 3; ++k)
    if (kTypedSignals[k] == sig) return SIGRTMIN + 1 + k;
  return 0;
}

void feed_terminal(int master, pid_t shim_pid, bool signal_keys, std::string_view typed,
                   const std::function<void(std::string_view)>& write) {
  size_t from = 0;
  if (signal_keys) {
    for (const TypedSignal& k : typed_signals(master, typed)) {
      if (k.at > from) write(typed.substr(from, k.at - from));
      ::kill(shim_pid, shim_signal_for(k.sig));
      from = k.at + 1;
    }
  }
  if (from < typed.size()) write(typed.substr(from));
}

int typed_signal_of(int shim_signal) {
  int k = shim_signal - SIGRTMIN - 1;
  return k >= 0 && k < 3 ? kTypedSignals[k] : 0;
}

}  // namespace sbx::agent
