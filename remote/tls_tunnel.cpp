#include "remote/tls_tunnel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <thread>

#include "core/error.hpp"
#include "core/lazy_libs.hpp"

namespace sbx::remote_ws {

namespace {

constexpr long kConnectTimeoutMs = 10'000;
constexpr size_t kBuffer = 256 * 1024;

// One direction's bytes in flight.
struct Pending {
  std::string data;
  size_t at = 0;
  bool empty() const { return at == data.size(); }
  bool room() const { return data.size() - at < kBuffer; }
  std::string_view rest() const { return std::string_view(data).substr(at); }
  void consumed(size_t n) {
    at += n;
    if (at == data.size()) data.clear(), at = 0;
  }
};

// Moves bytes between the socketpair end `local` and the TLS connection until
// either side is done. Owns the curl handle from here on (curl handles are one
// thread's at a time).
class Relay {
 public:
  Relay(CURL* h, curl_socket_t sock, Fd local) : h_(h), sock_(sock), local_(std::move(local)) {}
  ~Relay() { curl_api().curl_easy_cleanup(h_); }

  void run() {
    const CurlApi& cu = curl_api();
    std::string buf(64 * 1024, '\0');
    for (;;) {
      // Decrypted bytes can wait inside the TLS library where poll cannot see
      // them, so after a full read the next round does not sleep.
      bool maybe_more = false;
      if (!tls_eof_ && down_.room()) {
        size_t n = 0;
        CURLcode rc = cu.curl_easy_recv(h_, buf.data(), buf.size(), &n);
        if (rc == CURLE_OK && n == 0) tls_eof_ = true;
        else if (rc == CURLE_OK) down_.data.append(buf.data(), n), maybe_more = n == buf.size();
        else if (rc != CURLE_AGAIN) return;
      }
      if (!down_.empty()) {
        ssize_t w = ::send(local_.get(), down_.rest().data(), down_.rest().size(), MSG_NOSIGNAL);
        if (w > 0) down_.consumed(static_cast<size_t>(w));
        else if (w < 0 && errno != EAGAIN && errno != EINTR) return;  // the session is gone
      }
      if (tls_eof_ && down_.empty() && !local_half_closed_) {
        ::shutdown(local_.get(), SHUT_WR);
        local_half_closed_ = true;
      }
      if (!local_eof_ && up_.room()) {
        ssize_t r = ::read(local_.get(), buf.data(), buf.size());
        if (r > 0) up_.data.append(buf.data(), static_cast<size_t>(r));
        else if (r == 0) local_eof_ = true;
        else if (errno != EAGAIN && errno != EINTR) return;
      }
      if (!up_.empty()) {
        size_t n = 0;
        CURLcode rc = cu.curl_easy_send(h_, up_.rest().data(), up_.rest().size(), &n);
        if (rc == CURLE_OK) up_.consumed(n);
        else if (rc != CURLE_AGAIN) return;
      }
      if (local_eof_ && up_.empty()) return;  // the WebSocket closed its end: the session is over
      if (tls_eof_ && down_.empty() && local_eof_) return;
      if (!maybe_more) wait();
    }
  }

 private:
  void wait() {
    pollfd p[2] = {{sock_, 0, 0}, {local_.get(), 0, 0}};
    if (!tls_eof_ && down_.room()) p[0].events |= POLLIN;
    if (!up_.empty()) p[0].events |= POLLOUT;
    if (!local_eof_ && up_.room()) p[1].events |= POLLIN;
    if (!down_.empty()) p[1].events |= POLLOUT;
    ::poll(p, 2, 1000);
  }

  CURL* h_;
  curl_socket_t sock_;
  Fd local_;
  Pending up_, down_;
  bool tls_eof_ = false, local_eof_ = false, local_half_closed_ = false;
};

}  // namespace

Fd tls_tunnel(const std::string& host, const std::string& port, const std::string& shown) {
  const CurlApi& cu = curl_api();
  CURL* h = cu.curl_easy_init();
  if (!h) throw Error(Errc::internal, "curl_easy_init failed");
  bool literal_v6 = host.find(':') != std::string::npos;
  std::string url = "https://" + (literal_v6 ? "[" + host + "]" : host) + ":" + port + "/";
  char errbuf[CURL_ERROR_SIZE] = {};
  cu.curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  cu.curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
  cu.curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  cu.curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  cu.curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, kConnectTimeoutMs);
  cu.curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);  // keystrokes go out at once
  cu.curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  if (const char* ca = std::getenv("SBX_CA_FILE"); ca && *ca) cu.curl_easy_setopt(h, CURLOPT_CAINFO, ca);
  CURLcode rc = cu.curl_easy_perform(h);
  curl_socket_t sock = CURL_SOCKET_BAD;
  if (rc == CURLE_OK) rc = cu.curl_easy_getinfo(h, CURLINFO_ACTIVESOCKET, &sock);
  if (rc != CURLE_OK || sock == CURL_SOCKET_BAD) {
    std::string why = *errbuf ? errbuf : cu.curl_easy_strerror(rc);
    bool tls = rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_SSL_CACERT_BADFILE;
    cu.curl_easy_cleanup(h);
    Error e(Errc::unavailable, "manager " + shown + " unreachable: " + why);
    if (tls) e.set_hint("for a manager with a self-signed certificate, set SBX_CA_FILE to its CA file");
    else e.set_hint("check SANDBOX_MANAGER_URL and that sbx serve runs there");
    throw e;
  }
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
    cu.curl_easy_cleanup(h);
    throw sys_error("socketpair", errno);
  }
  Fd mine(sp[0]), theirs(sp[1]);
  ::fcntl(theirs.get(), F_SETFL, ::fcntl(theirs.get(), F_GETFL) | O_NONBLOCK);
  std::thread([relay = std::make_shared<Relay>(h, sock, std::move(theirs))] { relay->run(); }).detach();
  return mine;
}

}  // namespace sbx::remote_ws
