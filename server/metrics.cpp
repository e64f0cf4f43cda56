#include "server/metrics.hpp"

#include <fmt/format.h>

namespace sbx::server {

namespace {
// Latency buckets from a warm exec (~1 ms) to a micro-VM boot (~10 s).
const std::vector<double> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}

void Histogram::observe(double seconds) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (seconds <= bounds_[i]) ++counts_[i];
  sum_ += seconds;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  std::lock_guard lock(mu_);
  std::string sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i < bounds_.size(); ++i)
    out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, bounds_[i], counts_[i]);
  out += fmt::format("{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep, count_);
  std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, braces, sum_, name, braces, count_);
}

Metrics::Metrics() = default;

Histogram& Metrics::hist(std::map<std::string, std::unique_ptr<Histogram>>& m, const std::string& driver) {
  auto& h = m[driver];
  if (!h) h = std::make_unique<Histogram>(kBounds);
  return *h;
}

void Metrics::request(const std::string& method, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{method, status}];
}

void Metrics::create_latency(const std::string& driver, double s) {
  std::lock_guard lock(mu_);
  hist(create_, driver).observe(s);
}

void Metrics::exec_latency(const std::string& driver, double s) {
  std::lock_guard lock(mu_);
  hist(exec_, driver).observe(s);
}

void Metrics::failure(const std::string& op) {
  std::lock_guard lock(mu_);
  ++failures_[op];
}

void Metrics::create_source(const std::string& driver, bool pooled) {
  std::lock_guard lock(mu_);
  ++create_sources_[{driver, pooled}];
}

void Metrics::gc_removed(size_t n) {
  std::lock_guard lock(mu_);
  gc_removed_ += n;
}

void Metrics::gc_run() {
  std::lock_guard lock(mu_);
  ++gc_runs_;
}

std::string Metrics::render(const std::map<std::pair<std::string, std::string>, int>& sandboxes, int in_flight) const {
  std::lock_guard lock(mu_);
  std::string out;
  out += "# HELP sbx_sandboxes Sandboxes known to this manager, by driver and state.\n# TYPE sbx_sandboxes gauge\n";
  for (auto& [k, n] : sandboxes)
    out += fmt::format("sbx_sandboxes{{driver=\"{}\",state=\"{}\"}} {}\n", escape(k.first), escape(k.second), n);
  out += "# HELP sbx_http_requests_total HTTP requests answered, by method and status.\n"
         "# TYPE sbx_http_requests_total counter\n";
  for (auto& [k, n] : requests_)
    out += fmt::format("sbx_http_requests_total{{method=\"{}\",code=\"{}\"}} {}\n", escape(k.first), k.second, n);
  out += "# HELP sbx_requests_in_flight Requests being served now.\n# TYPE sbx_requests_in_flight gauge\n";
  out += fmt::format("sbx_requests_in_flight {}\n", in_flight);
  out += "# HELP sbx_create_duration_seconds Time to create a sandbox until its agent answers.\n"
         "# TYPE sbx_create_duration_seconds histogram\n";
  for (auto& [d, h] : create_) h->render(out, "sbx_create_duration_seconds", "driver=\"" + escape(d) + "\"");
  out += "# HELP sbx_exec_duration_seconds Time from exec request to the command's exit.\n"
         "# TYPE sbx_exec_duration_seconds histogram\n";
  for (auto& [d, h] : exec_) h->render(out, "sbx_exec_duration_seconds", "driver=\"" + escape(d) + "\"");
  out += "# HELP sbx_failures_total Failed operations, by operation.\n# TYPE sbx_failures_total counter\n";
  for (auto& [op, n] : failures_) out += fmt::format("sbx_failures_total{{op=\"{}\"}} {}\n", escape(op), n);
  out += "# HELP sbx_gc_runs_total Garbage collection passes.\n# TYPE sbx_gc_runs_total counter\n";
  out += fmt::format("sbx_gc_runs_total {}\n", gc_runs_);
  out += "# HELP sbx_gc_removed_total Sandboxes and orphans removed by garbage collection.\n"
         "# TYPE sbx_gc_removed_total counter\n";
  out += fmt::format("sbx_gc_removed_total {}\n", gc_removed_);
  out += "# HELP sbx_creates_total Sandboxes created, by driver and source (pool: claimed from the warm pool).\n"
         "# TYPE sbx_creates_total counter\n";
  for (auto& [k, n] : create_sources_)
    out += fmt::format("sbx_creates_total{{driver=\"{}\",source=\"{}\"}} {}\n", escape(k.first), k.second ? "pool" : "cold", n);
  return out;
}

}  // namespace sbx::server
