#include "core/registry.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/fsutil.hpp"
#include "core/pinned_pid.hpp"
#include "core/spec.hpp"
#include "tests/unit/helpers.hpp"

using sbx::Errc;
using sbx::Registry;
using sbx::SandboxRecord;
using sbx::SandboxSpec;
using sbx::SandboxState;
using sbx_test::error_of;
using sbx_test::exists;
using sbx_test::TempDir;

namespace {

constexpr uint32_t kBase = 100000;
constexpr uint32_t kRange = 65536;

SandboxSpec spec_with(const std::string& label) {
  SandboxSpec s;
  s.driver = "subprocess";
  s.labels["who"] = label;
  s.env["A"] = "1";
  return s;
}

// A record with a chosen id, written through the registry like create() would.
SandboxRecord plant(Registry& reg, const std::string& id, int64_t created_ms, uint32_t slot) {
  REQUIRE(::mkdir(reg.dir(id).c_str(), 0711) == 0);
  SandboxRecord rec;
  rec.id = id;
  rec.spec = spec_with(id);
  rec.state = SandboxState::running;
  rec.created_ms = created_ms;
  rec.slot = slot;
  rec.uid_base = kBase + slot * kRange;
  reg.save(rec);
  return rec;
}

// Every file name below dir (recursively) that contains needle.
void find_names(const std::string& dir, const std::string& needle, std::vector<std::string>& out) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (auto* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string p = dir + "/" + name;
    if (name.find(needle) != std::string::npos) out.push_back(p);
    struct stat st {};
    if (::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) find_names(p, needle, out);
  }
  ::closedir(d);
}

std::vector<std::string> tmp_leftovers(const std::string& root) {
  std::vector<std::string> out;
  find_names(root, ".tmp.", out);
  return out;
}

void set_mtime(const std::string& path, time_t sec) {
  struct timespec ts[2] = {{sec, 0}, {sec, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), ts, 0) == 0);
}

}  // namespace

TEST_CASE("registry: create, save, find, get, list, remove", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path + "/state", kBase);
  CHECK(reg.root() == tmp.path + "/state");
  CHECK(reg.list().empty());

  SandboxRecord a = reg.create(spec_with("a"));
  CHECK(sbx::valid_sandbox_id(a.id));
  CHECK(a.state == SandboxState::creating);
  CHECK(a.slot == 0);
  CHECK(a.uid_base == kBase);
  CHECK(a.created_ms > 0);
  CHECK(a.spec.labels.at("who") == "a");
  CHECK(reg.dir(a.id) == tmp.path + "/state/sandboxes/" + a.id);
  CHECK(exists(reg.dir(a.id) + "/record.json"));

  SandboxRecord b = reg.create(spec_with("b"));
  CHECK(b.id != a.id);
  CHECK(b.slot == 1);
  CHECK(b.uid_base == kBase + kRange);

  // find/get read back what was saved.
  auto fa = reg.find(a.id);
  REQUIRE(fa);
  CHECK(fa->id == a.id);
  CHECK(fa->state == SandboxState::creating);
  CHECK(fa->spec.driver == "subprocess");
  CHECK(fa->spec.env.at("A") == "1");
  CHECK(fa->slot == 0);

  // save replaces the record.
  a.state = SandboxState::running;
  a.agent_pid = 4242;
  a.agent_start = 777;
  a.error = "";
  a.driver_data = {{"cgroup", "/sys/fs/cgroup/sbx/x"}};
  reg.save(a);
  SandboxRecord ga = reg.get(a.id);
  CHECK(ga.state == SandboxState::running);
  CHECK(ga.agent_pid == 4242);
  CHECK(ga.agent_start == 777);
  CHECK(ga.driver_data.at("cgroup") == "/sys/fs/cgroup/sbx/x");
  CHECK(ga.uid_base == kBase);

  auto all = reg.list();
  REQUIRE(all.size() == 2);
  std::set<std::string> ids{all[0].id, all[1].id};
  CHECK(ids == std::set<std::string>{a.id, b.id});
  CHECK(reg.stray_dirs().empty());

  reg.remove(a.id);
  CHECK_FALSE(exists(reg.dir(a.id)));
  CHECK_FALSE(reg.find(a.id));
  CHECK(error_of([&] { reg.get(a.id); }).code() == Errc::not_found);
  REQUIRE(reg.list().size() == 1);
  CHECK(reg.list()[0].id == b.id);
  CHECK(tmp_leftovers(tmp.path).empty());

  // A second Registry on the same root sees the same sandboxes.
  Registry again(tmp.path + "/state", kBase);
  REQUIRE(again.find(b.id));
  CHECK(again.find(b.id)->spec.labels.at("who") == "b");
}

TEST_CASE("registry: get of a missing sandbox is not_found with a hint", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path, kBase);
  auto e = error_of([&] { reg.get("sbx_zzzzzzzzzzzz"); });
  CHECK(e.code() == Errc::not_found);
  CHECK(sbx_test::contains(e.what(), "sbx_zzzzzzzzzzzz"));
  CHECK_FALSE(e.hint().empty());
  CHECK_FALSE(reg.find("sbx_zzzzzzzzzzzz"));
}

TEST_CASE("registry: remove refuses anything that is not a sandbox id", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path, kBase);
  sbx_test::write_text(tmp / "keep", "x");
  for (const char* bad : {"..", "../keep", "", "sbx_", "sbx_ABCDEFGHIJKL", "sbx_aaaaaaaaaaaa/.."}) {
    CAPTURE(bad);
    CHECK(error_of([&] { reg.remove(bad); }).code() == Errc::invalid_argument);
  }
  CHECK(exists(tmp / "keep"));
  CHECK(exists(tmp / "sandboxes"));
}

TEST_CASE("registry: id prefix lookup", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path, kBase);
  plant(reg, "sbx_aaaaaaaaaaaa", 1, 0);
  plant(reg, "sbx_aaaaaaaaaaab", 2, 1);
  plant(reg, "sbx_bbbbbbbbbbbb", 3, 2);

  SECTION("a unique prefix finds the sandbox") {
    for (const char* p : {"sbx_b", "sbx_bbbbb", "sbx_bbbbbbbbbbb"}) {
      CAPTURE(p);
      auto r = reg.find(p);
      REQUIRE(r);
      CHECK(r->id == "sbx_bbbbbbbbbbbb");
      CHECK(reg.get(p).id == "sbx_bbbbbbbbbbbb");
    }
    REQUIRE(reg.find("sbx_aaaaaaaaaaab"));
    CHECK(reg.find("sbx_aaaaaaaaaaab")->id == "sbx_aaaaaaaaaaab");
  }
  SECTION("an ambiguous prefix is invalid_argument with a hint") {
    for (const char* p : {"sbx_a", "sbx_aaaaaaaaaaa"}) {
      CAPTURE(p);
      auto e = error_of([&] { reg.find(p); });
      CHECK(e.code() == Errc::invalid_argument);
      CHECK(sbx_test::contains(e.what(), p));
      CHECK_FALSE(e.hint().empty());
      CHECK(error_of([&] { reg.get(p); }).code() == Errc::invalid_argument);
    }
  }
  SECTION("a prefix that is too short finds nothing") {
    for (const char* p : {"", "s", "sbx", "sbx_"}) {
      CAPTURE(p);
      CHECK_FALSE(reg.find(p));
      CHECK(error_of([&] { reg.get(p); }).code() == Errc::not_found);
    }
  }
  SECTION("prefixes that match nothing or look like paths find nothing") {
    for (const char* p : {"sbx_c", "sbx_bbbbbbbbbbbbb", "sbx_b/..", "../sandboxes/sbx_b", "SBX_B", "bbbbb"}) {
      CAPTURE(p);
      CHECK_FALSE(reg.find(p));
    }
  }
}

TEST_CASE("registry: list is oldest first", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path, kBase);
  plant(reg, "sbx_cccccccccccc", 300, 0);
  plant(reg, "sbx_aaaaaaaaaaaa", 100, 1);
  plant(reg, "sbx_bbbbbbbbbbbb", 200, 2);
  auto all = reg.list();
  REQUIRE(all.size() == 3);
  CHECK(all[0].id == "sbx_aaaaaaaaaaaa");
  CHECK(all[1].id == "sbx_bbbbbbbbbbbb");
  CHECK(all[2].id == "sbx_cccccccccccc");
}

TEST_CASE("registry: a freed slot is reused, others keep their uid ranges", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path, kBase);
  auto a = reg.create({});
  auto b = reg.create({});
  auto c = reg.create({});
  CHECK(std::vector<uint32_t>{a.slot, b.slot, c.slot} == std::vector<uint32_t>{0, 1, 2});
  reg.remove(b.id);
  auto d = reg.create({});
  CHECK(d.slot == 1);
  CHECK(d.uid_base == kBase + kRange);
  auto e = reg.create({});
  CHECK(e.slot == 3);
  CHECK(e.uid_base == kBase + 3 * kRange);
}

TEST_CASE("registry: create refuses when no uid range fits below 2^32", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path, 0xFFFE0000u);  // room for exactly one range
  auto a = reg.create({});
  CHECK(a.uid_base == 0xFFFE0000u);
  auto e = error_of([&] { reg.create({}); });
  CHECK(e.code() == Errc::limit_exceeded);
  CHECK_FALSE(e.hint().empty());
  CHECK(reg.list().size() == 1);
  CHECK(reg.stray_dirs().empty());
}

TEST_CASE("registry: a state root that cannot be created is reported with a hint", "[registry]") {
  TempDir tmp{"registry"};
  sbx_test::write_text(tmp / "file", "not a dir");
  auto e = error_of([&] { Registry reg(tmp / "file/state", kBase); });
  CHECK(sbx_test::contains(e.what(), "opening the state root"));
  CHECK_FALSE(e.hint().empty());
}

TEST_CASE("registry: records are written atomically, no temp files remain", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path, kBase);
  auto r = reg.create({});
  for (int i = 0; i < 20; ++i) {
    r.agent_pid = 1000 + i;
    reg.save(r);
  }
  CHECK(reg.get(r.id).agent_pid == 1019);
  CHECK(tmp_leftovers(tmp.path).empty());
  // The record is private to the owner.
  struct stat st {};
  REQUIRE(::stat((reg.dir(r.id) + "/record.json").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // And valid JSON of the record.
  auto j = nlohmann::json::parse(sbx_test::read_text(reg.dir(r.id) + "/record.json"));
  CHECK(j.at("id") == r.id);
}

TEST_CASE("registry: a directory without a record is a stray dir, not a sandbox", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path, kBase);
  auto good = reg.create({});
  REQUIRE(::mkdir(reg.dir("sbx_dddddddddddd").c_str(), 0711) == 0);
  REQUIRE(::mkdir((tmp / "sandboxes/not-an-id").c_str(), 0711) == 0);
  auto all = reg.list();
  REQUIRE(all.size() == 1);
  CHECK(all[0].id == good.id);
  CHECK(reg.stray_dirs() == std::vector<std::string>{"sbx_dddddddddddd"});
  CHECK_FALSE(reg.find("sbx_dddddddddddd"));
}

TEST_CASE("registry: a garbage record is skipped by list and find", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path, kBase);
  auto good = reg.create({});
  REQUIRE(::mkdir(reg.dir("sbx_cccccccccccc").c_str(), 0711) == 0);
  sbx_test::write_text(reg.dir("sbx_cccccccccccc") + "/record.json", "\x01garbage{{{", 0600);
  REQUIRE(::mkdir(reg.dir("sbx_eeeeeeeeeeee").c_str(), 0711) == 0);
  sbx_test::write_text(reg.dir("sbx_eeeeeeeeeeee") + "/record.json", R"({"id":"sbx_eeeeeeeeeeee"})", 0600);
  std::vector<SandboxRecord> all;
  REQUIRE_NOTHROW(all = reg.list());
  REQUIRE(all.size() == 1);
  CHECK(all[0].id == good.id);
  CHECK_FALSE(reg.find("sbx_cccccccccccc"));
  CHECK_FALSE(reg.find("sbx_ccccc"));
  CHECK_FALSE(reg.find("sbx_eeeeeeeeeeee"));
  // A new sandbox can still be created next to it.
  CHECK_NOTHROW(reg.create({}));
}

TEST_CASE("registry: a directory whose record is unreadable is reported by stray_dirs", "[registry]") {
  // registry.hpp: stray_dirs() returns "directories under the root that hold no
  // readable record". A garbage record.json is not readable (list() and find()
  // skip it); were it not a stray dir either, gc could never reclaim it.
  TempDir tmp{"registry"};
  Registry reg(tmp.path, kBase);
  auto good = reg.create({});
  REQUIRE(::mkdir(reg.dir("sbx_cccccccccccc").c_str(), 0711) == 0);
  sbx_test::write_text(reg.dir("sbx_cccccccccccc") + "/record.json", "garbage", 0600);
  REQUIRE(::mkdir(reg.dir("sbx_eeeeeeeeeeee").c_str(), 0711) == 0);
  sbx_test::write_text(reg.dir("sbx_eeeeeeeeeeee") + "/record.json", R"({"id":"sbx_eeeeeeeeeeee"})", 0600);
  auto stray = reg.stray_dirs();
  std::sort(stray.begin(), stray.end());
  CHECK(stray == std::vector<std::string>{"sbx_cccccccccccc", "sbx_eeeeeeeeeeee"});
}

TEST_CASE("registry: touch moves last_active_ms forward", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path, kBase);
  auto r = reg.create({});
  int64_t after_create = reg.last_active_ms(r.id);
  CHECK(after_create > 0);
  CHECK(after_create >= r.created_ms - 1000);

  std::string stamp = reg.dir(r.id) + "/activity";
  REQUIRE(exists(stamp));
  set_mtime(stamp, 1000);  // long ago
  CHECK(reg.last_active_ms(r.id) == 1'000'000);
  CHECK(reg.get(r.id).last_active_ms == 1'000'000);

  int64_t before = sbx::now_ms();
  reg.touch(r.id);
  int64_t t1 = reg.last_active_ms(r.id);
  // File timestamps come from the kernel's coarse clock: allow a few ms of lag.
  CHECK(t1 >= before - 50);
  CHECK(t1 <= sbx::now_ms() + 50);
  CHECK(reg.get(r.id).last_active_ms == t1);
  CHECK(reg.list().at(0).last_active_ms == t1);

  // touch recreates a missing stamp.
  REQUIRE(::unlink(stamp.c_str()) == 0);
  CHECK(reg.last_active_ms(r.id) == 0);
  reg.touch(r.id);
  CHECK(reg.last_active_ms(r.id) >= before - 50);
  CHECK(reg.last_active_ms("sbx_zzzzzzzzzzzz") == 0);
}

TEST_CASE("registry: lock is exclusive or shared", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path, kBase);
  auto r = reg.create({});
  std::string lockfile = reg.dir(r.id) + "/lock";
  auto try_lock = [&](int op) {
    sbx::Fd fd(::open(lockfile.c_str(), O_RDWR | O_CLOEXEC));
    REQUIRE(fd);
    return ::flock(fd.get(), op | LOCK_NB) == 0;
  };
  {
    sbx::Fd held = reg.lock(r.id, true);
    CHECK_FALSE(try_lock(LOCK_SH));
    CHECK_FALSE(try_lock(LOCK_EX));
  }
  CHECK(try_lock(LOCK_EX));
  {
    sbx::Fd held = reg.lock(r.id, false);
    CHECK(try_lock(LOCK_SH));
    CHECK_FALSE(try_lock(LOCK_EX));
  }
  CHECK(try_lock(LOCK_EX));
}

TEST_CASE("registry: concurrent creators and writers lose nothing", "[registry]") {
  constexpr int kProcs = 6;
  constexpr int kPerProc = 15;
  constexpr int kSaves = 5;
  TempDir tmp{"registry"};
  std::string root = tmp.path + "/state";
  { Registry init(root, kBase); }

  // Children wait on this pipe so they all start together.
  int go[2];
  REQUIRE(::pipe(go) == 0);
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(go[1]);
      char c;
      while (::read(go[0], &c, 1) < 0 && errno == EINTR) {
      }
      int status = 0;
      try {
        Registry reg(root, kBase);
        std::vector<SandboxRecord> mine;
        for (int i = 0; i < kPerProc; ++i) {
          SandboxSpec s;
          s.labels["proc"] = std::to_string(p);
          s.labels["index"] = std::to_string(i);
          mine.push_back(reg.create(s));
        }
        for (int round = 1; round <= kSaves; ++round) {
          for (auto& rec : mine) {
            rec.state = SandboxState::running;
            rec.agent_pid = p * 1000 + round;
            rec.driver_data = {{"round", round}, {"pad", std::string(static_cast<size_t>(200 * round), 'x')}};
            reg.save(rec);
          }
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", p, e.what());
        status = 1;
      }
      ::_exit(status);
    }
    kids.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);  // start

  // While they run, every record file present must parse: no reader ever
  // sees a half-written record.
  int torn = 0, reads = 0;
  auto scan = [&] {
    DIR* d = ::opendir((root + "/sandboxes").c_str());
    if (!d) return;
    while (auto* e = ::readdir(d)) {
      if (!sbx::valid_sandbox_id(e->d_name)) continue;
      auto text = sbx::read_file_if_exists(root + "/sandboxes/" + e->d_name + "/record.json");
      if (!text) continue;
      ++reads;
      if (nlohmann::json::parse(*text, nullptr, false).is_discarded()) ++torn;
    }
    ::closedir(d);
  };
  size_t running = kids.size();
  std::vector<int> statuses;
  while (running > 0) {
    scan();
    int st = 0;
    pid_t done;
    while ((done = ::waitpid(-1, &st, WNOHANG)) > 0) {
      if (std::find(kids.begin(), kids.end(), done) == kids.end()) continue;
      statuses.push_back(st);
      --running;
    }
    if (done < 0 && errno == ECHILD) break;
    ::usleep(2000);
  }
  REQUIRE(statuses.size() == static_cast<size_t>(kProcs));
  for (int st : statuses) {
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
  }
  CHECK(torn == 0);
  INFO("records read during the run: " << reads);

  Registry reg(root, kBase);
  auto all = reg.list();
  CHECK(all.size() == static_cast<size_t>(kProcs * kPerProc));
  std::set<std::string> ids;
  std::set<uint32_t> slots, uid_bases;
  std::set<std::pair<std::string, std::string>> origins;
  for (auto& r : all) {
    CAPTURE(r.id);
    ids.insert(r.id);
    slots.insert(r.slot);
    uid_bases.insert(r.uid_base);
    CHECK(sbx::valid_sandbox_id(r.id));
    CHECK(r.uid_base == kBase + r.slot * kRange);
    CHECK(r.state == SandboxState::running);
    CHECK(r.driver_data.at("round") == kSaves);
    CHECK(r.agent_pid == std::stoi(r.spec.labels.at("proc")) * 1000 + kSaves);
    origins.emplace(r.spec.labels.at("proc"), r.spec.labels.at("index"));
  }
  CHECK(ids.size() == all.size());
  CHECK(slots.size() == all.size());
  CHECK(uid_bases.size() == all.size());
  CHECK(origins.size() == all.size());
  // Slots are dense: 0..89, so uid ranges are packed and never overlap.
  CHECK(*slots.rbegin() == static_cast<uint32_t>(kProcs * kPerProc - 1));
  CHECK(reg.stray_dirs().empty());
  CHECK(tmp_leftovers(root).empty());
}

TEST_CASE("registry: a one-shot record keeps the client it lives for", "[registry]") {
  TempDir dir("registry");
  Registry reg(dir.path, kBase);
  SandboxRecord plain = reg.create(spec_with("plain"));
  CHECK_FALSE(nlohmann::json(plain).contains("one_shot"));  // nothing for sandboxes that stay
  SandboxRecord rec = reg.create(spec_with("one-shot"));
  rec.one_shot = {::getpid(), sbx::proc::start_time(::getpid()), sbx::proc::pid_namespace(), "python3"};
  reg.save(rec);
  auto back = reg.find(rec.id);
  REQUIRE(back);
  CHECK(back->one_shot.pid == ::getpid());
  CHECK(back->one_shot.start == rec.one_shot.start);
  CHECK(back->one_shot.pid_ns == rec.one_shot.pid_ns);
  CHECK(back->one_shot.command.empty());  // for the driver that starts it, not saved
  CHECK(reg.find(plain.id)->one_shot.pid == 0);
  // Given to create, the client is in the first record, with no second save.
  sbx::OneShotClient client{::getpid(), sbx::proc::start_time(::getpid()), sbx::proc::pid_namespace(), "sh"};
  SandboxRecord first = reg.create(spec_with("first"), nullptr, client);
  CHECK(first.one_shot.command == "sh");
  auto saved = reg.find(first.id);
  REQUIRE(saved);
  CHECK(saved->one_shot.pid == ::getpid());
  CHECK(saved->one_shot.start == client.start);
  CHECK(saved->state == SandboxState::creating);
}

TEST_CASE("pinned pid: alive while it runs, not once reaped or for another start time", "[registry]") {
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  uint64_t start = sbx::proc::start_time(child);
  CHECK(start > 0);
  CHECK(sbx::proc::alive(child, start));
  CHECK_FALSE(sbx::proc::alive(child, start + 1));  // a recycled pid has another start time
  CHECK_FALSE(sbx::proc::alive(0, start));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK_FALSE(sbx::proc::alive(child, start));
  CHECK(sbx::proc::pid_namespace() != 0);
}

TEST_CASE("registry: a creation is abandoned only once its creator's lock is free", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path + "/state", kBase);
  sbx::Fd creating;
  SandboxRecord a = reg.create(spec_with("a"), &creating);
  REQUIRE(creating);
  // Held by its creator (this process, through another open file): in progress.
  CHECK_FALSE(reg.abandoned(a.id));
  creating.reset();  // what the creator's death does
  CHECK(reg.abandoned(a.id));
  CHECK(reg.abandoned(a.id));  // asking takes and drops the lock: the answer stays
  // Without a lock file (an older build's creation) nothing is known: age decides.
  SandboxRecord b = reg.create(spec_with("b"));
  CHECK_FALSE(reg.abandoned(b.id));
}

TEST_CASE("registry: a removal past its rename is waited for, and finished once its remover died", "[registry]") {
  using namespace std::chrono_literals;
  TempDir tmp{"registry"};
  Registry reg(tmp.path + "/state", kBase);
  SandboxRecord a = reg.create(spec_with("a"));
  sbx::Fd remover = reg.lock(a.id, true);
  // Where Registry::remove stands after its rename (a one-shot's teardown, stalled or killed there).
  std::string going = tmp.path + "/state/sandboxes/.removing-" + a.id;
  REQUIRE(::rename(reg.dir(a.id).c_str(), going.c_str()) == 0);
  REQUIRE(reg.unfinished_removals() == std::vector<std::string>{going});
  CHECK(reg.list().empty());
  CHECK(reg.await_removal(going, std::chrono::steady_clock::now()) == Registry::RemovalEnd::running);
  CHECK(error_of([&] { reg.finish_removal(going); }).code() == Errc::conflict);

  // The remover finishes (its lock file last) while this waits: gone.
  std::thread finish([&] {
    std::this_thread::sleep_for(50ms);
    sbx::remove_tree_last(going, "lock");
    remover.reset();
  });
  CHECK(reg.await_removal(going, std::chrono::steady_clock::now() + 10s) == Registry::RemovalEnd::gone);
  finish.join();
  CHECK(reg.unfinished_removals().empty());

  // A remover that died after the rename left its lock free: abandoned, and finished here.
  SandboxRecord b = reg.create(spec_with("b"));
  std::string cut = tmp.path + "/state/sandboxes/.removing-" + b.id;
  { sbx::Fd held = reg.lock(b.id, true); }
  REQUIRE(::rename(reg.dir(b.id).c_str(), cut.c_str()) == 0);
  CHECK(reg.await_removal(cut, std::chrono::steady_clock::now() + 10s) == Registry::RemovalEnd::abandoned);
  reg.finish_removal(cut);
  CHECK(reg.unfinished_removals().empty());

  // No lock file (it goes last, so its remover died at the very end, or an older build's): abandoned too.
  sbx::make_dirs(cut + "/sub");
  CHECK(reg.await_removal(cut, std::chrono::steady_clock::now() + 10s) == Registry::RemovalEnd::abandoned);
  reg.finish_removal(cut);
  CHECK(reg.unfinished_removals().empty());
}

TEST_CASE("registry: remove under its remover's lock leaves nothing", "[registry]") {
  TempDir tmp{"registry"};
  Registry reg(tmp.path + "/state", kBase);
  SandboxRecord a = reg.create(spec_with("a"));
  sbx::make_dirs(reg.dir(a.id) + "/rootfs/deep/er");
  sbx::Fd held = reg.lock(a.id, true);  // its remover's, as in LocalBackend::destroy
  reg.remove(a.id);
  CHECK(reg.unfinished_removals().empty());
  CHECK(::access(reg.dir(a.id).c_str(), F_OK) != 0);
}
