// LocalBackend's snapshots and forks (`sbx snapshot`, `sbx create --from`,
// `sbx fork`): a snapshot is a copy of the sandbox's writable layer (its disk
// image, core/snapshots.hpp), taken while the sandbox is paused and after a
// sync(2), so every write that returned before the snapshot is in it. A memory
// snapshot (`--memory`, runsc) adds the sandbox's memory and processes, saved by
// the driver at the moment it copies the layer (docs/snapshots.md).
#include <unistd.h>

#include <chrono>

#include "core/fault.hpp"
#include "core/fsutil.hpp"
#include "core/local_backend.hpp"

namespace sbx {

namespace {
constexpr int kPauseTries = 3;
}

void LocalBackend::while_paused(SandboxRecord& rec, const std::function<void()>& copy) {
  bool paused_here = false;
  auto resume_after = [&] {
    if (paused_here) rec = resume(rec.id);
  };
  try {
    for (int attempt = 0;; ++attempt) {
      if (rec.state != SandboxState::paused) {
        rec = pause(rec.id);
        paused_here = true;
      }
      // Shared: an exec that arrives now waits in its resume (exclusive) until the copy is done.
      Fd guard = registry_.lock(rec.id, false);
      rec = registry_.get(rec.id);
      if (rec.state == SandboxState::paused) {
        // The frozen processes' writes may still be dirty pages of the layer's
        // filesystem (mounted in the sandbox's own mount namespace, where no fd of
        // ours reaches): sync(2) writes back every filesystem's.
        ::sync();
        copy();
        fault::point("snapshot.copied");
        break;
      }
      if (attempt + 1 == kPauseTries)
        throw Error(Errc::conflict, "sandbox " + rec.id + " kept being resumed; no consistent copy was possible");
    }
  } catch (...) {
    try {
      resume_after();
    } catch (const Error&) {
      // The copy's error is the one to report; the sandbox stays paused (`sbx resume` it).
    }
    throw;
  }
  resume_after();
}

void LocalBackend::checkpoint(SandboxRecord& rec, Driver& driver, const std::string& memory, const std::string& layer) {
  Fd guard = registry_.lock(rec.id, true);
  rec = registry_.get(rec.id);
  if (rec.state != SandboxState::running)
    throw Error(Errc::conflict, "cannot save sandbox " + rec.id + "'s memory: it is " + std::string(state_name(rec.state)))
        .set_hint(rec.state == SandboxState::paused ? "`sbx resume " + rec.id + "` first" : "start it first");
  make_dirs(memory, 0700);
  try {
    driver.checkpoint(rec, registry_.dir(rec.id), memory, layer);
  } catch (const Error& e) {
    // runsc ends the sandbox when its checkpoint fails: the record must say so, and why.
    if (!driver.alive(rec)) {
      rec.state = SandboxState::dead;
      rec.error = std::string("lost saving its memory: ") + e.what();
    }
    registry_.save(rec);
    throw;
  }
  registry_.save(rec);
}

SnapshotInfo LocalBackend::snapshot(const std::string& id, const std::string& name, bool memory) {
  SandboxRecord rec = get(id);
  SnapshotInfo info;
  info.name = name.empty() ? rec.id + "-" + std::to_string(now_ms()) : name;
  check_snapshot_name(info.name);
  if (rec.state != SandboxState::running && rec.state != SandboxState::paused)
    throw Error(Errc::conflict, "cannot snapshot sandbox " + rec.id + ": it is " + std::string(state_name(rec.state)));
  auto driver = driver_for(rec);
  SnapshotStore store(cfg_.state_dir);
  std::string tmp = store.temp_path();
  std::string mem = memory ? tmp.substr(0, tmp.size() - 4) + ".mem" : "";
  auto t0 = std::chrono::steady_clock::now();
  try {
    if (memory) {
      with_context("saving sandbox " + rec.id + "'s memory", [&] { checkpoint(rec, *driver, mem, tmp); });
    } else {
      while_paused(rec, [&] {
        with_context("copying sandbox " + rec.id + "'s files", [&] { driver->copy_layer(rec, registry_.dir(rec.id), tmp); });
      });
    }
  } catch (...) {
    ::unlink(tmp.c_str());
    try {
      if (memory) remove_tree(mem);
    } catch (const Error&) {
    }
    throw;
  }
  info.copy_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
  info.source = rec.id;
  info.spec = rec.spec;
  info.spec.name.clear();  // a sandbox's name is its own; a fork gets none unless asked
  info.uid_base = rec.uid_base;
  info.created_ms = now_ms();
  return store.add(tmp, info, mem);
}

std::vector<SnapshotInfo> LocalBackend::snapshots() { return SnapshotStore(cfg_.state_dir).list(); }

void LocalBackend::remove_snapshot(const std::string& name) { SnapshotStore(cfg_.state_dir).remove(name); }

SnapshotInfo LocalBackend::apply_snapshot(SandboxSpec& spec) {
  SnapshotInfo snap = SnapshotStore(cfg_.state_dir).get(spec.from_snapshot);
  if (!spec.driver.empty() && spec.driver != snap.spec.driver)
    throw Error(Errc::invalid_argument, "snapshot " + snap.name + " was taken on the " + snap.spec.driver +
                                            " driver, not " + spec.driver)
        .set_hint("leave --driver out: a sandbox from a snapshot runs on the snapshot's driver");
  start_on_snapshot(spec, snap);
  return snap;
}

void LocalBackend::seed_from_snapshot(SandboxRecord& rec, Driver& driver, const std::string& dir) {
  SnapshotStore store(cfg_.state_dir);
  SnapshotInfo snap = store.get(rec.spec.from_snapshot);
  with_context("copying snapshot " + snap.name + " into sandbox " + rec.id,
               [&] { driver.seed_layer(rec, dir, store.layer_path(snap), snap.uid_base); });
  if (snap.memory) driver.seed_memory(rec, dir, store.memory_path(snap));
}

SandboxRecord LocalBackend::fork(const std::string& id, const Progress& progress, bool memory) {
  SandboxRecord src = get(id);
  std::string name = "fork-" + new_sandbox_id();
  SnapshotInfo snap = snapshot(src.id, name, memory);
  SandboxSpec spec = snap.spec;
  spec.from_snapshot = snap.name;
  try {
    SandboxRecord rec = create(spec, progress);
    remove_snapshot(name);  // the fork has its own copy; the layer stays if another name shares it
    return rec;
  } catch (...) {
    try {
      remove_snapshot(name);
    } catch (const Error&) {
    }
    throw;
  }
}

}  // namespace sbx
