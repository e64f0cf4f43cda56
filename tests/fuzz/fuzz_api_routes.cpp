// The manager's routes (server/api.hpp) without a socket: a request made of
// the input (method, path below a real sandbox or not, query arguments,
// content type, body) handed to Api::handle over the unit tests' fake
// backend, and any streamed answer read to its end. handle never throws; its
// body is JSON whenever it says so.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <fuzzer/FuzzedDataProvider.h>
#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "core/driver.hpp"
#include "server/api.hpp"
#include "tests/fuzz/fuzz_api.hpp"
#include "tests/fuzz/fuzz_util.hpp"
#include "tests/unit/fake_backend.hpp"

namespace {

std::vector<sbx::Probe> no_probes(const sbx::Config&, bool) { return {}; }
std::unique_ptr<sbx::Driver> no_driver(const sbx::Config&) { return nullptr; }

const char* const kMethods[] = {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"};
const char* const kPrefixes[] = {"/v1/sandboxes/ID/", "/v1/sandboxes", "/v1/run", "/v1/sandboxes/ID/files",
                                 "/v1/sandboxes/ID/processes/1/", "/", "/v1/"};
const char* const kQueryKeys[] = {"path", "format", "encoding", "state", "label", "timeout", "follow",
                                  "tail", "recursive", "signal", "token", "all"};
const char* const kTypes[] = {"application/json", "application/x-tar", "application/octet-stream", ""};

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
  return s;
}

void drain(sbx::server::HttpResponse& r) {
  if (r.file_fd >= 0) ::close(r.file_fd);
  if (!r.stream) return;
  char buf[4096];
  while (r.stream->read(buf, sizeof buf) > 0) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static sbx_fuzz::TempDir state;
  static sbx::DriverTable drivers{sbx::DriverInfo{"subprocess", "fake", &no_probes, &no_driver, true},
                                  sbx::DriverInfo{"deno", "fake", &no_probes, &no_driver, false}};
  static sbx::server::ApiKey alice{"alice", "alice-secret-0123456789",
                                   sbx::server::kRead | sbx::server::kWrite | sbx::server::kRun | sbx::server::kAdmin};
  FuzzedDataProvider in(data, size);
  sbx_test::FakeBackend backend;
  sbx::SandboxRecord rec;
  rec.id = sbx::new_sandbox_id();
  rec.spec.driver = in.ConsumeBool() ? "subprocess" : "deno";
  rec.spec.labels[sbx::kOwnerLabel] = "alice";
  rec.state = sbx::SandboxState::running;
  backend.add(rec);
  backend.write_file(rec.id, "/f", "content");
  auto api = sbx_fuzz::make_api(state.path, drivers, backend, alice);

  sbx::server::HttpRequest req;
  req.method = in.PickValueInArray(kMethods);
  req.path = replaced(std::string(in.PickValueInArray(kPrefixes)) + in.ConsumeRandomLengthString(64), "ID", rec.id);
  for (int n = in.ConsumeIntegralInRange(0, 4); n > 0; --n) {
    std::string key = in.ConsumeBool() ? in.PickValueInArray(kQueryKeys) : in.ConsumeRandomLengthString(8);
    std::string value = in.ConsumeRandomLengthString(32);
    req.query[key] = value;
    req.args.emplace_back(key, value);
  }
  req.content_type = in.PickValueInArray(kTypes);
  req.key = &alice;
  req.request_id = "fuzz";
  req.body = in.ConsumeRemainingBytesAsString();
  sbx::Fd body = sbx_fuzz::memfd_with(req.body);
  if (req.method == "PUT") {
    req.body_fd = body.get();
    req.body_complete = [] { return true; };
  }
  sbx::server::HttpResponse r = api->handle(req);
  drain(r);
  if (r.content_type == "application/json" && r.file_fd < 0 && !r.stream && !r.body.empty() &&
      nlohmann::json::parse(r.body, nullptr, false).is_discarded())
    std::abort();
  return 0;
}
