// sbx ls: the sandboxes and their state, as a table or JSON.
#include <algorithm>
#include <cstdio>

#include <fmt/core.h>

#include "cli/common.hpp"
#include "core/units.hpp"

namespace sbx::cli {

namespace {

struct Filter {
  std::string key, value;
};

bool matches(const SandboxRecord& r, const std::vector<Filter>& filters) {
  for (auto& f : filters) {
    if (f.key == "driver" && r.spec.driver != f.value) return false;
    if (f.key == "state" && state_name(r.state) != f.value) return false;
    if (f.key.rfind("label:", 0) == 0) {
      auto it = r.spec.labels.find(f.key.substr(6));
      if (it == r.spec.labels.end() || it->second != f.value) return false;
    }
  }
  return true;
}

std::vector<Filter> parse_filters(const std::vector<std::string>& raw) {
  std::vector<Filter> out;
  for (auto& [k, v] : parse_key_values(raw, "--filter")) {
    if (k != "driver" && k != "state" && k.rfind("label:", 0) != 0)
      throw Error(Errc::usage, "unknown filter '" + k + "'").set_hint("filters: driver=NAME, state=STATE, label:KEY=VALUE");
    if (k == "state") parse_state_filter(v);
    out.push_back({k, v});
  }
  return out;
}

}  // namespace

void register_ls(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("ls", "List sandboxes");
  struct State {
    bool json = false, quiet = false;
    std::vector<std::string> filters;
  };
  auto st = std::make_shared<State>();
  sub->add_flag("--json", st->json, "JSON array of records");
  sub->add_flag("-q,--quiet", st->quiet, "ids only");
  sub->add_option("-f,--filter", st->filters, "driver=NAME, state=STATE or label:KEY=VALUE (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  sub->callback([&g, &out, st] {
    auto filters = parse_filters(st->filters);
    // The warm pool's unclaimed sandboxes are nobody's yet: shown only when asked for by state.
    bool by_state = std::any_of(filters.begin(), filters.end(), [](const Filter& f) { return f.key == "state"; });
    Config cfg = load_config(g);
    std::vector<SandboxRecord> recs;
    for (auto& backend : all_backends(cfg))
      for (auto& r : backend->list())
        if (matches(r, filters) && (by_state || r.state != SandboxState::pooled)) recs.push_back(std::move(r));
    if (st->json) {
      nlohmann::json arr = nlohmann::json::array();
      for (auto& r : recs) arr.push_back(r);
      std::printf("%s\n", arr.dump(2).c_str());
    } else if (st->quiet) {
      for (auto& r : recs) std::printf("%s\n", r.id.c_str());
    } else {
      int64_t now = now_ms();
      size_t name_width = 4;  // "NAME"; names are up to 63 characters, most far shorter
      for (auto& r : recs) name_width = std::max(name_width, r.spec.name.size());
      std::string table = fmt::format("{:<17} {:<{}} {:<11} {:<8} {:>6} {:>6} {:>7} {:>5} {:>5} {:>6}  {}\n", "ID",
                                      "NAME", name_width, "DRIVER", "STATE", "AGE", "IDLE", "MEMORY", "PIDS", "CPUS",
                                      "DISK", "LABELS");
      for (auto& r : recs) {
        std::string labels;
        for (auto& [k, v] : r.spec.labels) labels += (labels.empty() ? "" : ",") + k + "=" + v;
        // Ages are approximate by nature: whole seconds once past one.
        auto since = [&](int64_t t) {
          auto ms = static_cast<uint64_t>(std::max<int64_t>(now - t, 1));
          return format_duration_ms(ms < 1000 ? ms : ms / 1000 * 1000);
        };
        table += fmt::format("{:<17} {:<{}} {:<11} {:<8} {:>6} {:>6} {:>7} {:>5} {:>5} {:>6}  {}\n", r.id,
                             r.spec.name.empty() ? "-" : r.spec.name, name_width, r.spec.driver,
                             state_name(r.state), since(r.created_ms),
                             since(std::max(r.last_active_ms, r.created_ms)),
                             format_size(r.spec.limits.memory_mb << 20), r.spec.limits.pids,
                             fmt::format("{:g}", r.spec.limits.cpus), format_size(r.spec.limits.disk_mb << 20), labels);
      }
      std::fputs(table.c_str(), stdout);
    }
    out.status = 0;
  });
}

}  // namespace sbx::cli
