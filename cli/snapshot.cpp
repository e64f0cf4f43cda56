// sbx snapshot: copy a sandbox's files into a named snapshot (paused for the
// copy, resumed after), list and remove snapshots. `sbx create --from NAME`
// and `sbx fork ID` start sandboxes from them (docs/snapshots.md).
#include <cstdio>

#include "cli/common.hpp"

namespace sbx::cli {

namespace {

std::string size_text(uint64_t bytes) {
  if (bytes >= (10ull << 20)) return std::to_string(bytes >> 20) + "M";
  return std::to_string((bytes + 1023) >> 10) + "K";
}

void print_snapshots(const std::vector<SnapshotInfo>& snaps, bool json) {
  if (json) {
    std::printf("%s\n", nlohmann::json(snaps).dump().c_str());
    return;
  }
  std::printf("%-28s %-19s %-16s %-10s %7s %7s %s\n", "NAME", "DIGEST", "SOURCE", "DRIVER", "SIZE", "MEMORY", "COPY");
  for (auto& s : snaps)
    std::printf("%-28s %-19s %-16s %-10s %7s %7s %llums\n", s.name.c_str(), s.digest.substr(0, 19).c_str(),
                s.source.c_str(), s.spec.driver.c_str(), size_text(s.bytes).c_str(),
                s.memory ? size_text(s.memory_bytes).c_str() : "-", static_cast<unsigned long long>(s.copy_ms));
}

}  // namespace

void register_snapshot(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("snapshot", "Snapshot a sandbox's files (ID [NAME]), or list (ls) or remove (rm) snapshots");
  struct State {
    std::vector<std::string> args, names;
    bool json = false, memory = false;
  };
  auto st = std::make_shared<State>();
  sub->add_option("args", st->args, "ID [NAME]: the sandbox and the snapshot's name (default ID-<ms>)")->expected(1, 2);
  sub->add_flag("--memory", st->memory, "save its memory and running processes too (runsc, microvm; see `sbx doctor`)");

  auto* ls = sub->add_subcommand("ls", "List snapshots, oldest first");
  ls->add_flag("--json", st->json, "JSON array, one object per snapshot");
  ls->callback([&g, &out, st] {
    Config cfg = load_config(g);
    std::vector<SnapshotInfo> snaps;  // this host's, then the manager's (driver "remote")
    for (auto& backend : all_backends(cfg))
      for (auto& s : backend->snapshots()) snaps.push_back(std::move(s));
    print_snapshots(snaps, st->json);
    out.status = 0;
  });
  auto* rm = sub->add_subcommand("rm", "Remove snapshots (a layer goes with its last name)");
  rm->add_option("names", st->names, "snapshot names")->required();
  rm->callback([&g, &out, st] {
    Config cfg = load_config(g);
    auto backends = all_backends(cfg);  // this host first; a name it lacks may be the manager's
    int failures = 0;
    for (auto& n : st->names) {
      for (size_t i = 0; i < backends.size(); ++i) {
        try {
          backends[i]->remove_snapshot(n);
          break;
        } catch (const Error& e) {
          if (e.code() == Errc::not_found && i + 1 < backends.size()) continue;
          print_error(e);
          ++failures;
        }
      }
    }
    out.status = failures ? exit_status(Errc::not_found) : 0;
  });

  sub->callback([&g, &out, st, sub] {
    if (!sub->get_subcommands().empty()) return;  // ls or rm ran
    if (st->args.empty())
      throw Error(Errc::invalid_argument, "sbx snapshot needs a sandbox id, or ls or rm")
          .set_hint("sbx snapshot ID [NAME] | sbx snapshot ls | sbx snapshot rm NAME");
    Config cfg = load_config(g);
    std::string id = st->args[0];
    auto snap = backend_for_existing(cfg, id)->snapshot(id, st->args.size() > 1 ? st->args[1] : "", st->memory);
    std::printf("%s\n", snap.name.c_str());
    out.status = 0;
  });
}

void register_fork(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("fork", "Start a new sandbox whose files are a copy of this one's; print its id");
  auto id = std::make_shared<std::string>();
  auto memory = std::make_shared<bool>(false);
  sub->add_option("id", *id, "sandbox id (or name, or unambiguous prefix)")->required();
  sub->add_flag("--memory", *memory, "copy its memory and running processes too (runsc, microvm; see `sbx doctor`)");
  sub->callback([&g, &out, id, memory] {
    Config cfg = load_config(g);
    std::string ref = *id;
    bool tty = is_tty(2);
    auto rec = backend_for_existing(cfg, ref)->fork(
        ref, [tty](const std::string& msg) {
          if (tty) std::fprintf(stderr, "sbx: %s...\n", msg.c_str());
        },
        *memory);
    std::printf("%s\n", rec.id.c_str());
    out.status = 0;
  });
}

}  // namespace sbx::cli
