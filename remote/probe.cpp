#include "remote/probe.hpp"

#include <chrono>
#include <cstdlib>

#include "core/error.hpp"
#include "core/json_number.hpp"
#include "core/lazy_libs.hpp"

namespace sbx {

ManagerProbe probe_manager(const Config& cfg, const std::string& url) {
  ManagerProbe p;
  p.url = url;
  const CurlApi& c = curl_api();
  CURL* h = c.curl_easy_init();
  if (!h) throw Error(Errc::internal, "curl_easy_init failed");
  std::string body, full = url + "/healthz";
  curl_slist* headers = nullptr;
  std::string key_header = "X-API-Key: " + cfg.api_key;
  headers = c.curl_slist_append(headers, key_header.c_str());
  c.curl_easy_setopt(h, CURLOPT_URL, full.c_str());
  c.curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  c.curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
  c.curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 3000L);
  c.curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  if (const char* ca = std::getenv("SBX_CA_FILE"); ca && *ca) c.curl_easy_setopt(h, CURLOPT_CAINFO, ca);
  c.curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
  c.curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, +[](char* d, size_t s, size_t n, void* out) -> size_t {
    static_cast<std::string*>(out)->append(d, s * n);
    return s * n;
  });
  int64_t sent = now_ms();
  auto t0 = std::chrono::steady_clock::now();
  CURLcode rc = c.curl_easy_perform(h);
  p.rtt_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (rc == CURLE_OK) {
    p.reachable = true;
    c.curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &p.http_status);
    p.tls = url.rfind("https://", 0) == 0;
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (!j.is_discarded() && j.is_object()) {
      p.health = j;
      if (auto t = j.contains("time_ms") ? json_number<int64_t>(j["time_ms"]) : std::nullopt)
        p.clock_skew_ms = *t - (sent + static_cast<int64_t>(p.rtt_ms / 2));
    }
  } else {
    p.error = c.curl_easy_strerror(rc);
  }
  c.curl_slist_free_all(headers);
  c.curl_easy_cleanup(h);
  return p;
}

}  // namespace sbx
