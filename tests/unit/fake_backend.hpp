// An in-memory sbx::Backend, so what sits above the interface (the manager's
// API) is tested without sandboxes: records live in a map, files are bytes per
// absolute path, and an exec answers from a script the test sets. An exec can
// be held until the test releases it, which is how a test keeps exec slots
// busy from other threads. Every call is recorded for the test to inspect.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <sys/socket.h>

#include "core/backend.hpp"
#include "core/error.hpp"

namespace sbx_test {

/// One exec the fake was asked to run.
struct FakeExec {
  std::string id;         ///< the sandbox
  sbx::ExecRequest req;   ///< as the backend received it
};

/// One entry a put() delivered, named by its absolute path in the sandbox.
struct FakePut {
  std::string path;     ///< target joined with the entry's relative path
  std::string type;     ///< file | dir | symlink
  std::string content;  ///< a file's bytes
};

class FakeBackend : public sbx::Backend {
 public:
  /// Answers one exec: may write output through io, return any result, or throw.
  using Script = std::function<sbx::ExecResult(const std::string& id, const sbx::ExecRequest&, sbx::ExecIO&)>;

  std::string where() const override { return "fake"; }

  sbx::SandboxRecord create(const sbx::SandboxSpec& spec, const sbx::Progress& /*progress*/) override {
    sbx::SandboxRecord rec;
    rec.id = sbx::new_sandbox_id();
    rec.spec = spec;
    rec.state = sbx::SandboxState::running;
    rec.created_ms = rec.last_active_ms = sbx::now_ms();
    add(rec);
    std::lock_guard lock(mu_);
    created_.push_back(spec);
    return rec;
  }

  sbx::ExecResult exec(const std::string& id, const sbx::ExecRequest& req, sbx::ExecIO& io) override {
    Script script;
    {
      std::unique_lock lock(mu_);
      if (!records_.count(id)) throw missing(id);
      execs_.push_back({id, req});
      if (held_ids_.count(id)) {
        ++held_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return !held_ids_.count(id); });
        --held_;
      }
      script = script_;
    }
    // Outside the lock: a script may take its time or throw.
    return script ? script(id, req, io) : sbx::ExecResult{};
  }

  sbx::OneShotResult run_once(const sbx::SandboxSpec& spec, const sbx::ExecRequest& req, sbx::ExecIO& io) override {
    sbx::SandboxRecord rec = create(spec, nullptr);
    sbx::OneShotResult out;
    out.spec = rec.spec;
    {
      std::lock_guard lock(mu_);
      one_shots_.push_back(rec.spec);
    }
    try {
      out.exec = exec(rec.id, req, io);
    } catch (...) {
      remove(rec.id);
      throw;
    }
    remove(rec.id);
    return out;
  }

  std::vector<sbx::SandboxRecord> list() override {
    std::lock_guard lock(mu_);
    std::vector<sbx::SandboxRecord> out;
    for (auto& [id, rec] : records_) out.push_back(rec);
    return out;
  }

  sbx::SandboxRecord get(const std::string& id) override {
    std::lock_guard lock(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) throw missing(id);
    return it->second;
  }

  void remove(const std::string& id) override {
    std::lock_guard lock(mu_);
    if (!records_.erase(id)) throw missing(id);
    files_.erase(id);
  }

  sbx::GcReport gc(bool /*dry_run*/) override { return {}; }

  std::vector<sbx::ProcessInfo> processes(const std::string& id) override {
    std::lock_guard lock(mu_);
    if (!records_.count(id)) throw missing(id);
    return procs_[id];
  }

  std::optional<sbx::ExecResult> attach(const std::string& id, int pid, const sbx::AttachOptions& opts,
                                        sbx::ExecIO& io) override {
    AttachScript script;
    {
      std::lock_guard lock(mu_);
      if (!records_.count(id)) throw missing(id);
      script = attach_script_;
    }
    if (!script) throw sbx::Error(sbx::Errc::not_found, "no background process (fake backend)");
    return script(id, pid, opts, io);
  }

  void signal_process(const std::string& id, int pid, int sig) override {
    std::lock_guard lock(mu_);
    if (!records_.count(id)) throw missing(id);
    signals_.emplace_back(id, pid, sig);
  }

  /// One end of a socketpair whose other end the port handler serves on a thread of its own.
  sbx::Fd open_port(const std::string& id, uint16_t port) override {
    std::function<void(sbx::Fd)> handler;
    {
      std::lock_guard lock(mu_);
      if (!records_.count(id)) throw missing(id);
      handler = port_handler_;
    }
    if (!handler)
      throw sbx::Error(sbx::Errc::unavailable, "nothing listens on 127.0.0.1:" + std::to_string(port) + " in sandbox " + id);
    int sp[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) throw sbx::sys_error("socketpair", errno);
    std::thread([handler, fd = sbx::Fd(sp[1])]() mutable { handler(std::move(fd)); }).detach();
    return sbx::Fd(sp[0]);
  }

  std::optional<sbx::FileEntry> stat(const std::string& id, const std::string& path) override {
    std::lock_guard lock(mu_);
    if (!records_.count(id)) throw missing(id);
    auto& tree = files_[id];
    auto it = tree.find(path);
    if (it == tree.end()) return std::nullopt;
    return entry_of(it->second);
  }

  uint64_t put(const std::string& id, const std::string& target, sbx::EntrySource& source,
               uint64_t /*max_bytes*/) override {
    uint64_t bytes = 0;
    sbx::FileEntry e;
    while (source.next(e)) {
      FakePut p{e.path.empty() ? target : target + "/" + e.path, e.type, ""};
      if (e.type == "file") {
        for (std::string chunk; source.read(chunk); chunk.clear()) p.content += chunk;
      }
      bytes += p.content.size();
      std::lock_guard lock(mu_);
      if (!records_.count(id)) throw missing(id);
      files_[id][p.path] = p;
      puts_.push_back(p);
    }
    return bytes;
  }

  uint64_t get_files(const std::string& id, const std::string& path, sbx::EntrySink& sink,
                     uint64_t /*max_bytes*/) override {
    std::map<std::string, FakePut> tree;
    {
      std::lock_guard lock(mu_);
      if (!records_.count(id)) throw missing(id);
      tree = files_[id];
    }
    auto root = tree.find(path);
    if (root == tree.end()) throw sbx::Error(sbx::Errc::not_found, path + " does not exist");
    uint64_t bytes = 0;
    // The root first, then what lies below it (a map keeps them in path order).
    for (auto it = root; it != tree.end(); ++it) {
      bool below = it == root || it->first.rfind(path + "/", 0) == 0;
      if (!below) continue;
      sbx::FileEntry e = entry_of(it->second);
      e.path = it == root ? "" : it->first.substr(path.size() + 1);
      bool sent = false;
      std::string content = it->second.content;
      sink.put(e, [&](std::string& chunk) {
        if (sent || content.empty()) return false;
        sent = true;
        chunk = content;
        return true;
      });
      bytes += content.size();
    }
    sink.close();
    return bytes;
  }

  // ---- what tests set up

  using AttachScript = std::function<std::optional<sbx::ExecResult>(const std::string& id, int pid,
                                                                    const sbx::AttachOptions&, sbx::ExecIO&)>;
  /// The background processes processes() lists for a sandbox.
  void set_processes(const std::string& id, std::vector<sbx::ProcessInfo> procs) {
    std::lock_guard lock(mu_);
    procs_[id] = std::move(procs);
  }
  /// How attach answers (nullptr: not_found).
  void set_attach(AttachScript s) {
    std::lock_guard lock(mu_);
    attach_script_ = std::move(s);
  }
  /// What serves open_port's connections (nullptr: nothing listens).
  void set_port_handler(std::function<void(sbx::Fd)> h) {
    std::lock_guard lock(mu_);
    port_handler_ = std::move(h);
  }

  /// Puts a record in place as is (a dead or pooled sandbox, another owner's);
  /// its workdir and "/" exist as directories.
  void add(const sbx::SandboxRecord& rec) {
    std::lock_guard lock(mu_);
    records_[rec.id] = rec;
    files_[rec.id]["/"] = FakePut{"/", "dir", ""};
    files_[rec.id][rec.spec.workdir] = FakePut{rec.spec.workdir, "dir", ""};
  }
  /// Places a file in a sandbox without recording a put.
  void write_file(const std::string& id, const std::string& path, const std::string& content) {
    std::lock_guard lock(mu_);
    files_[id][path] = FakePut{path, "file", content};
  }
  /// How later execs answer (nullptr: exit 0, no output).
  void set_script(Script s) {
    std::lock_guard lock(mu_);
    script_ = std::move(s);
  }
  /// Execs on `id` block from now on until release().
  void hold(const std::string& id) {
    std::lock_guard lock(mu_);
    held_ids_.insert(id);
  }
  /// Lets every held exec go on.
  void release() {
    std::lock_guard lock(mu_);
    held_ids_.clear();
    cv_.notify_all();
  }
  /// Waits (at most 10 s) until `n` execs are blocked in hold; false on timeout.
  bool wait_held(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return held_ == n; });
  }

  // ---- what tests inspect

  std::vector<FakeExec> execs() {
    std::lock_guard lock(mu_);
    return execs_;
  }
  std::vector<FakePut> puts() {
    std::lock_guard lock(mu_);
    return puts_;
  }
  /// The specs create() was given, in order.
  std::vector<sbx::SandboxSpec> created() {
    std::lock_guard lock(mu_);
    return created_;
  }
  /// The specs of run_once() calls, in order.
  std::vector<sbx::SandboxSpec> one_shots() {
    std::lock_guard lock(mu_);
    return one_shots_;
  }
  /// The signal_process calls: (sandbox, pid, signal).
  std::vector<std::tuple<std::string, int, int>> signals() {
    std::lock_guard lock(mu_);
    return signals_;
  }
  bool has(const std::string& id) {
    std::lock_guard lock(mu_);
    return records_.count(id) > 0;
  }

 private:
  static sbx::Error missing(const std::string& id) {
    return sbx::Error(sbx::Errc::not_found, "no sandbox " + id + " (fake backend)");
  }
  static sbx::FileEntry entry_of(const FakePut& p) {
    return sbx::FileEntry{"", p.type, p.type == "dir" ? 0755u : 0644u, p.content.size(), 0, ""};
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, sbx::SandboxRecord> records_;
  std::map<std::string, std::map<std::string, FakePut>> files_;  ///< sandbox -> absolute path -> entry
  std::vector<FakeExec> execs_;
  std::vector<FakePut> puts_;
  std::vector<sbx::SandboxSpec> created_, one_shots_;
  Script script_;
  AttachScript attach_script_;
  std::function<void(sbx::Fd)> port_handler_;
  std::map<std::string, std::vector<sbx::ProcessInfo>> procs_;
  std::vector<std::tuple<std::string, int, int>> signals_;
  std::set<std::string> held_ids_;
  int held_ = 0;
};

}  // namespace sbx_test
