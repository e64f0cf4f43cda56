// Snapshots of a deno sandbox's files, which are one SQLite database
// (agent-deno/store.ts: <dir>/deno/store.db, WAL mode, one transaction per exec).
#pragma once

#include <string>

namespace sbx::deno {

/// Copies the live database `from` to the new file `to` with SQLite's online backup
/// API while its agent is frozen: `to` holds the last committed transaction whole (an
/// exec whose changes had not committed is not in it), as one rollback-journal file
/// with no -wal or -shm beside it. Refuses a store whose files are not plain files.
void backup_store(const std::string& from, const std::string& to);

}  // namespace sbx::deno
