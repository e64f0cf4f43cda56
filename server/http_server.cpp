#include "server/http_server.hpp"

#include "server/api_internal.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/lazy_libs.hpp"
#include "core/websocket.hpp"
#include "server/fleet.hpp"

namespace sbx::server {

namespace {

constexpr size_t kMaxPathBytes = 4096;
// What one upload may hold in the manager: the pipe between the connection and its handler.
constexpr int kUploadPipeBytes = 1 << 20;
// A request for another manager's sandbox with a body of at most this, of known length, is
// taken whole before it goes on (below: whole_small_body).
constexpr uint64_t kWholeForwardBytes = 64 * 1024;

// A file upload handed to its handler while it arrives. The handler runs on
// a thread of its own reading a pipe (req.body_fd); the connection's thread
// (libmicrohttpd gives each connection one, so blocking it stalls no other
// client) writes each piece into the pipe as it comes, waiting while the pipe
// is full. The manager so holds at most the pipe per upload, and a slow
// sandbox slows its client down through TCP instead of filling memory.
class StreamedUpload {
 public:
  StreamedUpload(Api& api, HttpRequest req) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw sys_error("pipe", errno);
    Fd r(p[0]);
    w_.reset(p[1]);
    ::fcntl(p[1], F_SETPIPE_SZ, kUploadPipeBytes);  // a bigger buffer, fewer wake-ups; the default 64 KiB works too
    req.body_fd = r.get();
    req.body_complete = [this] { return complete_.load(); };  // `this` outlives the thread: finish() joins it
    thread_ = std::thread([this, &api, req = std::move(req), r = std::move(r)]() mutable {
      try {
        response_ = api.handle(req);
      } catch (...) {  // handle() promises not to throw; if it ever does, one request fails, never the manager
        response_ = Api::error_response(Error(Errc::internal, "the manager failed this request"));
      }
      r.reset();  // the writer's next write fails: the answer is ready
    });
  }
  StreamedUpload(const StreamedUpload&) = delete;
  StreamedUpload& operator=(const StreamedUpload&) = delete;
  ~StreamedUpload() { finish(false); }

  /// Passes on a piece of the body; false (the piece dropped) once the handler has stopped reading.
  bool feed(std::string_view data) {
    if (!w_) return false;
    try {
      write_all(w_.get(), data);
      return true;
    } catch (const Error&) {  // EPIPE: the handler is done (serve ignores SIGPIPE)
      w_.reset();
      return false;
    }
  }
  /// Ends the body, whole or cut off (the handler then fails and the agent
  /// drops its half-written temp file), and waits for the handler's answer.
  HttpResponse finish(bool complete) {
    complete_ = complete;
    w_.reset();
    if (thread_.joinable()) thread_.join();
    return std::move(response_);
  }

 private:
  Fd w_;
  std::atomic<bool> complete_{false};
  HttpResponse response_;
  std::thread thread_;
};

// Everything known about one request across libmicrohttpd's callbacks.
struct Exchange {
  HttpRequest req;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  std::string key_name = "-";
  int status = 0;
  bool begun = false;     // the handler has seen the request's headers
  bool answered = false;  // a response was queued early (auth, size)
  bool too_large = false;
  bool streamed = false;  // a file upload: handed on as it arrives, never held whole
  std::unique_ptr<StreamedUpload> upload;
  uint64_t received = 0;
  std::function<void(ws::Connection&)> websocket;  // the session to run once the 101 is out
  std::function<void(int, std::string)> upgraded;  // or the raw relay of one another manager serves
};

// A process-unique, unguessable-enough id for correlating an answer with its log line.
std::string new_request_id() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t boot = static_cast<uint64_t>(now_ms()) ^ (static_cast<uint64_t>(::getpid()) << 40);
  char buf[40];
  std::snprintf(buf, sizeof buf, "req_%012llx%06llx", static_cast<unsigned long long>(boot & 0xFFFFFFFFFFFFull),
                static_cast<unsigned long long>(++counter & 0xFFFFFF));
  return buf;
}

// Error bodies name the request too: {"error": {..., "request_id": ...}}.
void with_request_id(HttpResponse& r, const std::string& id) {
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) return;
  j["error"]["request_id"] = id;
  r.body = json_line(j);
}

struct StreamHolder {
  std::shared_ptr<ResponseStream> stream;
};

// Case-insensitive: whether the comma-separated header value holds `token` ("keep-alive, Upgrade").
bool header_has_token(const char* value, std::string_view token) {
  if (!value) return false;
  std::string v(value);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (size_t pos = 0; pos <= v.size();) {
    size_t end = std::min(v.find(',', pos), v.size());
    size_t b = v.find_first_not_of(' ', pos), e = v.find_last_not_of(' ', end - 1);
    if (b != std::string::npos && b < end && v.compare(b, e - b + 1, token) == 0) return true;
    pos = end + 1;
  }
  return false;
}

// Upgraded connections outlive their requests, each on a thread that hands
// its handle back to libmicrohttpd when it ends. The handle is the daemon's
// memory, so stopping the daemon first ends the sessions and waits for that.
class Sessions {
 public:
  uint64_t begin(int sock) {
    std::lock_guard lock(mu_);
    socks_[++last_] = sock;
    return last_;
  }
  // Before the socket is closed: end_all must not shut down a reused number.
  void closing(uint64_t id) {
    std::lock_guard lock(mu_);
    socks_[id] = -1;
  }
  void end(uint64_t id) {
    std::lock_guard lock(mu_);
    socks_.erase(id);
    cv_.notify_all();
  }
  // Shuts every session's socket (its reads end, so does it) and waits for
  // the threads to give their handles back; false if one would not.
  bool end_all(std::chrono::milliseconds patience) {
    std::unique_lock lock(mu_);
    for (auto& [id, sock] : socks_)
      if (sock >= 0) ::shutdown(sock, SHUT_RDWR);
    return cv_.wait_for(lock, patience, [&] { return socks_.empty(); });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, int> socks_;
  uint64_t last_ = 0;
};

// The session of an upgraded connection, on a thread of its own: the
// upgrade callback must return before libmicrohttpd relays TLS for it.
void start_websocket_session(const MhdApi& m, Sessions& sessions, Exchange& ex, const char* extra, size_t extra_size,
                             int sock, MHD_UpgradeResponseHandle* urh) {
  uint64_t id = sessions.begin(sock);
  std::thread([&m, &sessions, id, fn = std::move(ex.websocket), raw = std::move(ex.upgraded),
               key = ex.req.websocket_key, in = std::string(extra, extra_size), sock, urh]() mutable {
    try {
      if (raw) raw(sock, in);
      else fn(*ws::Connection::accept_upgraded(sock, key, in));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "websocket session failed: %s\n", e.what());
    }
    fn = nullptr;  // what the session held goes while the daemon still stands
    raw = nullptr;
    sessions.closing(id);
    m.MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    sessions.end(id);
  }).detach();
}

std::string json_escape(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

struct HttpServer::Impl {
  Api& api;
  HttpOptions opts;
  const MhdApi* m = nullptr;
  MHD_Daemon* daemon = nullptr;
  int listen_fd = -1;
  uint16_t bound_port = 0;
  // Until libmicrohttpd reports a request complete, its answer may still be
  // on the way: a drain must wait for this, not for the handler to return.
  std::atomic<int> open{0};
  Sessions sessions;

  Impl(Api& a, HttpOptions o) : api(a), opts(std::move(o)) {}

  MHD_Result queue(MHD_Connection* c, Exchange& ex, HttpResponse r) {
    if (r.status >= 400) with_request_id(r, ex.req.request_id);
    MHD_Response* resp = nullptr;
    if (r.websocket || r.upgraded) {
      ex.websocket = std::move(r.websocket);
      ex.upgraded = std::move(r.upgraded);
      resp = m->MHD_create_response_for_upgrade(
          [](void* cls, MHD_Connection*, void* con_cls, const char* extra, size_t extra_size, MHD_socket sock,
             MHD_UpgradeResponseHandle* urh) {
            auto* self = static_cast<Impl*>(cls);
            start_websocket_session(*self->m, self->sessions, *static_cast<Exchange*>(con_cls), extra, extra_size,
                                    sock, urh);
          },
          this);
      if (resp) {
        m->MHD_add_response_header(resp, "Upgrade", "websocket");
        m->MHD_add_response_header(resp, "Sec-WebSocket-Accept", ws::accept_key(ex.req.websocket_key).c_str());
      }
    } else if (r.stream) {
      auto* holder = new StreamHolder{r.stream};
      resp = m->MHD_create_response_from_callback(
          r.stream_size >= 0 ? static_cast<uint64_t>(r.stream_size) : MHD_SIZE_UNKNOWN, 32 * 1024,
          [](void* cls, uint64_t, char* buf, size_t max) -> ssize_t {
            ssize_t n = static_cast<StreamHolder*>(cls)->stream->read(buf, max);
            if (n > 0) return n;
            return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
          },
          holder,
          [](void* cls) {
            auto* h = static_cast<StreamHolder*>(cls);
            h->stream->cancel();
            delete h;
          });
    } else if (r.file_fd >= 0) {
      resp = m->MHD_create_response_from_fd64(r.file_size, r.file_fd);
    } else {
      resp = m->MHD_create_response_from_buffer(r.body.size(), r.body.data(), MHD_RESPMEM_MUST_COPY);
    }
    if (!resp) return MHD_NO;
    if (!r.content_type.empty()) m->MHD_add_response_header(resp, "Content-Type", r.content_type.c_str());
    m->MHD_add_response_header(resp, "X-Request-Id", ex.req.request_id.c_str());
    for (auto& [name, value] : r.headers) m->MHD_add_response_header(resp, name.c_str(), value.c_str());
    ex.status = r.status;
    MHD_Result ok = m->MHD_queue_response(c, static_cast<unsigned>(r.status), resp);
    m->MHD_destroy_response(resp);
    return ok;
  }

  // Whether a request's body is known to be small (a Content-Length within kWholeForwardBytes, or
  // none and not chunked). Passed on to its owner, such a request is taken whole and answered on
  // the connection's thread, its head and body in one packet: a streamed one costs a thread and a
  // pipe, and on a busy host their wake-ups were most of an exec's hop.
  bool whole_small_body(MHD_Connection* c) const {
    if (m->MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding")) return false;
    const char* len = m->MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (!len) return true;
    char* end = nullptr;
    unsigned long long n = std::strtoull(len, &end, 10);
    return end != len && *end == '\0' && n <= kWholeForwardBytes;
  }

  MHD_Result early(MHD_Connection* c, Exchange& ex, const Error& e) {
    ex.answered = true;
    return queue(c, ex, Api::error_response(e));
  }

  MHD_Result on_request(MHD_Connection* c, const char* url, const char* method, const char* upload,
                        size_t* upload_size, void** state) {
    auto* first = static_cast<Exchange*>(*state);  // made by on_uri, before the headers
    if (!first->begun) {
      Exchange* ex = first;
      ex->begun = true;
      ex->req.method = method;
      ex->req.path = url;
      ex->req.request_id = new_request_id();
      if (ex->req.path.size() > kMaxPathBytes)
        return early(c, *ex, Error(Errc::invalid_argument, "the URL path is longer than 4 KiB"));
      const char* key = m->MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-Key");
      const ApiKey* who = key ? api.authenticate(key) : nullptr;
      // Browsers cannot set headers on a WebSocket: a token in the query (server/tokens.hpp) stands in for the key.
      const char* token = key ? nullptr : m->MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
      int owner = -1;  // in a fleet: the manager this request goes on to (server/fleet.hpp)
      try {
        owner = fleet_hop(c, *ex);
      } catch (const Error& e) {
        return early(c, *ex, e);
      }
      bool stream_on = owner >= 0 && !whole_small_body(c);
      if (token && owner >= 0) {
        ex->key_name = "(token, for " + std::to_string(owner) + ")";  // the owner made the token and checks it
        ex->streamed = stream_on;
        return MHD_YES;
      }
      if (token) {
        TokenGrant grant;
        if ((who = api.authenticate_token(token, ex->req.path, grant))) ex->req.token = grant;
        else return early(c, *ex, Error(Errc::unauthenticated, "the token was refused (expired, or not for this route)")
                                      .set_hint("ask for a new one: POST /v1/sandboxes/{id}/tokens"));
      }
      if (!who)
        return early(c, *ex, Error(Errc::unauthenticated, key ? "the API key was refused" : "no X-API-Key header")
                                 .set_hint("send the manager's key in the X-API-Key header"));
      ex->req.key = who;
      ex->key_name = who->name;
      // PUT is only the files route's; the port proxy streams a body of any method and size.
      ex->streamed = owner >= 0 ? stream_on : ex->req.method == "PUT" || is_port_proxy_path(ex->req.path);
      return MHD_YES;
    }
    auto* ex = static_cast<Exchange*>(*state);
    if (ex->answered) {
      *upload_size = 0;
      return MHD_YES;
    }
    if (ex->streamed) return on_upload(c, *ex, upload, upload_size);
    if (*upload_size) {
      ex->received += *upload_size;
      if (ex->received > body_limit(ex->req.path)) ex->too_large = true;
      else ex->req.body.append(upload, *upload_size);
      *upload_size = 0;
      return MHD_YES;
    }
    if (ex->too_large) {
      ex->answered = true;
      bool files = ends_with(ex->req.path, "/files");
      return queue(c, *ex, Api::error_response(Error(Errc::too_large, "the request body is too large")
                                                   .set_hint(files ? "the JSON files write is capped at 64 MiB; send big files "
                                                                     "raw with PUT /v1/sandboxes/{id}/files?path=P (streamed)"
                                                                   : "JSON bodies are capped at 1 MiB (64 MiB for exec with stdin)"),
                                               413));
    }
    fill_request(c, *ex);
    ex->answered = true;
    HttpResponse r;
    try {
      r = api.handle(ex->req);
    } catch (...) {  // handle() promises not to throw; if it ever does, one request fails, never the manager
      r = Api::error_response(Error(Errc::internal, "the manager failed this request"));
    }
    return queue(c, *ex, std::move(r));
  }

  // In a fleet: the owner a request goes on to (-1: answered here). A request passed on
  // by another manager keeps that one's request id, so both log lines name the same.
  int fleet_hop(MHD_Connection* c, Exchange& ex) {
    bool forwarded = m->MHD_lookup_connection_value(c, MHD_HEADER_KIND, kForwardedHeader) != nullptr;
    const char* rid = forwarded ? m->MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id") : nullptr;
    if (rid && std::strlen(rid) == 22 && std::strncmp(rid, "req_", 4) == 0 &&
        std::strspn(rid + 4, "0123456789abcdef") == 18)
      ex.req.request_id = rid;
    return api.fleet_owner(ex.req.path, forwarded);
  }

  // What the handler needs beyond method and path, read once the headers are in.
  void fill_request(MHD_Connection* c, Exchange& ex) {
    m->MHD_get_connection_values(
        c, MHD_GET_ARGUMENT_KIND,
        [](void* cls, MHD_ValueKind, const char* k, const char* v) -> MHD_Result {
          static_cast<std::map<std::string, std::string>*>(cls)->emplace(k, v ? v : "");
          return MHD_YES;
        },
        &ex.req.query);
    using Pairs = std::vector<std::pair<std::string, std::string>>;
    auto add_pair = [](void* cls, MHD_ValueKind, const char* k, const char* v) -> MHD_Result {
      static_cast<Pairs*>(cls)->emplace_back(k, v ? v : "");
      return MHD_YES;
    };
    m->MHD_get_connection_values(c, MHD_HEADER_KIND, add_pair, &ex.req.headers);
    m->MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, add_pair, &ex.req.args);
    if (const char* a = m->MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept")) ex.req.accept = a;
    if (const char* t = m->MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type")) ex.req.content_type = t;
    if (auto* info = m->MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD)) ex.req.client_fd = info->connect_fd;
    // RFC 6455's upgrade; a request asking for another version is not one (the route says what to send).
    const char* key = m->MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Key");
    const char* version = m->MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Version");
    if (key && *key && version && std::string_view(version) == "13" && ex.req.method == "GET" &&
        header_has_token(m->MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Upgrade"), "websocket") &&
        header_has_token(m->MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connection"), "upgrade"))
      ex.req.websocket_key = key;
  }

  // A file upload: its handler starts with the first piece and reads the rest as it comes.
  MHD_Result on_upload(MHD_Connection* c, Exchange& ex, const char* upload, size_t* upload_size) {
    if (!ex.upload) {
      fill_request(c, ex);
      try {
        ex.upload = std::make_unique<StreamedUpload>(api, ex.req);
      } catch (const std::exception& e) {  // no pipe or thread to be had: this request fails, never the manager
        return early(c, ex, Error(Errc::unavailable, std::string("cannot take the upload: ") + e.what()));
      }
    }
    // No cap on the body here: the handler checks cp_max_size on the content as it flows, and
    // the sandbox's disk is the real limit.
    // When the handler answers before the body's end (an error: a missing sandbox, a full
    // disk, a dead agent, past cp_max_size), feed() fails and the rest is read and dropped:
    // libmicrohttpd 0.9 takes an answer only before the body or after it.
    if (*upload_size) {
      ex.upload->feed(std::string_view(upload, *upload_size));
      *upload_size = 0;
      return MHD_YES;
    }
    ex.answered = true;
    return queue(c, ex, ex.upload->finish(true));
  }

  static bool ends_with(const std::string& path, std::string_view tail) {
    return path.size() > tail.size() && path.compare(path.size() - tail.size(), tail.size(), tail) == 0;
  }

  // Exec requests carry the command's stdin whole, and the platform's JSON
  // file writes their content, so they may be larger than other JSON.
  static size_t body_limit(const std::string& path) {
    bool big = path == "/v1/run" || ends_with(path, "/exec") || ends_with(path, "/files");
    return big ? size_t{64} << 20 : size_t{1} << 20;
  }

  // MHD hands the handler a decoded path, where "a%2Fb" and "a/b" are one; a
  // proxy must pass on what the client sent, so the target is kept as it came.
  void* on_uri(const char* uri) {
    auto* ex = new Exchange;
    ++open;
    ex->req.raw_target = uri;
    return ex;
  }

  void completed(void** state) {
    auto* ex = static_cast<Exchange*>(*state);
    if (!ex) return;
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ex->t0).count();
    if (opts.json_logs) {
      std::fprintf(stderr,
                   "{\"ts_ms\":%lld,\"method\":%s,\"path\":%s,\"status\":%d,\"duration_ms\":%.2f,\"key\":%s,"
                   "\"request_id\":%s}\n",
                   static_cast<long long>(now_ms()), json_escape(ex->req.method).c_str(),
                   json_escape(ex->req.path).c_str(), ex->status, ms, json_escape(ex->key_name).c_str(),
                   json_escape(ex->req.request_id).c_str());
    } else {
      std::fprintf(stderr, "%s %s %d %.1fms key=%s request_id=%s\n", ex->req.method.c_str(), ex->req.path.c_str(),
                   ex->status, ms, ex->key_name.c_str(), ex->req.request_id.c_str());
    }
    delete ex;
    *state = nullptr;
    --open;
  }
};

HttpServer::HttpServer(Api& api, HttpOptions opts) : impl_(std::make_unique<Impl>(api, std::move(opts))) {}

HttpServer::~HttpServer() { stop(); }

uint16_t HttpServer::port() const { return impl_->bound_port; }

int HttpServer::open_requests() const { return impl_->open.load(); }

void HttpServer::start() {
  Impl& s = *impl_;
  s.m = &mhd_api();
  // Binding here rather than in libmicrohttpd gives a clear error for a taken port and supports port 0.
  bool v6 = s.opts.host.find(':') != std::string::npos;
  Fd fd(::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw sys_error("socket", errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss{};
  socklen_t len;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(s.opts.port);
    if (::inet_pton(AF_INET6, s.opts.host.c_str(), &a->sin6_addr) != 1)
      throw Error(Errc::invalid_argument, "bad listen address '" + s.opts.host + "'");
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(s.opts.port);
    if (::inet_pton(AF_INET, s.opts.host.c_str(), &a->sin_addr) != 1)
      throw Error(Errc::invalid_argument, "bad listen address '" + s.opts.host + "'").set_hint("use HOST:PORT, e.g. 0.0.0.0:8000");
    len = sizeof *a;
  }
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
    throw sys_error("cannot listen on " + s.opts.host + ":" + std::to_string(s.opts.port), errno)
        .set_hint("another process holds the port; pick one with --listen");
  if (::listen(fd.get(), 1024) != 0) throw sys_error("listen", errno);
  sockaddr_storage got{};
  socklen_t gl = sizeof got;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&got), &gl);
  s.bound_port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&got)->sin6_port : reinterpret_cast<sockaddr_in*>(&got)->sin_port);

  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC |
                   MHD_ALLOW_UPGRADE;
  if (!s.opts.tls_cert_pem.empty()) flags |= MHD_USE_TLS;
  auto handler = [](void* cls, MHD_Connection* c, const char* url, const char* method, const char*,
                    const char* upload, size_t* upload_size, void** state) -> MHD_Result {
    return static_cast<Impl*>(cls)->on_request(c, url, method, upload, upload_size, state);
  };
  auto done = [](void* cls, MHD_Connection*, void** state, MHD_RequestTerminationCode) {
    static_cast<Impl*>(cls)->completed(state);
  };
  using Done = void (*)(void*, MHD_Connection*, void**, MHD_RequestTerminationCode);
  auto uri = [](void* cls, const char* u, MHD_Connection*) -> void* { return static_cast<Impl*>(cls)->on_uri(u); };
  using Uri = void* (*)(void*, const char*, MHD_Connection*);
  int lfd = fd.get();
  if (s.opts.tls_cert_pem.empty()) {
    s.daemon = s.m->MHD_start_daemon(flags, 0, nullptr, nullptr, +handler, &s, MHD_OPTION_LISTEN_SOCKET, lfd,
                                     MHD_OPTION_CONNECTION_TIMEOUT, s.opts.idle_timeout_s,
                                     MHD_OPTION_CONNECTION_MEMORY_LIMIT, s.opts.header_memory,
                                     MHD_OPTION_CONNECTION_LIMIT, s.opts.max_connections, MHD_OPTION_NOTIFY_COMPLETED,
                                     static_cast<Done>(done), &s, MHD_OPTION_URI_LOG_CALLBACK, static_cast<Uri>(uri), &s,
                                     MHD_OPTION_END);
  } else {
    s.daemon = s.m->MHD_start_daemon(flags, 0, nullptr, nullptr, +handler, &s, MHD_OPTION_LISTEN_SOCKET, lfd,
                                     MHD_OPTION_CONNECTION_TIMEOUT, s.opts.idle_timeout_s,
                                     MHD_OPTION_CONNECTION_MEMORY_LIMIT, s.opts.header_memory,
                                     MHD_OPTION_CONNECTION_LIMIT, s.opts.max_connections, MHD_OPTION_NOTIFY_COMPLETED,
                                     static_cast<Done>(done), &s, MHD_OPTION_URI_LOG_CALLBACK, static_cast<Uri>(uri), &s,
                                     MHD_OPTION_HTTPS_MEM_CERT, s.opts.tls_cert_pem.c_str(),
                                     MHD_OPTION_HTTPS_MEM_KEY, s.opts.tls_key_pem.c_str(), MHD_OPTION_END);
  }
  if (!s.daemon)
    throw Error(Errc::unavailable, "libmicrohttpd could not start the server")
        .set_hint(s.opts.tls_cert_pem.empty() ? "see the messages above" : "check that --tls-cert and --tls-key are a matching PEM pair");
  s.listen_fd = fd.release();
}

void HttpServer::quiesce() {
  Impl& s = *impl_;
  if (!s.daemon) return;
  int fd = s.m->MHD_quiesce_daemon(s.daemon);
  if (fd >= 0) ::close(fd);
  s.listen_fd = -1;
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.daemon) return;
  if (!s.sessions.end_all(std::chrono::seconds(10)))
    std::fprintf(stderr, "sbx serve: a WebSocket session did not end within 10 s of the stop\n");
  s.m->MHD_stop_daemon(s.daemon);
  s.daemon = nullptr;
  if (s.listen_fd >= 0) ::close(s.listen_fd);
  s.listen_fd = -1;
}

}  // namespace sbx::server
