// sbx create: start a sandbox and print its id alone on stdout.
#include <cstdio>

#include "cli/common.hpp"

namespace sbx::cli {

namespace {
// The driver of a snapshot: this host's, else "remote" when the manager holds it.
std::string snapshot_driver(const Config& cfg, const std::string& ref) {
  SnapshotStore store(cfg.state_dir);
  if (auto here = store.find(ref)) return here->spec.driver;
  auto backends = all_backends(cfg);
  for (size_t i = 1; i < backends.size(); ++i)  // [0] is this host
    for (auto& s : backends[i]->snapshots())
      if (s.name == ref || s.digest == ref) return s.spec.driver;
  return store.get(ref).spec.driver;  // not_found, with its hint
}
}  // namespace

void register_create(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("create", "Create a sandbox and print its id");
  auto flags = std::make_shared<SpecFlags>();
  add_spec_flags(sub, *flags);
  sub->add_option("-e,--env", flags->env, "default environment of every exec, KEY=VALUE (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  sub->add_option("-w,--workdir", flags->workdir, "default working directory (default /work)")->type_name("DIR");
  sub->add_option("--from", flags->from, "start with the files of this snapshot (`sbx snapshot ls`), on its driver and image")
      ->type_name("SNAPSHOT");
  sub->callback([&g, &out, flags] {
    Config cfg = load_config(g, flags->driver);
    if (!flags->from.empty() && flags->driver.empty()) {
      // The snapshot's driver, unless --driver says otherwise (then create refuses the clash).
      flags->driver = snapshot_driver(cfg, flags->from);
      cfg = load_config(g, flags->driver);
    }
    SandboxSpec spec = spec_from_flags(*flags);
    spec.from_snapshot = flags->from;
    auto backend = backend_for_new(cfg, spec.driver);
    bool tty = is_tty(2);
    auto rec = backend->create(spec, [tty](const std::string& msg) {
      if (tty) std::fprintf(stderr, "sbx: %s...\n", msg.c_str());
    });
    std::printf("%s\n", rec.id.c_str());
    out.status = 0;
  });
}

}  // namespace sbx::cli
