#include "core/protocol.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/agent_client.hpp"
#include "core/fd.hpp"
#include "core/fsutil.hpp"
#include "tests/unit/helpers.hpp"

using sbx::Errc;
using sbx::proto::Decoder;
using sbx::proto::Frame;
using sbx::proto::Type;
using sbx_test::error_of;

namespace {

const Type kAllTypes[] = {Type::exec,    Type::stdin_data,  Type::stdin_eof,   Type::signal, Type::file_read,
                          Type::file_write, Type::list,     Type::ping,        Type::started, Type::stdout_data,
                          Type::stderr_data, Type::exit,    Type::data,        Type::end,    Type::ok,
                          Type::error,   Type::entries, Type::resize, Type::proc_list, Type::proc_attach,
                          Type::proc_signal, Type::connect, Type::detach};

// A header with arbitrary fields, for frames encode() would never produce.
std::string raw_header(uint32_t len, uint8_t type, uint32_t channel) {
  std::string h;
  for (int shift = 24; shift >= 0; shift -= 8) h += static_cast<char>((len >> shift) & 0xff);
  h += static_cast<char>(type);
  for (int shift = 24; shift >= 0; shift -= 8) h += static_cast<char>((channel >> shift) & 0xff);
  return h;
}

// A payload with every byte value, including NULs and bytes >= 0x80.
std::string binary_payload(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + 3) & 0xff);
  return s;
}

struct SocketPair {
  sbx::Fd a, b;
  SocketPair() {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    a.reset(sv[0]);
    b.reset(sv[1]);
  }
};

}  // namespace

TEST_CASE("protocol: known_type accepts exactly the defined types", "[protocol]") {
  int known = 0;
  for (int t = 0; t < 256; ++t)
    if (sbx::proto::known_type(static_cast<uint8_t>(t))) ++known;
  CHECK(known == static_cast<int>(std::size(kAllTypes)));
  for (Type t : kAllTypes) CHECK(sbx::proto::known_type(static_cast<uint8_t>(t)));
  for (int t : {0x00, 0x0f, 0x10, 0x7f, 0x80, 0x8a, 0xff}) CHECK_FALSE(sbx::proto::known_type(static_cast<uint8_t>(t)));
}

TEST_CASE("protocol: header layout is big-endian length, type, big-endian channel", "[protocol]") {
  std::string bytes = sbx::proto::encode(Type::stdout_data, 0x01020304u, "hey");
  REQUIRE(bytes.size() == sbx::proto::kHeaderSize + 3);
  CHECK(bytes.substr(0, 9) == raw_header(3, 0x82, 0x01020304u));
  CHECK(bytes.substr(9) == "hey");
}

TEST_CASE("protocol: every frame type round-trips through encode and Decoder", "[protocol]") {
  for (Type t : kAllTypes) {
    for (uint32_t channel : {0u, 1u, 0x7fffffffu, 0xffffffffu}) {
      for (const std::string& payload : {std::string(), std::string("x"), binary_payload(1000)}) {
        CAPTURE(static_cast<int>(t), channel, payload.size());
        std::string bytes = sbx::proto::encode(t, channel, payload);
        CHECK(bytes.size() == sbx::proto::kHeaderSize + payload.size());
        Decoder d;
        d.feed(bytes.data(), bytes.size());
        auto f = d.pop();
        REQUIRE(f);
        CHECK(f->type == t);
        CHECK(f->channel == channel);
        CHECK(f->payload == payload);
        CHECK(d.buffered() == 0);
        CHECK_FALSE(d.pop());
      }
    }
  }
}

TEST_CASE("protocol: JSON and error frames round-trip", "[protocol]") {
  nlohmann::json body = {{"cmd", {"sh", "-c", "echo hi"}}, {"env", {{"A", "1"}}}, {"timeout_ms", 5000}};
  std::string bytes = sbx::proto::encode_json(Type::exec, 9, body);
  Decoder d;
  d.feed(bytes.data(), bytes.size());
  auto f = d.pop();
  REQUIRE(f);
  CHECK(f->type == Type::exec);
  CHECK(f->channel == 9);
  CHECK(f->json() == body);

  std::string err = sbx::proto::encode_error(4, "not_found", 2, "no such file /x");
  Decoder d2;
  d2.feed(err.data(), err.size());
  auto e = d2.pop();
  REQUIRE(e);
  CHECK(e->type == Type::error);
  CHECK(e->channel == 4);
  auto j = e->json();
  CHECK(j.at("code") == "not_found");
  CHECK(j.at("errno") == 2);
  CHECK(j.at("message") == "no such file /x");
}

TEST_CASE("protocol: encode_json replaces invalid UTF-8 instead of throwing", "[protocol]") {
  nlohmann::json body = {{"path", std::string("bad\xff\xfename")}};
  std::string bytes;
  REQUIRE_NOTHROW(bytes = sbx::proto::encode_json(Type::file_read, 1, body));
  Decoder d;
  d.feed(bytes.data(), bytes.size());
  auto f = d.pop();
  REQUIRE(f);
  auto j = f->json();
  CHECK(j.at("path").get<std::string>().rfind("bad", 0) == 0);
}

TEST_CASE("protocol: Decoder fed one byte at a time", "[protocol]") {
  std::vector<std::string> payloads = {"", "a", binary_payload(300), R"({"pid":12})", binary_payload(5000)};
  std::string stream;
  for (size_t i = 0; i < payloads.size(); ++i)
    stream += sbx::proto::encode(kAllTypes[i % std::size(kAllTypes)], static_cast<uint32_t>(i + 1), payloads[i]);
  Decoder d;
  std::vector<Frame> got;
  for (size_t i = 0; i < stream.size(); ++i) {
    d.feed(stream.data() + i, 1);
    while (auto f = d.pop()) got.push_back(*f);
  }
  REQUIRE(got.size() == payloads.size());
  for (size_t i = 0; i < payloads.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].type == kAllTypes[i % std::size(kAllTypes)]);
    CHECK(got[i].channel == i + 1);
    CHECK(got[i].payload == payloads[i]);
  }
  CHECK(d.buffered() == 0);
}

TEST_CASE("protocol: Decoder fed in random splits yields the same frames", "[protocol]") {
  // A fixed seed keeps the test deterministic while covering many split points;
  // the stream is long enough (> 4096 bytes consumed) to exercise compaction.
  std::mt19937 rng(12345);
  std::vector<std::pair<Type, std::string>> sent;
  std::string stream;
  for (int i = 0; i < 200; ++i) {
    Type t = kAllTypes[rng() % std::size(kAllTypes)];
    std::string payload = binary_payload(rng() % 700);
    if (!payload.empty()) payload[0] = static_cast<char>(i);
    sent.emplace_back(t, payload);
    stream += sbx::proto::encode(t, static_cast<uint32_t>(i), payload);
  }
  for (int round = 0; round < 20; ++round) {
    CAPTURE(round);
    Decoder d;
    std::vector<Frame> got;
    size_t pos = 0;
    while (pos < stream.size()) {
      size_t n = std::min<size_t>(stream.size() - pos, 1 + rng() % 2000);
      d.feed(stream.data() + pos, n);
      pos += n;
      while (auto f = d.pop()) got.push_back(*f);
    }
    REQUIRE(got.size() == sent.size());
    for (size_t i = 0; i < sent.size(); ++i) {
      if (got[i].type != sent[i].first || got[i].channel != i || got[i].payload != sent[i].second) {
        CAPTURE(i);
        FAIL("frame differs");
      }
    }
    CHECK(d.buffered() == 0);
  }
}

TEST_CASE("protocol: several frames in one buffer pop in order, partial tail waits", "[protocol]") {
  std::string buf = sbx::proto::encode(Type::started, 1, R"({"pid":1})") +
                    sbx::proto::encode(Type::stdout_data, 1, "out") +
                    sbx::proto::encode(Type::stderr_data, 1, "err") + sbx::proto::encode(Type::exit, 1, "{}");
  std::string tail = sbx::proto::encode(Type::end, 2, "partial-payload");
  buf += tail.substr(0, tail.size() - 3);
  Decoder d;
  d.feed(buf.data(), buf.size());
  std::vector<Type> types;
  while (auto f = d.pop()) types.push_back(f->type);
  CHECK(types == std::vector<Type>{Type::started, Type::stdout_data, Type::stderr_data, Type::exit});
  CHECK(d.buffered() == tail.size() - 3);
  d.feed(tail.data() + tail.size() - 3, 3);
  auto f = d.pop();
  REQUIRE(f);
  CHECK(f->type == Type::end);
  CHECK(f->channel == 2);
  CHECK(f->payload == "partial-payload");
  CHECK(d.buffered() == 0);
}

TEST_CASE("protocol: Decoder refuses an oversized length as soon as the header is in", "[protocol]") {
  Decoder d;
  std::string h = raw_header(sbx::proto::kMaxPayload + 1, static_cast<uint8_t>(Type::data), 1);
  d.feed(h.data(), h.size());
  auto e = error_of([&] { d.pop(); });
  CHECK(e.code() == Errc::protocol);

  Decoder d2;
  std::string h2 = raw_header(0xffffffffu, static_cast<uint8_t>(Type::data), 1);
  d2.feed(h2.data(), h2.size());
  CHECK(error_of([&] { d2.pop(); }).code() == Errc::protocol);
}

TEST_CASE("protocol: Decoder refuses an unknown type", "[protocol]") {
  for (uint8_t t : {uint8_t{0x00}, uint8_t{0x0f}, uint8_t{0x80}, uint8_t{0x8a}, uint8_t{0xff}}) {
    CAPTURE(static_cast<int>(t));
    Decoder d;
    std::string h = raw_header(0, t, 1);
    d.feed(h.data(), h.size());
    CHECK(error_of([&] { d.pop(); }).code() == Errc::protocol);
  }
}

TEST_CASE("protocol: an incomplete header is not an error", "[protocol]") {
  Decoder d;
  std::string h = raw_header(0xffffffffu, 0xff, 1);
  d.feed(h.data(), sbx::proto::kHeaderSize - 1);
  CHECK_FALSE(d.pop());
  CHECK(d.buffered() == sbx::proto::kHeaderSize - 1);
}

TEST_CASE("protocol: payload of exactly kMaxPayload is accepted, one more byte is refused", "[protocol]") {
  std::string max(sbx::proto::kMaxPayload, 'm');
  std::string bytes = sbx::proto::encode(Type::data, 3, max);
  CHECK(bytes.size() == sbx::proto::kHeaderSize + sbx::proto::kMaxPayload);
  Decoder d;
  d.feed(bytes.data(), bytes.size());
  auto f = d.pop();
  REQUIRE(f);
  CHECK(f->payload.size() == sbx::proto::kMaxPayload);
  CHECK(f->payload == max);

  std::string over(sbx::proto::kMaxPayload + 1, 'o');
  auto e = error_of([&] { sbx::proto::encode(Type::data, 3, over); });
  CHECK(e.code() == Errc::limit_exceeded);
  // A JSON body that large is refused the same way.
  nlohmann::json big = {{"x", std::string(sbx::proto::kMaxPayload, 'j')}};
  CHECK(error_of([&] { sbx::proto::encode_json(Type::ok, 1, big); }).code() == Errc::limit_exceeded);
}

TEST_CASE("protocol: read_frame over a socketpair, then clean EOF", "[protocol]") {
  SocketPair sp;
  std::string stream = sbx::proto::encode(Type::ping, 7) + sbx::proto::encode(Type::stdout_data, 8, "hello") +
                       sbx::proto::encode_json(Type::ok, 9, {{"version", 1}});
  sbx::write_all(sp.a.get(), stream);
  sp.a.reset();  // EOF after the last whole frame
  auto f1 = sbx::proto::read_frame(sp.b.get());
  REQUIRE(f1);
  CHECK(f1->type == Type::ping);
  CHECK(f1->channel == 7);
  CHECK(f1->payload.empty());
  auto f2 = sbx::proto::read_frame(sp.b.get());
  REQUIRE(f2);
  CHECK(f2->type == Type::stdout_data);
  CHECK(f2->payload == "hello");
  auto f3 = sbx::proto::read_frame(sp.b.get());
  REQUIRE(f3);
  CHECK(f3->json().at("version") == 1);
  CHECK_FALSE(sbx::proto::read_frame(sp.b.get()));
  CHECK_FALSE(sbx::proto::read_frame(sp.b.get()));  // stays at EOF
}

TEST_CASE("protocol: read_frame of a kMaxPayload frame from a concurrent writer", "[protocol]") {
  SocketPair sp;
  std::string payload = binary_payload(sbx::proto::kMaxPayload);
  std::string bytes = sbx::proto::encode(Type::data, 11, payload);
  // The frame is bigger than the socket buffer: write from another thread.
  std::thread writer([&] {
    sbx::write_all(sp.a.get(), bytes);
    sp.a.reset();
  });
  std::optional<Frame> f;
  try {
    f = sbx::proto::read_frame(sp.b.get());
  } catch (...) {
    writer.join();
    throw;
  }
  writer.join();
  REQUIRE(f);
  CHECK(f->type == Type::data);
  CHECK(f->channel == 11);
  CHECK(f->payload == payload);
  CHECK_FALSE(sbx::proto::read_frame(sp.b.get()));
}

TEST_CASE("protocol: read_frame throws protocol on EOF inside a frame", "[protocol]") {
  std::string frame = sbx::proto::encode(Type::stdout_data, 1, "0123456789");
  SECTION("EOF inside the payload") {
    SocketPair sp;
    sbx::write_all(sp.a.get(), frame.substr(0, frame.size() - 4));
    sp.a.reset();
    CHECK(error_of([&] { sbx::proto::read_frame(sp.b.get()); }).code() == Errc::protocol);
  }
  SECTION("EOF inside the header") {
    SocketPair sp;
    sbx::write_all(sp.a.get(), frame.substr(0, 5));
    sp.a.reset();
    CHECK(error_of([&] { sbx::proto::read_frame(sp.b.get()); }).code() == Errc::protocol);
  }
  SECTION("EOF after a whole frame and part of the next") {
    SocketPair sp;
    sbx::write_all(sp.a.get(), frame + frame.substr(0, 1));
    sp.a.reset();
    auto f = sbx::proto::read_frame(sp.b.get());
    REQUIRE(f);
    CHECK(f->payload == "0123456789");
    CHECK(error_of([&] { sbx::proto::read_frame(sp.b.get()); }).code() == Errc::protocol);
  }
}

TEST_CASE("protocol: read_frame refuses oversized lengths and unknown types", "[protocol]") {
  SECTION("oversized") {
    SocketPair sp;
    sbx::write_all(sp.a.get(), raw_header(sbx::proto::kMaxPayload + 1, static_cast<uint8_t>(Type::data), 1));
    sp.a.reset();
    CHECK(error_of([&] { sbx::proto::read_frame(sp.b.get()); }).code() == Errc::protocol);
  }
  SECTION("unknown type") {
    SocketPair sp;
    sbx::write_all(sp.a.get(), raw_header(0, 0x42, 1));
    sp.a.reset();
    CHECK(error_of([&] { sbx::proto::read_frame(sp.b.get()); }).code() == Errc::protocol);
  }
}

TEST_CASE("protocol: read_frame over a pipe", "[protocol]") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  sbx::Fd r(p[0]), w(p[1]);
  sbx::write_all(w.get(), sbx::proto::encode(Type::stdin_eof, 5));
  w.reset();
  auto f = sbx::proto::read_frame(r.get());
  REQUIRE(f);
  CHECK(f->type == Type::stdin_eof);
  CHECK(f->channel == 5);
  CHECK_FALSE(sbx::proto::read_frame(r.get()));
}

TEST_CASE("protocol: Frame::json throws protocol on garbage and non-objects", "[protocol]") {
  auto payload = GENERATE(as<std::string>{}, "", "garbage", "{", R"({"a":)", "[1,2]", "42", "\"str\"", "null",
                          std::string("\x00\x01", 2));
  CAPTURE(payload);
  Frame f{Type::ok, 1, payload};
  CHECK(error_of([&] { f.json(); }).code() == Errc::protocol);
}

TEST_CASE("protocol: Frame::json parses an object", "[protocol]") {
  Frame f{Type::exit, 1, R"({"exit_code":3,"signal":0,"timed_out":false})"};
  auto j = f.json();
  CHECK(j.at("exit_code") == 3);
  CHECK(j.at("timed_out") == false);
}

TEST_CASE("protocol: an agent answer of the wrong shape is a protocol error, not a json exception", "[protocol][fuzz]") {
  // Found by tests/fuzz/fuzz_agent_client: list() let nlohmann's out_of_range
  // ("key 'entries' not found") escape, which callers expecting sbx::Error miss.
  auto answer = GENERATE(as<std::string>{}, sbx::proto::encode(Type::entries, 1, R"({"x":1})"),
                         sbx::proto::encode(Type::entries, 1, R"({"entries":[{"mode":"rw"}]})"),
                         sbx::proto::encode(Type::error, 1, R"({"code":5,"message":[]})"));
  SocketPair p;
  sbx::write_all(p.b.get(), answer);
  ::shutdown(p.b.get(), SHUT_WR);
  sbx::AgentClient client(std::move(p.a));
  auto e = error_of([&] { client.list("/", false); });
  CHECK(e.code() == Errc::protocol);
}

TEST_CASE("protocol: an exec's exit frame of the wrong shape is an sbx::Error naming the field", "[protocol][fuzz]") {
  SocketPair p;
  sbx::write_all(p.b.get(), sbx::proto::encode(Type::exit, 1, R"({"exit_code":"zero"})"));
  ::shutdown(p.b.get(), SHUT_WR);
  sbx::AgentClient client(std::move(p.a));
  sbx::ExecRequest req;
  req.argv = {"true"};
  sbx::ExecIO io;
  auto e = error_of([&] { client.exec(req, io); });  // spec.cpp's field check: invalid_argument
  CHECK(std::string(e.what()).find("exit_code") != std::string::npos);
}

TEST_CASE("protocol: put_header and parse_header agree with encode, and parse_header checks", "[protocol]") {
  char head[sbx::proto::kHeaderSize];
  sbx::proto::put_header(head, Type::data, 0x01020304u, 3);
  CHECK(std::string(head, sizeof head) == sbx::proto::encode(Type::data, 0x01020304u, "abc").substr(0, 9));
  auto h = sbx::proto::parse_header(head);
  CHECK(h.type == Type::data);
  CHECK(h.channel == 0x01020304u);
  CHECK(h.length == 3);
  CHECK(error_of([&] { sbx::proto::put_header(head, Type::data, 1, sbx::proto::kMaxPayload + 1); }).code() ==
        Errc::limit_exceeded);
  std::string big = raw_header(sbx::proto::kMaxPayload + 1, static_cast<uint8_t>(Type::data), 1);
  CHECK(error_of([&] { sbx::proto::parse_header(big.data()); }).code() == Errc::protocol);
  std::string unknown = raw_header(0, 0x7f, 1);
  CHECK(error_of([&] { sbx::proto::parse_header(unknown.data()); }).code() == Errc::protocol);
}

TEST_CASE("protocol: send_now writes head then body as one frame, stops at a full socket, reports a broken one", "[protocol]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
  sbx::Fd a(sv[0]), b(sv[1]);
  std::string body = binary_payload(1000);
  char head[sbx::proto::kHeaderSize];
  sbx::proto::put_header(head, Type::data, 7, body.size());
  bool broke = false;
  CHECK(sbx::proto::send_now(a.get(), std::string_view(head, sizeof head), body, broke) == sizeof head + body.size());
  CHECK_FALSE(broke);
  auto f = sbx::proto::read_frame(b.get());
  REQUIRE(f);
  CHECK(f->channel == 7);
  CHECK(f->payload == body);
  // A peer that reads nothing: what fits is written, the rest is the caller's to queue.
  std::string huge(8 << 20, 'x');
  size_t took = sbx::proto::send_now(a.get(), {}, huge, broke);
  CHECK(took > 0);
  CHECK(took < huge.size());
  CHECK_FALSE(broke);
  b.reset();
  sbx::proto::send_now(a.get(), "x", {}, broke);
  CHECK(broke);
}
