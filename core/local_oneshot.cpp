// A local one-shot (`sbx exec --rm`): create, exec, remove. The CLI's removal
// can leave the critical path: a detached process finishes it, holding the
// sandbox's lock from before the fork, so `sbx ls`, `rm` and `gc` wait for it
// rather than see a sandbox that is going, and should it die, the record still
// names the one-shot's client, which is gone: gc collects the sandbox. The
// same process then tops up a configured warm pool, which otherwise only
// `sbx serve` or `sbx pool fill` would.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/fault.hpp"
#include "core/fsutil.hpp"
#include "core/local_backend.hpp"
#include "core/pinned_pid.hpp"

namespace sbx {

namespace {

// Forking is safe only while this process has one thread (no lock another thread holds).
bool single_threaded() {
  auto status = read_file_if_exists("/proc/self/status");
  if (!status) return false;
  auto at = status->find("\nThreads:");
  return at != std::string::npos && std::atoi(status->c_str() + at + 9) == 1;
}

// In the detached process: no terminal, and none of the caller's descriptors
// (a pipe it reads to EOF must close when the sbx it started exits). sbx opens
// all of its own close-on-exec; those without the flag came from the caller.
void let_go_of_the_caller() {
  ::setsid();
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd <= 2; ++fd) ::dup2(null, fd);
  if (DIR* d = ::opendir("/proc/self/fd")) {
    int own = ::dirfd(d);
    while (auto* e = ::readdir(d)) {
      int fd = std::atoi(e->d_name);
      if (fd > 2 && fd != own && fd != null && (::fcntl(fd, F_GETFD) & FD_CLOEXEC) == 0) ::close(fd);
    }
    ::closedir(d);
  }
}

}  // namespace

OneShotResult LocalBackend::run_once(const SandboxSpec& spec, const ExecRequest& req, ExecIO& io) {
  check_background_request(req, true);
  pid_t self = ::getpid();
  SandboxRecord rec = create_for(spec, nullptr, {self, proc::start_time(self), proc::pid_namespace(), req.argv.empty() ? "" : req.argv[0]});
  OneShotResult out;
  out.spec = rec.spec;
  try {
    out.exec = exec(rec.id, req, io);
  } catch (...) {
    // Should this fail too, the record names this process: gc collects the sandbox once it exits.
    try {
      remove(rec.id);
    } catch (const Error&) {
    }
    throw;
  }
  if (background_teardown_ && remove_in_background(rec)) return out;
  try {
    remove(rec.id);
  } catch (const Error& e) {
    out.cleanup_error = e.what();
  }
  return out;
}

bool LocalBackend::remove_in_background(const SandboxRecord& rec) {
  if (!single_threaded()) return false;
  Fd guard = registry_.lock(rec.id, true);
  pid_t pid = ::fork();
  if (pid != 0) return pid > 0;  // this copy of the lock closes; the child's holds it
  let_go_of_the_caller();
  // With no manager to refill a warm pool, the next one-shot of a loop would
  // start cold: top it up here, off the caller's path (no-op when it is full).
  // The pool's turn is taken while the record still exists, so a drain that
  // no longer finds the record finds the refill under way (settle_pool).
  Fd turn;
  if (!cfg_.pool_sizes.empty()) {
    try {
      turn = pool_.take_turn();
    } catch (...) {
      // No refill then; the next `sbx pool fill` or create reports why.
    }
  }
  try {
    destroy_locked(registry_.get(rec.id));
  } catch (...) {
    // What stays is gc's: the record names the one-shot's client, which has exited.
  }
  guard.reset();
  if (turn) {
    try {
      fill_pool(std::move(turn));
    } catch (...) {
      // The next `sbx pool fill` or create reports what keeps it from filling.
    }
  }
  ::_exit(0);
}

}  // namespace sbx
