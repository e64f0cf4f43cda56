"""Abuse, contained, with Debian's stress-ng: its cpu, vm, fork, io, pipe and
timer classes, each for a few seconds in one sandbox of a real `sbx serve`
(the host view as its image: stress-ng comes from the host, scripts/setup.sh
installs it) while the neighbour's `exec true` and /healthz must answer, as in
test_abuse.py. Where a class meets one of the sandbox's host caps, the cap is
named by its cgroup's own counter (cpu: throttled periods, memory: OOM kills,
pids: refused forks); io (sync(), a host-wide flush) and timer meet none of
them by design: their test is that the neighbour keeps answering."""
from __future__ import annotations

import shutil

import pytest

from abuse import create, cap_hits, ended_by_host_cap, offend, report, rm_leaves_nothing, summary
from abuse_workloads import STRESS, STRESS_SECONDS, stress_argv
from manager_fixtures import manager_root, managers  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.only_drivers("subprocess", "runsc")]


@pytest.mark.parametrize("stressor", list(STRESS))
def test_stress_ng_class_capped_neighbour_answers(managers, driver, stressor):
    if not shutil.which("stress-ng"):
        pytest.fail("stress-ng is missing on the host (scripts/setup.sh installs it)", pytrace=False)
    limits, _, cap = STRESS[stressor]
    m = managers.new("abuse", "server:\n  reap_interval: 1h\n", driver=driver)
    neighbour = create(m, {})
    offender = create(m, {"image": "host", "limits": limits})
    status, body, lat = offend(m, neighbour, offender, stress_argv(stressor), timeout_s=STRESS_SECONDS + 30)
    hits = cap_hits(m.state_dir, offender)
    # On runsc the memory or pids cap may hold by ending the sandbox (gVisor's own processes fall too).
    # The kernel's OOM killer may also pick stress-ng's own parent over its hogs (a loaded host makes
    # that likelier): the cap then holds by ending the command, named oom_killed (a CI run saw it).
    ended = driver == "runsc" and cap in ("memory", "pids") and ended_by_host_cap(status, body)
    ended = ended or (cap == "memory" and status == 200 and body.get("oom_killed") and body.get("exit_code") == 137)
    if not ended:
        assert status == 200, body
        out = body["stdout"] + body["stderr"]
        assert body["exit_code"] == 0 and "successful run completed" in out, summary(body)
    if cap:
        assert hits[cap] > 0, f"stress-ng {stressor} ran without meeting its {cap} cap: {hits}"
    print(f"{driver} stress-ng {stressor}: cap counters {hits}")
    report(driver, f"stress-ng {stressor}", lat)
    rm_leaves_nothing(m, f"stress-ng {stressor}", offender, neighbour)
