// Snapshots of sandboxes' files (`sbx snapshot`), kept under the state root
// so they outlive the manager and the host's reboots:
//   <state>/snapshots/layers/<sha256>.img  a writable layer's disk image, content-addressed
//   <state>/snapshots/refs/<name>.json     a name for one, with the spec it was taken under
//   <state>/snapshots/memory/<name>/       a memory snapshot's checkpoint (runsc's image files), one per name
// Two snapshots with the same files share one layer; a layer goes with its last name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/spec.hpp"

namespace sbx {

struct SnapshotInfo {
  std::string name;
  std::string digest;         ///< "sha256:<hex>" of the layer's data extents and their offsets
  std::string source;         ///< id of the sandbox it was taken from
  SandboxSpec spec;           ///< that sandbox's spec (driver, image, limits, ...)
  uint32_t uid_base = 0;      ///< that sandbox's first host uid (its files' owners)
  int64_t created_ms = 0;
  uint64_t bytes = 0;         ///< data the layer holds (its holes excluded)
  uint64_t copy_ms = 0;       ///< how long the sandbox was paused for the copy
  bool memory = false;        ///< its memory and processes are saved too (checkpoint under memory/<name>/)
  uint64_t memory_bytes = 0;  ///< size of that checkpoint
};

void to_json(nlohmann::json& j, const SnapshotInfo& s);
void from_json(const nlohmann::json& j, SnapshotInfo& s);

class SnapshotStore {
 public:
  explicit SnapshotStore(const std::string& state_root);
  /// A fresh path for a layer copy in progress, on the same filesystem as the layers.
  std::string temp_path() const;
  /// Files the copy at `temp` under its content address and names it info.name
  /// (replacing a snapshot of that name). Fills digest and bytes. For a memory
  /// snapshot, `memory` is the directory of its checkpoint, moved under the name.
  SnapshotInfo add(const std::string& temp, SnapshotInfo info, const std::string& memory = "");
  std::vector<SnapshotInfo> list() const;
  /// By name, or by digest ("sha256:…", or an unambiguous prefix of its hex).
  std::optional<SnapshotInfo> find(const std::string& ref) const;
  /// find(), or not_found with a hint.
  SnapshotInfo get(const std::string& ref) const;
  /// The layer image of a snapshot.
  std::string layer_path(const SnapshotInfo& s) const;
  /// The checkpoint directory of a memory snapshot.
  std::string memory_path(const SnapshotInfo& s) const;
  /// Removes a name; its layer too when no other name uses it.
  void remove(const std::string& name);

 private:
  std::string root_;
};

/// The copies in progress under state_root's snapshots/tmp/ that a killed snapshot left
/// (a layer image, and a NAME.mem directory for a memory snapshot):
/// those not written to for `grace_ms` (a live copy writes all the time, and is filed
/// the moment it ends). Reads only: gc must work on a full or read-only state root.
std::vector<std::string> stale_snapshot_copies(const std::string& state_root, int64_t now_ms, int64_t grace_ms);

/// What a sandbox started on `snap`'s files runs with (`create --from`, and a
/// snapshot's warm pool): the snapshot's driver and image (its files sit on top
/// of that image), a layer of its disk size, and the snapshot by the name its
/// files go by (a layer is content-addressed: its digest; a checkpoint: its name).
void start_on_snapshot(SandboxSpec& spec, const SnapshotInfo& snap);

/// Throws invalid_argument unless `name` can name a snapshot (the sandbox name rule).
void check_snapshot_name(const std::string& name);

}  // namespace sbx
