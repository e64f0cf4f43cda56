// The pieces of terminals and background processes that need no sandbox: the
// detach keys, raw mode on a real pseudo-terminal, the kept logs' bound and
// tail, and how the micro-VM relay routes background requests.
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>

#include "agent/proc_log.hpp"
#include "agent/relay_map.hpp"
#include "core/fd.hpp"
#include "core/protocol.hpp"
#include "core/terminal.hpp"

namespace proto = sbx::proto;
using sbx::DetachKeys;

namespace {

proto::Frame decode_one(const std::string& bytes) {
  proto::Decoder d;
  d.feed(bytes.data(), bytes.size());
  auto f = d.pop();
  REQUIRE(f);
  return *f;
}

proto::Frame frame(proto::Type t, uint32_t ch, std::string payload = "{}") { return {t, ch, std::move(payload)}; }

}  // namespace

TEST_CASE("detach keys: Ctrl-P Ctrl-Q detaches, anything else passes, a split sequence is held") {
  DetachKeys k;
  std::string out;
  CHECK_FALSE(k.feed("ls\r", out));
  CHECK(out == "ls\r");
  out.clear();
  CHECK_FALSE(k.feed("a\x10", out));  // held: the next key decides
  CHECK(out == "a");
  CHECK_FALSE(k.feed("b", out));
  CHECK(out == "a\x10" "b");
  out.clear();
  CHECK_FALSE(k.feed("\x10\x10", out));  // the first was the user's; the second may start the sequence
  CHECK(out == "\x10");
  CHECK(k.feed("\x11" "dropped", out));
  CHECK(out == "\x10");
}

TEST_CASE("raw mode on a real terminal, and back on every way out") {
  int master, slave;
  REQUIRE(::openpty(&master, &slave, nullptr, nullptr, nullptr) == 0);
  sbx::Fd m(master), s(slave);
  winsize ws{33, 101, 0, 0};
  REQUIRE(::ioctl(slave, TIOCSWINSZ, &ws) == 0);
  CHECK(sbx::window_size(slave).rows == 33);
  CHECK(sbx::window_size(slave).cols == 101);
  termios before{};
  REQUIRE(::tcgetattr(slave, &before) == 0);
  auto same = [&](const termios& t) { return t.c_lflag == before.c_lflag && t.c_iflag == before.c_iflag && t.c_oflag == before.c_oflag; };
  try {
    sbx::RawMode raw(slave);
    termios now{};
    ::tcgetattr(slave, &now);
    CHECK_FALSE(now.c_lflag & (ICANON | ECHO | ISIG));
    throw std::runtime_error("an error mid-session");
  } catch (const std::runtime_error&) {
  }
  termios after{};
  ::tcgetattr(slave, &after);
  CHECK(same(after));
  CHECK_THROWS(sbx::RawMode(::open("/dev/null", O_RDONLY | O_CLOEXEC)));
}

TEST_CASE("window watch: SIGWINCH becomes the terminal's new size on the pipe") {
  int master, slave;
  REQUIRE(::openpty(&master, &slave, nullptr, nullptr, nullptr) == 0);
  sbx::Fd m(master), s(slave);
  winsize ws{40, 120, 0, 0};
  REQUIRE(::ioctl(slave, TIOCSWINSZ, &ws) == 0);
  sbx::WindowWatch watch(slave, true);
  sbx::WindowSize got{};
  REQUIRE(::read(watch.fd(), &got, sizeof got) == sizeof got);  // announced at once
  CHECK(got.rows == 40);
  ws = {50, 132, 0, 0};
  REQUIRE(::ioctl(slave, TIOCSWINSZ, &ws) == 0);
  ::raise(SIGWINCH);
  REQUIRE(::read(watch.fd(), &got, sizeof got) == sizeof got);
  CHECK(got.rows == 50);
  CHECK(got.cols == 132);
}

TEST_CASE("window sizes: the newest pending one is taken, the stale ones dropped; none is nothing") {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
  sbx::Fd r(p[0]), w(p[1]);
  CHECK_FALSE(sbx::take_window_size(r.get()));
  for (uint16_t rows : {uint16_t{30}, uint16_t{40}, uint16_t{50}}) {
    sbx::WindowSize ws{rows, uint16_t{100}};
    REQUIRE(::write(w.get(), &ws, sizeof ws) == sizeof ws);
  }
  auto got = sbx::take_window_size(r.get());
  REQUIRE(got);
  CHECK(got->rows == 50);
  CHECK(got->cols == 100);
  CHECK_FALSE(sbx::take_window_size(r.get()));
}

TEST_CASE("kept log: bounded to two segments of the latest output; tails count lines") {
  auto dir = std::filesystem::temp_directory_path() / ("sbx-keptlog-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  sbx::agent::KeptLog log((dir / "1.out").string(), 10);
  log.append("0123456789abcdefghij");  // two full segments
  log.append("KLM");
  CHECK(log.read() == "abcdefghijKLM");  // the oldest segment was dropped
  CHECK(log.read(1) == "abcdefghijKLM");
  log.append("\nlast\n");
  CHECK(log.read(1) == "last\n");
  CHECK(log.read(0).empty());
  log.remove();
  CHECK_FALSE(std::filesystem::exists(dir / "1.out"));
  CHECK_FALSE(std::filesystem::exists(dir / "1.out.1"));
  std::filesystem::remove_all(dir);
  using sbx::agent::last_lines;
  CHECK(last_lines("a\nb\nc\n", 2) == "b\nc\n");
  CHECK(last_lines("a\nb\nc", 1) == "c");
  CHECK(last_lines("a\nb\n", 5) == "a\nb\n");
}

TEST_CASE("relay: a background exec's route ends at started and is never killed with its client") {
  sbx::agent::RelayMap m;
  auto bg = decode_one(*m.from_client(1, frame(proto::Type::exec, 1, R"({"cmd":["sleep","9"],"background":true})"))).channel;
  auto fg = decode_one(*m.from_client(1, frame(proto::Type::exec, 2, R"({"cmd":["sleep","9"]})"))).channel;
  REQUIRE(m.from_guest(frame(proto::Type::started, bg, R"({"pid":7})")));
  REQUIRE(m.from_guest(frame(proto::Type::started, fg, R"({"pid":8})")));
  CHECK(m.open_channels() == 1);  // the foreground exec
  auto at = decode_one(*m.from_client(1, frame(proto::Type::proc_attach, 3, R"({"pid":7})"))).channel;
  auto ls = decode_one(*m.from_client(1, frame(proto::Type::proc_list, 4, ""))).channel;
  REQUIRE(m.from_guest(frame(proto::Type::ok, ls, R"({"procs":[]})")));
  CHECK(m.open_channels() == 2);
  // The client goes: its foreground command is killed, its attach detached.
  auto out = m.drop_client(1);
  REQUIRE(out.size() == 2);
  bool killed = false, detached = false;
  for (auto& b : out) {
    auto f = decode_one(b);
    if (f.type == proto::Type::signal && f.channel == fg) killed = true;
    if (f.type == proto::Type::end && f.channel == at) detached = true;
  }
  CHECK(killed);
  CHECK(detached);
}
