// Which create requests a pooled sandbox can serve (core/pool.hpp). The
// claim, fill and gc rules run against real sandboxes in tests/integration/test_pool.py.
#include "core/pool.hpp"

#include <catch2/catch.hpp>

using sbx::PoolFit;
using sbx::SandboxSpec;

namespace {
SandboxSpec pooled() {
  SandboxSpec s;
  s.driver = "subprocess";
  s.limits = {1.0, 512, 256, 1024};
  s.network = "none";
  s.workdir = "/work";
  s.idle_timeout_s = 0;
  s.ttl_s = 0;
  return s;
}
}  // namespace

TEST_CASE("pool: record fields never stand in the way of a claim", "[pool]") {
  SandboxSpec want = pooled();
  want.env = {{"A", "1"}};
  want.labels = {{"team", "x"}};
  want.idle_timeout_s = 60;
  want.ttl_s = 3600;
  want.persistent = true;
  CHECK(sbx::pool_fit(want, pooled()) == PoolFit::exact);
}

TEST_CASE("pool: cpu, memory and pids caps are changed after start, the disk cap is not", "[pool]") {
  SandboxSpec want = pooled();
  want.limits.memory_mb = 256;
  CHECK(sbx::pool_fit(want, pooled()) == PoolFit::set_limits);
  want = pooled();
  want.limits.cpus = 0.5;
  want.limits.pids = 64;
  CHECK(sbx::pool_fit(want, pooled()) == PoolFit::set_limits);
  want = pooled();
  want.limits.disk_mb = 2048;
  CHECK(sbx::pool_fit(want, pooled()) == PoolFit::none);
}

TEST_CASE("pool: driver, image and network must be the pool's", "[pool]") {
  SandboxSpec want = pooled();
  want.driver = "runsc";
  CHECK(sbx::pool_fit(want, pooled()) == PoolFit::none);
  want = pooled();
  want.image = "/srv/images/debian";
  CHECK(sbx::pool_fit(want, pooled()) == PoolFit::none);
  want = pooled();
  want.network = "jail";
  CHECK(sbx::pool_fit(want, pooled()) == PoolFit::none);
}

TEST_CASE("pool: a sandbox on a snapshot's files serves creates from that snapshot only", "[pool]") {
  SandboxSpec from_web = pooled();
  from_web.from_snapshot = "sha256:aaaa";
  CHECK(sbx::pool_fit(from_web, from_web) == PoolFit::exact);
  CHECK(sbx::pool_fit(pooled(), from_web) == PoolFit::none);  // a plain create gets no snapshot's files
  CHECK(sbx::pool_fit(from_web, pooled()) == PoolFit::none);  // nor a create --from the image's alone
  SandboxSpec other = from_web;
  other.from_snapshot = "sha256:bbbb";
  CHECK(sbx::pool_fit(other, from_web) == PoolFit::none);
}

TEST_CASE("pool: a workdir below the pool's is made at the claim, others start cold", "[pool]") {
  SandboxSpec want = pooled();
  for (const char* ok : {"/work", "/work/a", "/work/a/b"}) {
    want.workdir = ok;
    CHECK(sbx::pool_fit(want, pooled()) == PoolFit::exact);
  }
  for (const char* cold : {"/srv/app", "/workshop", "/", "/wor"}) {
    want.workdir = cold;
    CHECK(sbx::pool_fit(want, pooled()) == PoolFit::none);
  }
}
