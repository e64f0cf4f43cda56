// The one translation unit that includes Boost.Beast (see websocket.hpp).
#include "core/websocket.hpp"

#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/unix_socket.hpp"

namespace sbx::ws {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bws = boost::beast::websocket;
using boost::system::error_code;

namespace {

constexpr size_t kQueueHighWater = 1 << 20;
constexpr size_t kFeedHighWater = 1 << 20, kFeedLowWater = 256 << 10;
constexpr auto kCloseWait = std::chrono::seconds(5);
constexpr auto kHandshakeWait = std::chrono::seconds(30);
// A peer that neither answers pings nor sends anything for this long is gone (a dropped network sends no FIN).
constexpr auto kIdleTimeout = std::chrono::seconds(60);

// The socket under Beast. libmicrohttpd owns a server-side socket and has
// already written the 101 answer, so this layer (1) never closes a socket it
// does not own, (2) drops what Beast writes while it "accepts" (its own 101,
// which must not reach the client a second time), and (3) hands out first
// the bytes libmicrohttpd read past the request.
class FdLayer {
 public:
  using executor_type = asio::io_context::executor_type;

  FdLayer(asio::io_context& ioc, int fd, bool owned, std::string pending)
      : sd_(ioc, fd), owned_(owned), pending_(std::move(pending)) {}
  ~FdLayer() {
    if (!owned_) sd_.release();
  }
  FdLayer(const FdLayer&) = delete;
  FdLayer& operator=(const FdLayer&) = delete;

  executor_type get_executor() noexcept { return sd_.get_executor(); }
  bool swallow = false;  ///< writes vanish (the accept's handshake answer)

  template <class Buffers>
  size_t read_some(const Buffers& b, error_code& ec) {
    if (!pending_.empty()) return take_pending(b);
    return sd_.read_some(b, ec);
  }
  template <class Buffers>
  size_t read_some(const Buffers& b) {
    error_code ec;
    size_t n = read_some(b, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  template <class Buffers>
  size_t write_some(const Buffers& b, error_code& ec) {
    if (swallow) return asio::buffer_size(b);
    return sd_.write_some(b, ec);
  }
  template <class Buffers>
  size_t write_some(const Buffers& b) {
    error_code ec;
    size_t n = write_some(b, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  template <class Buffers, class Handler>
  void async_read_some(const Buffers& b, Handler&& h) {
    if (!pending_.empty()) {
      size_t n = take_pending(b);
      asio::post(sd_.get_executor(), beast::bind_front_handler(std::forward<Handler>(h), error_code{}, n));
      return;
    }
    sd_.async_read_some(b, std::forward<Handler>(h));
  }
  template <class Buffers, class Handler>
  void async_write_some(const Buffers& b, Handler&& h) {
    sd_.async_write_some(b, std::forward<Handler>(h));
  }
  /// Our half of the connection is done (the close handshake is over).
  void shutdown_write() { ::shutdown(sd_.native_handle(), SHUT_WR); }
  /// Everything stops: pending operations end with an error.
  void drop() {
    ::shutdown(sd_.native_handle(), SHUT_RDWR);
    error_code ec;
    sd_.cancel(ec);
  }

 private:
  template <class Buffers>
  size_t take_pending(const Buffers& b) {
    size_t n = asio::buffer_copy(b, asio::buffer(pending_));
    pending_.erase(0, n);
    return n;
  }

  asio::posix::basic_stream_descriptor<executor_type> sd_;
  bool owned_;
  std::string pending_;
};

// Beast's customization points for a stream type of our own (found by ADL).
[[maybe_unused]] void teardown(beast::role_type, FdLayer& s, error_code& ec) {
  s.shutdown_write();
  ec = {};
}
template <class Handler>
void async_teardown(beast::role_type, FdLayer& s, Handler&& h) {
  s.shutdown_write();
  asio::post(s.get_executor(), beast::bind_front_handler(std::forward<Handler>(h), error_code{}));
}
[[maybe_unused]] void beast_close_socket(FdLayer& s) { s.drop(); }

}  // namespace

struct Connection::Impl {
  asio::io_context ioc;
  bws::stream<FdLayer> ws;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  asio::steady_timer timer;
  beast::flat_buffer rbuf;
  OnMessage on_message;
  std::thread::id io_thread;
  // Shared with other threads, under mu.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Message> queue;
  size_t queued = 0;
  std::optional<std::pair<uint16_t, std::string>> close_req;
  bool done = false;
  // The io thread's alone.
  Message writing_msg;
  bool writing = false, reading = false, paused = false, close_sent = false;
  Closed result;

  Impl(int fd, bool owned, std::string pending)
      : ws(ioc, fd, owned, std::move(pending)), work(ioc.get_executor()), timer(ioc) {
    ws.auto_fragment(false);
    ws.read_message_max(64u << 20);
  }

  void start_read() {
    if (reading || paused || done) return;
    reading = true;
    ws.async_read(rbuf, [this](error_code ec, size_t) { on_read(ec); });
  }

  void on_read(error_code ec) {
    reading = false;
    if (ec) {
      if (!close_sent) {
        result.by_peer = true;
        if (ec == bws::error::closed) {
          result.code = ws.reason().code;
          result.reason = std::string(ws.reason().reason.data(), ws.reason().reason.size());
        }
      }
      finish();
      return;
    }
    Message m{ws.got_text() ? Kind::text : Kind::binary, beast::buffers_to_string(rbuf.data())};
    rbuf.consume(rbuf.size());
    if (!on_message(m)) paused = true;
    start_read();
  }

  void pump_write() {
    if (writing || close_sent || done) return;
    std::unique_lock lock(mu);
    if (queue.empty()) {
      if (!close_req) return;
      auto [code, reason] = *close_req;
      lock.unlock();
      send_close(code, reason);
      return;
    }
    writing_msg = std::move(queue.front());
    queue.pop_front();
    lock.unlock();
    writing = true;
    ws.binary(writing_msg.kind == Kind::binary);
    ws.async_write(asio::buffer(writing_msg.data), [this](error_code ec, size_t) {
      writing = false;
      {
        std::lock_guard l(mu);
        queued -= writing_msg.data.size();
      }
      cv.notify_all();
      writing_msg.data.clear();
      if (ec) return fail();
      pump_write();
    });
  }

  void send_close(uint16_t code, const std::string& reason) {
    close_sent = true;
    result = Closed{code, reason, false};
    timer.expires_after(kCloseWait);
    timer.async_wait([this](error_code ec) {
      if (!ec) fail();  // the peer never answered our close
    });
    ws.async_close(bws::close_reason(static_cast<bws::close_code>(code), reason), [this](error_code) { finish(); });
  }

  void fail() {
    ws.next_layer().drop();
    finish();
  }

  void finish() {
    if (done) return;
    {
      std::lock_guard l(mu);
      done = true;
    }
    cv.notify_all();
    timer.cancel();
    work.reset();
    ws.next_layer().drop();
    // Beast's idle timer (and a read or write still pending) would keep run() going: the connection is over.
    ioc.stop();
  }
};

Connection::Connection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Connection::~Connection() = default;

std::unique_ptr<Connection> Connection::accept_upgraded(int fd, std::string_view client_key, std::string_view extra_in) {
  auto impl = std::make_unique<Impl>(fd, false, std::string(extra_in));
  // Beast has no way to start a connection whose handshake someone else did:
  // it is given the request again (only what the handshake needs) and its answer is dropped.
  std::string req = "GET / HTTP/1.1\r\nHost: sbx\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " +
                    std::string(client_key) + "\r\nSec-WebSocket-Version: 13\r\n\r\n";
  impl->ws.next_layer().swallow = true;
  error_code ec;
  impl->ws.accept(asio::buffer(req), ec);
  impl->ws.next_layer().swallow = false;
  if (ec) throw Error(Errc::protocol, "WebSocket upgrade: " + ec.message());
  impl->ws.set_option(bws::stream_base::timeout{bws::stream_base::none(), kIdleTimeout, true});
  return std::unique_ptr<Connection>(new Connection(std::move(impl)));
}

std::unique_ptr<Connection> Connection::connect(Fd fd, const std::string& host, const std::string& target,
                                                const std::vector<std::pair<std::string, std::string>>& headers,
                                                Refusal& refusal) {
  auto impl = std::make_unique<Impl>(fd.release(), true, "");
  impl->ws.set_option(bws::stream_base::decorator([headers](bws::request_type& r) {
    for (auto& [k, v] : headers) r.set(k, v);
  }));
  bws::response_type res;
  std::optional<error_code> outcome;
  impl->timer.expires_after(kHandshakeWait);
  impl->timer.async_wait([&](error_code ec) {
    if (!ec) impl->ws.next_layer().drop();
  });
  impl->ws.async_handshake(res, host, target, [&](error_code ec) {
    outcome = ec;
    impl->timer.cancel();
  });
  while (!outcome) impl->ioc.run_one();
  impl->ioc.poll();     // the cancelled timer's completion
  impl->ioc.restart();
  if (*outcome == bws::error::upgrade_declined) {
    refusal.status = static_cast<int>(res.result_int());
    refusal.body = res.body();
    return nullptr;
  }
  if (*outcome) throw Error(Errc::unavailable, "the WebSocket handshake with " + host + " failed: " + outcome->message());
  impl->ws.set_option(bws::stream_base::timeout{bws::stream_base::none(), kIdleTimeout, true});
  return std::unique_ptr<Connection>(new Connection(std::move(impl)));
}

Closed Connection::run(const OnMessage& on_message) {
  Impl& s = *impl_;
  s.on_message = on_message;
  s.io_thread = std::this_thread::get_id();
  asio::post(s.ioc, [&s] {
    s.start_read();
    s.pump_write();
  });
  s.ioc.run();
  std::lock_guard l(s.mu);
  s.done = true;
  s.cv.notify_all();
  return s.result;
}

bool Connection::send(Kind kind, std::string data) {
  Impl& s = *impl_;
  {
    std::unique_lock lock(s.mu);
    // The io thread itself (an answer from on_message) never waits: it is the one emptying the queue.
    if (std::this_thread::get_id() != s.io_thread)
      s.cv.wait(lock, [&] { return s.done || s.close_req || s.queued < kQueueHighWater; });
    if (s.done || s.close_req) return false;
    s.queued += data.size();
    s.queue.push_back(Message{kind, std::move(data)});
  }
  asio::post(s.ioc, [&s] { s.pump_write(); });
  return true;
}

void Connection::close(uint16_t code, std::string reason) {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.mu);
    if (s.done || s.close_req) return;
    s.close_req.emplace(code, std::move(reason));
  }
  s.cv.notify_all();
  asio::post(s.ioc, [&s] { s.pump_write(); });
}

void Connection::resume() {
  Impl& s = *impl_;
  asio::post(s.ioc, [&s] {
    s.paused = false;
    s.start_read();
  });
}

void Connection::abort() {
  Impl& s = *impl_;
  asio::post(s.ioc, [&s] { s.fail(); });
}

Feeder::Feeder(Connection& c, int fd, std::function<void()> at_eof)
    : c_(c), fd_(fd), at_eof_(std::move(at_eof)), thread_([this] { loop(); }) {}

bool Feeder::push(std::string data) {
  std::lock_guard lock(mu_);
  if (eof_ || broken_) return true;  // after EOF, or to a reader that is gone: dropped
  bytes_ += data.size();
  queue_.push_back(std::move(data));
  cv_.notify_all();
  if (bytes_ > kFeedHighWater) paused_ = true;
  return !paused_;
}

void Feeder::eof() {
  std::lock_guard lock(mu_);
  eof_ = true;
  cv_.notify_all();
}

void Feeder::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Feeder::finish() {
  {
    std::lock_guard lock(mu_);
    if (!eof_) stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Feeder::loop() {
  block_sigpipe_in_this_thread();  // a reader gone is EPIPE here
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || eof_ || !queue_.empty(); });
    if (stop_) return;
    if (queue_.empty()) break;  // EOF, and everything written
    std::string data = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      if (!broken_) write_all(fd_, data);
    } catch (const Error&) {
      broken_ = true;
    }
    lock.lock();
    bytes_ -= data.size();
    if (paused_ && bytes_ < kFeedLowWater) {
      paused_ = false;
      c_.resume();
    }
  }
  lock.unlock();
  at_eof_();
}

void relay(Connection& c, int fd) {
  std::atomic<bool> in_done{false}, out_done{false};
  auto maybe_done = [&] {
    if (in_done && out_done) c.close(kNormalClose);
  };
  Feeder feeder(c, fd, [&] {
    ::shutdown(fd, SHUT_WR);
    in_done = true;
    maybe_done();
  });
  std::thread reader([&] {
    std::string buf(64 * 1024, '\0');
    for (;;) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !c.send(Kind::binary, buf.substr(0, static_cast<size_t>(n)))) break;
    }
    c.send(Kind::text, R"({"eof":true})");
    out_done = true;
    maybe_done();
  });
  c.run([&](Message& m) {
    if (m.kind == Kind::binary) return feeder.push(std::move(m.data));
    auto j = nlohmann::json::parse(m.data, nullptr, false);  // only {"eof":true} is defined; the rest is ignored
    if (auto eof = j.find("eof"); eof != j.end() && *eof == true) feeder.eof();  // never throws ({"eof":1} did)
    return true;
  });
  feeder.finish();
  ::shutdown(fd, SHUT_RDWR);  // the reader's read ends
  reader.join();
}

std::string accept_key(std::string_view client_key) {
  bws::detail::sec_ws_accept_type out;
  bws::detail::make_sec_ws_accept(out, beast::string_view(client_key.data(), client_key.size()));
  return std::string(out.data(), out.size());
}

}  // namespace sbx::ws
