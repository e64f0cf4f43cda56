// Pruning the deno driver's per-host cache (runtime.hpp). Every new agent
// or runtime version makes its own entries (a 30 MB Pyodide snapshot, the
// staged agent, its transpiled modules and V8 code caches: ~45 MB a version)
// and nothing else ever removes the old ones, so `sbx gc` drops what nothing
// has used for a week and no running sandbox refers to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sbx::deno {

/// How long an entry stays unused before gc drops it. A week, not "not this
/// build's": two installs (a package and a build tree) share one cache, and
/// each would otherwise drop the other's on every gc.
constexpr int64_t kCacheUnusedS = 7 * 24 * 3600;

struct StaleCacheEntry {
  std::string path;
  std::string reason;
};

/// The entries of `cache` that gc may drop at `now_s`: a family (agent-H and
/// the emit-H-*, v8-H-* made from it) whose agent was last staged over a week
/// ago and that no running process names; a snapshot no process names and
/// none used for a week; and entries left by older builds' naming or by a
/// make that was killed, once a week old.
std::vector<StaleCacheEntry> stale_cache_entries(const std::string& cache, int64_t now_s);

/// Removes one entry, after judging it again under the lock its fast path
/// takes, so a create that stages it meanwhile keeps it. False if it was kept.
bool drop_cache_entry(const std::string& cache, const std::string& path, int64_t now_s);

/// Marks an entry used now (its mtime), under the shared lock `lock`:
/// stage_agent's and ensure_snapshot's fast path. False if it is not there.
bool use_cache_entry(const std::string& path, const std::string& lock);

/// The family an emit or code cache made from the staged agent `agent_dir`
/// belongs to: its hash, "" if `agent_dir` is not a staged agent-H.
std::string cache_family(const std::string& agent_dir);

}  // namespace sbx::deno
