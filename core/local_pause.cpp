// LocalBackend's pause and resume (`sbx pause`, `sbx resume`): the driver
// stops or continues every process of a sandbox, and the record says so.
// Whatever needs the sandbox's agent (exec, cp, ps, port-forward) resumes a
// paused sandbox first, since a frozen agent would answer nothing, unless the
// config says `on_paused: refuse` (then it is a conflict: 409 through the API).
#include "core/fault.hpp"
#include "core/local_backend.hpp"

namespace sbx {

namespace {
// Only a sandbox whose agent is there can be paused or resumed.
void check_live(const SandboxRecord& rec, Driver& driver, const char* verb) {
  bool live = (rec.state == SandboxState::running || rec.state == SandboxState::paused) && driver.alive(rec);
  if (!live)
    throw Error(Errc::conflict, std::string("cannot ") + verb + " sandbox " + rec.id + ": it is " +
                                    (rec.state == SandboxState::running || rec.state == SandboxState::paused
                                         ? std::string("dead")
                                         : std::string(state_name(rec.state))))
        .set_hint("`sbx ls` shows its state");
}
}  // namespace

SandboxRecord LocalBackend::set_paused(const std::string& id, bool paused) {
  Fd guard = registry_.lock(registry_.get(id).id, true);
  SandboxRecord rec = registry_.get(id);
  auto driver = driver_for(rec);
  check_live(rec, *driver, paused ? "pause" : "resume");
  SandboxState want = paused ? SandboxState::paused : SandboxState::running;
  if (rec.state == want) return rec;  // no error: pausing a paused sandbox leaves it so
  // The record says "paused" from before the freeze until after the thaw: were sbx
  // killed in between, the next exec resumes it (a no-op on a running one). The other
  // way round, a frozen sandbox recorded as running, an exec would wait on it for good.
  if (paused) {
    rec.state = SandboxState::paused;
    registry_.save(rec);
  }
  try {
    with_context((paused ? "pausing sandbox " : "resuming sandbox ") + rec.id, [&] {
      if (paused) driver->pause(rec, registry_.dir(rec.id));
      else driver->resume(rec, registry_.dir(rec.id));
    });
  } catch (const Error&) {
    if (paused) {
      rec.state = SandboxState::running;  // the freeze failed: it runs, as the record said before
      registry_.save(rec);
    }
    throw;
  }
  fault::point(paused ? "pause.frozen" : "resume.thawed");
  rec.state = want;
  registry_.save(rec);
  // Idle time starts again at the resume, not at the last exec before the pause.
  if (!paused) registry_.touch(rec.id);
  return rec;
}

SandboxRecord LocalBackend::pause(const std::string& id) { return set_paused(id, true); }
SandboxRecord LocalBackend::resume(const std::string& id) { return set_paused(id, false); }

void LocalBackend::resume_if_paused(SandboxRecord& rec) {
  if (rec.state != SandboxState::paused) return;
  if (cfg_.refuse_paused)
    throw Error(Errc::conflict, "sandbox " + rec.id + " is paused")
        .set_hint("resume it first with `sbx resume " + rec.id + "` (on_paused: refuse in the config stops sbx doing it for you)");
  // Under no other lock of this sandbox: resume takes the exclusive one.
  rec = resume(rec.id);
}

}  // namespace sbx
