// The registry of sandboxes: one directory per sandbox under the state root,
// holding its record (written atomically) and whatever its driver keeps there.
// Several sbx processes (CLI calls, sbx serve, gc) use it at once: creation
// takes a lock on the root, updates of one sandbox a lock on that sandbox.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/spec.hpp"

namespace sbx {

class Registry {
 public:
  /// Opens (creating if needed) the state root; throws with a hint when it is not writable.
  explicit Registry(std::string root, uint32_t uid_base = 1u << 30);

  const std::string& root() const { return root_; }
  /// The private directory of a sandbox.
  std::string dir(const std::string& id) const;

  /// Allocates a new id and uid range, creates its directory and saves the
  /// record in state "creating". Safe against concurrent creators, who also
  /// never get the same name: a name its owner already uses throws already_exists.
  /// creating, if given, receives the sandbox's exclusive lock, taken before
  /// the record exists: while its creator lives nobody else holds it, so gc
  /// tells a creation in progress from one whose creator died (Registry::abandoned).
  /// one_shot: the client a one-shot sandbox lives for, in its first record.
  SandboxRecord create(const SandboxSpec& spec, Fd* creating = nullptr, const OneShotClient& one_shot = {});
  /// Saves a record atomically (readers see the old or the new one).
  void save(const SandboxRecord& rec);
  /// Saves a record that now carries a name (a pool claim), after checking
  /// under the same lock as create that no other sandbox of its owner has it.
  void save_named(const SandboxRecord& rec);
  /// Throws already_exists when another sandbox of spec's owner has spec's name
  /// (no lock: a quick refusal before work that create or save_named would redo).
  void check_name_free(const SandboxSpec& spec) const;
  /// The record of id, or nullopt. An id prefix that names exactly one sandbox also works.
  std::optional<SandboxRecord> find(const std::string& id_or_prefix) const;
  /// A record is kept for this full id (read by nobody: one stat, where find
  /// parses the record, for a caller that reads it again under the lock).
  bool has(const std::string& id) const;
  /// Like find, but throws not_found with a hint.
  SandboxRecord get(const std::string& id_or_prefix) const;
  /// Every readable record, oldest first.
  std::vector<SandboxRecord> list() const;
  /// Directories under the root that hold no readable record (crashed creations, torn records).
  std::vector<std::string> stray_dirs() const;
  /// Deletes a sandbox's directory (after its driver freed everything else).
  void remove(const std::string& id);
  /// Directories being removed, or whose removal was cut short (their remover died).
  std::vector<std::string> unfinished_removals() const;
  /// How a removal (one of unfinished_removals) ended, waited for until a deadline.
  enum class RemovalEnd { gone, abandoned, running };
  /// Waits, until `deadline`, for the remover that holds the lock inside `path`
  /// to let go: gone (it finished), abandoned (it died: what it left is
  /// finish_removal's) or running (it still holds the lock).
  RemovalEnd await_removal(const std::string& path, std::chrono::steady_clock::time_point deadline) const;
  /// Deletes what a dead remover left at `path`, holding its lock.
  void finish_removal(const std::string& path) const;
  /// Takes the per-sandbox lock (held while the returned Fd lives): shared for
  /// users of a sandbox (exec, cp), exclusive for whoever destroys it.
  Fd lock(const std::string& id, bool exclusive = true) const;
  /// lock(), or an empty Fd when the sandbox has no record any more, also when
  /// it went while this waited (a one-shot's teardown, another rm).
  Fd lock_if_present(const std::string& id, bool exclusive = true) const;
  /// The exclusive lock if nobody holds the sandbox's lock now, else an empty
  /// Fd (also when the sandbox is gone): a warm-pool claim skips busy ones.
  Fd try_lock(const std::string& id) const;
  /// True when the sandbox's directory has a lock file that nobody holds: a
  /// half-made sandbox whose creator is gone (it held the lock from the start).
  bool abandoned(const std::string& id) const;
  /// Marks the sandbox as used now (cheap: one utimensat, no record rewrite).
  void touch(const std::string& id) const;
  /// When the sandbox was last used, ms since the epoch (0 if never).
  int64_t last_active_ms(const std::string& id) const;

 private:
  /// e, with a hint saying what to do when it is the state root's filesystem running full.
  Error if_full(Error e) const;
  std::string root_;
  std::string sandboxes_;
  uint32_t uid_base_;
};

/// Finds what a user's word `ref` means among `recs`: the sandbox with that
/// exact id, else the one of that name among the sandboxes of `owner` (the
/// sbx.owner label's value, "" for sandboxes without one; nullopt: every
/// owner's, as an admin sees them), else the one whose id begins with `ref`
/// (5 or more characters). nullopt when none; invalid_argument when a name or
/// prefix fits several. Pass only the records the caller may see.
std::optional<SandboxRecord> find_sandbox(const std::vector<SandboxRecord>& recs, const std::string& ref,
                                          const std::optional<std::string>& owner);
/// The same on this host's registry (an exact id is found without listing it).
std::optional<SandboxRecord> find_sandbox(const Registry& reg, const std::string& ref,
                                          const std::optional<std::string>& owner);
/// The sandbox called `name` in this host's registry, among those of `owner` as in find_sandbox.
std::optional<SandboxRecord> find_named(const Registry& reg, const std::string& name,
                                        const std::optional<std::string>& owner);
/// Like find_sandbox, but throws not_found with a hint.
SandboxRecord resolve_sandbox(const std::vector<SandboxRecord>& recs, const std::string& ref,
                              const std::optional<std::string>& owner);
SandboxRecord resolve_sandbox(const Registry& reg, const std::string& ref, const std::optional<std::string>& owner);

}  // namespace sbx
