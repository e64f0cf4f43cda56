// sbx cp: files and trees between the host and a sandbox, docker cp style.
#include "cli/common.hpp"
#include "core/cp.hpp"
#include "core/units.hpp"

namespace sbx::cli {

void register_cp(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("cp", "Copy files between the host and a sandbox");
  struct State {
    std::string src, dest, max_size;
  };
  auto st = std::make_shared<State>();
  sub->add_option("src", st->src, "source: a host path, ID:/path, or - (tar on stdin)")->required();
  sub->add_option("dest", st->dest, "destination: a host path, ID:/path, or - (tar on stdout)")->required();
  sub->add_option("--max-size", st->max_size, "refuse transfers larger than this (default 1G)")->type_name("SIZE");
  sub->callback([&g, &out, st] {
    Config cfg = load_config(g);
    uint64_t max = cfg.cp_max_bytes;
    if (!st->max_size.empty()) max = with_context("--max-size", [&] { return parse_size(st->max_size); });
    auto src = parse_cp_endpoint(st->src), dest = parse_cp_endpoint(st->dest);
    std::string& id = src.sandbox.empty() ? dest.sandbox : src.sandbox;
    auto backend = backend_for_existing(cfg, id);
    copy_files(*backend, src, dest, max);
    out.status = 0;
  });
}

}  // namespace sbx::cli
