// backup_store (backends/deno/store_copy.cpp) on real SQLite databases in WAL mode,
// as the deno agent keeps them: a writer with a transaction open when the copy runs
// (the freezer's catch), and files beside the store that are not plain.
#include <sqlite3.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "backends/deno/store_copy.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "tests/temp_dir.hpp"

namespace {

struct Db {
  sqlite3* db = nullptr;
  explicit Db(const std::string& path) { REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK); }
  ~Db() { sqlite3_close(db); }
  void exec(const std::string& sql) { REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK); }
  std::string rows() {
    std::string out;
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, "SELECT path FROM entries ORDER BY path", -1, &st, nullptr) == SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) out += std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))) + ";";
    sqlite3_finalize(st);
    return out;
  }
};

void make_store(Db& live) {
  live.exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; CREATE TABLE entries (path TEXT PRIMARY KEY, data BLOB)");
  live.exec("INSERT INTO entries VALUES ('/work/a', x'01'), ('/work/b', x'02')");
}

}  // namespace

TEST_CASE("deno store copy: the last committed transaction, whole, as one rollback-journal file", "[deno]") {
  sbx_test::TempDir tmp("storecopy");
  std::string src = tmp.path + "/store.db", dst = tmp.path + "/snap.img";
  Db live(src);
  make_store(live);
  // An exec's changes half-applied when the freezer stopped the agent.
  live.exec("BEGIN IMMEDIATE; INSERT INTO entries VALUES ('/work/c', x'03'); DELETE FROM entries WHERE path = '/work/a'");
  sbx::deno::backup_store(src, dst);
  live.exec("COMMIT");
  std::string head = sbx::read_file(dst).substr(0, 20);
  CHECK(head.substr(0, 16) == std::string("SQLite format 3\0", 16));
  CHECK(head[18] == 1);  // rollback journal, not WAL: no -wal or -shm belongs to it
  CHECK(head[19] == 1);
  {
    Db copy(dst);
    CHECK(copy.rows() == "/work/a;/work/b;");
  }
  CHECK(!sbx::path_exists(dst + "-wal"));
  CHECK(!sbx::path_exists(dst + "-journal"));
  CHECK(live.rows() == "/work/b;/work/c;");  // the source goes on untouched
}

TEST_CASE("deno store copy: a symlink beside the store is refused", "[deno]") {
  sbx_test::TempDir tmp("storecopy");
  std::string src = tmp.path + "/store.db";
  Db live(src);
  make_store(live);
  sbx::write_file_atomic(tmp.path + "/secret", "not for the sandbox\n", 0600);
  REQUIRE(::symlink((tmp.path + "/secret").c_str(), (src + "-journal").c_str()) == 0);
  try {
    sbx::deno::backup_store(src, tmp.path + "/snap.img");
    FAIL("copied a store with a symlink beside it");
  } catch (const sbx::Error& e) {
    CHECK(e.code() == sbx::Errc::permission_denied);
  }
  CHECK(!sbx::path_exists(tmp.path + "/snap.img"));
}
