// The manager's Prometheus metrics: counters and histograms kept in memory,
// rendered in the text exposition format (version 0.0.4).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace sbx::server {

/// A fixed-bucket histogram of seconds.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double seconds);
  /// Appends the _bucket, _sum and _count lines for `name` with `labels` ("" or `k="v"`).
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  /// Counts one HTTP request by method and status.
  void request(const std::string& method, int status);
  void create_latency(const std::string& driver, double seconds);
  void exec_latency(const std::string& driver, double seconds);
  /// Counts a failed operation ("create", "exec", "remove", "gc").
  void failure(const std::string& op);
  void gc_removed(size_t n);
  void gc_run();
  /// Counts a create served from the warm pool (`pooled`) or started cold.
  void create_source(const std::string& driver, bool pooled);
  /// The exposition text; `sandboxes` maps {driver, state} to a count taken at scrape time.
  std::string render(const std::map<std::pair<std::string, std::string>, int>& sandboxes, int in_flight) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> failures_;
  std::map<std::string, std::unique_ptr<Histogram>> create_, exec_;
  uint64_t gc_removed_ = 0, gc_runs_ = 0;
  std::map<std::pair<std::string, bool>, uint64_t> create_sources_;
  Histogram& hist(std::map<std::string, std::unique_ptr<Histogram>>& m, const std::string& driver);
};

}  // namespace sbx::server
