#include "backends/deno/store_copy.hpp"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "core/error.hpp"
#include "core/lazy_libs.hpp"

namespace sbx::deno {

namespace {

// A frozen agent can hold the WAL index's lock for a moment (a checkpoint, its start-up
// recovery): the copy waits this long for it, then gives up.
constexpr int kBusyMs = 3000;

struct Closer {
  void operator()(sqlite3* db) const { sqlite_api().sqlite3_close_v2(db); }
};
using Db = std::unique_ptr<sqlite3, Closer>;

// The store is the sandbox's to write (its uid owns the directory): the sandbox is frozen
// while this runs, so a check here holds for the copy, and this process (root) then
// reads no file the sandbox pointed it at.
void check_plain(const std::string& path, bool must_exist) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT && !must_exist) return;
    throw sys_error("cannot read the sandbox's store " + path, errno);
  }
  if (!S_ISREG(st.st_mode) || st.st_nlink != 1)
    throw Error(Errc::permission_denied, path + " is not a plain file; the sandbox's store was tampered with")
        .set_hint("remove the sandbox");
}

Db open(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  int rc = sqlite_api().sqlite3_open_v2(path.c_str(), &raw, flags | SQLITE_OPEN_NOFOLLOW, nullptr);
  Db db(raw);
  if (rc != SQLITE_OK)
    throw Error(Errc::io, "cannot open the SQLite database " + path + ": " + (raw ? sqlite_api().sqlite3_errmsg(raw) : sqlite_api().sqlite3_errstr(rc)));
  // The source was written inside the sandbox: untrusted input to this (root) process.
  sqlite_api().sqlite3_db_config(raw, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite_api().sqlite3_db_config(raw, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
  sqlite_api().sqlite3_busy_timeout(raw, kBusyMs);
  return db;
}

void exec(sqlite3* db, const char* sql, const std::string& what) {
  if (sqlite_api().sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK)
    throw Error(Errc::io, what + ": " + sqlite_api().sqlite3_errmsg(db));
}

}  // namespace

void backup_store(const std::string& from, const std::string& to) {
  check_plain(from, true);
  for (const char* side : {"-wal", "-shm", "-journal"}) check_plain(from + side, false);
  // Read-only: no checkpoint, no recovery written into the sandbox's files.
  Db src = open(from, SQLITE_OPEN_READONLY);
  Db dst = open(to, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  sqlite3_backup* b = sqlite_api().sqlite3_backup_init(dst.get(), "main", src.get(), "main");
  if (!b) throw Error(Errc::io, "cannot start copying " + from + ": " + sqlite_api().sqlite3_errmsg(dst.get()));
  int rc = sqlite_api().sqlite3_backup_step(b, -1);  // every page at once: the source is frozen anyway
  sqlite_api().sqlite3_backup_finish(b);
  if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
    throw Error(Errc::conflict, "the sandbox's store " + from + " stayed locked for " + std::to_string(kBusyMs) + " ms")
        .set_hint("try the snapshot again");
  if (rc != SQLITE_DONE) throw Error(Errc::io, "copying " + from + ": " + sqlite_api().sqlite3_errstr(rc));
  // The copy carries the source's WAL flag; as a rollback-journal file it is one
  // self-contained file, and a reader of it leaves no -wal or -shm behind.
  exec(dst.get(), "PRAGMA journal_mode=DELETE", "finishing the copy of " + from);
}

}  // namespace sbx::deno
