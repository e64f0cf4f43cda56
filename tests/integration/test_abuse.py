"""Abuse, contained: a hostile workload in one sandbox of a real `sbx serve`
while a neighbour sandbox's `exec true` and the manager's /healthz are timed.
Each offender must be capped and the cap reported by name (pids, memory,
disk, output, descriptors, inotify instances), the neighbour and /healthz must
keep answering, and after rm nothing of the offender remains. On subprocess
and runsc all eight offenders; on microvm seven (the disk filler with SBX_SOAK=1);
on deno the Python and JS offenders that apply there (no shell, no processes). The latency
bound itself (p99) is a figure for bench/abuse_neighbour.sh, not a test: a
shared CI host cannot promise one. The stress-ng classes: test_abuse_stress.py."""
from __future__ import annotations

import ctypes
import os

import pytest

from abuse import cap_hits, create, ended_by_host_cap, ended_by_oom, offend, report, rm_leaves_nothing, summary
from abuse_workloads import DENO_OFFENDERS, OFFENDERS, VM_OFFENDERS
from manager_fixtures import manager_root, managers  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.only_drivers("subprocess", "runsc")]

INOTIFY_PROBE = ["python3", "-c", "import ctypes; fd = ctypes.CDLL(None).inotify_init1(0); print(fd); assert fd >= 0"]
LOOPBACK_PROBE = ["python3", "-c", "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); "
                  "c = socket.create_connection(s.getsockname()); a = s.accept()[0]; c.sendall(b'ok'); "
                  "print(a.recv(2).decode())"]


def host_inotify_instance() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    if fd >= 0:
        os.close(fd)
    return fd


def neighbour_runs(argv, want: str):
    def check(m, neighbour):
        out = m.exec(neighbour, argv, timeout=60)
        assert out["exit_code"] == 0 and (want == "*" or out["stdout"].strip() == want), out
    return check


def inotify_elsewhere(m, neighbour):
    # Both fail if the sandbox's instances count against a budget it shares (host root's).
    assert host_inotify_instance() >= 0, "the host's root cannot make an inotify instance while a sandbox holds its own"
    neighbour_runs(INOTIFY_PROBE, "*")(m, neighbour)


def capped_at(errno: int, below: int | None = None):
    def check(r):
        words = r["stdout"].split()
        return (r["exit_code"] == 0 and words[:2] == ["capped", str(errno)]
                and (below is None or int(words[2]) < below))
    return check


# name: (check of the offender's exec result, check run during the offence or None)
CHECKS = {
    # Capped: the bomb's own shell lives on to say so (its pids budget is full, not the host's).
    "fork_bomb": (lambda r: r["stdout"] == "survived\n", None),
    "memory_hog": (lambda r: r["oom_killed"] and r["exit_code"] == 137, None),
    "output_flood": (lambda r: r.get("truncated") is True, None),
    "fd_exhauster": (capped_at(24), None),
    "thread_bomb": (lambda r: r["stdout"].startswith("capped ") and int(r["stdout"].split()[1]) < 128, None),
    "disk_filler": (lambda r: "No space left" in r["stdout"], None),
    # EMFILE at the per-user instance limit (fs.inotify.max_user_instances): the sandbox's own uid's.
    "inotify_exhauster": (capped_at(24), inotify_elsewhere),
    # runsc: gVisor's netstack keeps the connections in the sentry, whose memory cap may end it first.
    "socket_flood": (lambda r: capped_at(24)(r) or ended_by_oom(r), neighbour_runs(LOOPBACK_PROBE, "ok")),
}
# On runsc the host's pids and memory caps fall on gVisor's own processes too.
ENDS_RUNSC = {"fork_bomb", "thread_bomb"}


@pytest.mark.parametrize("workload", list(OFFENDERS))
def test_offender_capped_neighbour_and_healthz_answer(managers, driver, workload):
    limits, argv = OFFENDERS[workload]
    capped, during = CHECKS[workload]
    m = managers.new("abuse", "server:\n  reap_interval: 1h\n", driver=driver)
    neighbour = create(m, {})
    offender = create(m, {"limits": limits})
    # runsc under CI's load (the micro-VM lane's TCG beside it): 8-15 s quiet, past 30 s loaded.
    # The deadline only bounds a hang; what is checked is how the offence ended.
    status, body, lat = offend(m, neighbour, offender, argv, timeout_s=90 if driver == "runsc" else 30,
                               during=during and (lambda: during(m, neighbour)))
    if driver == "runsc" and workload in ENDS_RUNSC:
        assert ended_by_host_cap(status, body), summary(body)
    else:
        assert status == 200, body
        assert capped(body), f"{workload} was not capped as expected: " + summary(body)
    report(driver, workload, lat)
    rm_leaves_nothing(m, workload, offender, neighbour)


# TCG makes each micro-VM boot and workload cost seconds: CI runs the workloads whose cap is
# the guest's own (memory, pids, descriptors, inotify instances, its loopback) or the host's
# relay (output); SBX_SOAK=1 adds the disk filler. The guest reports each cap as the host's
# kernel does (EMFILE, RuntimeError below --pids), so the checks are the other drivers'.
VM_CHECKS = {
    "fork_bomb": CHECKS["fork_bomb"],
    "memory_hog": (lambda r: r["oom_killed"] or "memory exhausted" in r["stderr"], None),
    "output_flood": CHECKS["output_flood"],
    "disk_filler": CHECKS["disk_filler"],
    "fd_exhauster": CHECKS["fd_exhauster"],
    "thread_bomb": CHECKS["thread_bomb"],
    # The guest's root, not a host uid: its 128 instances are the guest kernel's; the host's
    # root and the neighbour micro-VM each make one meanwhile (the guest's count is not theirs).
    "inotify_exhauster": CHECKS["inotify_exhauster"],
    # EMFILE only: the guest's netstack holds the connections in the guest's RAM (~510 at the
    # guest's nofile 1024), so unlike runsc's sentry no memory cap is met first.
    "socket_flood": (capped_at(24), CHECKS["socket_flood"][1]),
}
VM_IN_CI = ["fork_bomb", "memory_hog", "output_flood", "fd_exhauster", "thread_bomb", "inotify_exhauster",
            "socket_flood"]
VM_RUN = list(VM_OFFENDERS) if os.environ.get("SBX_SOAK") == "1" else VM_IN_CI


@pytest.mark.only_drivers("microvm")
@pytest.mark.parametrize("workload", VM_RUN)
def test_offender_capped_in_a_micro_vm(managers, driver, workload):
    limits, argv = VM_OFFENDERS[workload]
    capped, during = VM_CHECKS[workload]
    m = managers.new("abuse", "server:\n  reap_interval: 1h\n", driver=driver)
    neighbour = create(m, {})
    offender = create(m, {"limits": limits})
    status, body, lat = offend(m, neighbour, offender, argv, timeout_s=60,
                               during=during and (lambda: during(m, neighbour)))
    assert status == 200, body
    assert capped(body), f"{workload} was not capped as expected: " + summary(body)
    report(driver, workload, lat)
    rm_leaves_nothing(m, workload, offender, neighbour)


# deno runs no `true` (nor any program but python3, node and deno): the neighbour's probe is a
# JS one-shot, which the agent runs in a Worker of the neighbour's own Deno process.
DENO_PROBE = ["node", "-e", "0"]


def stopped_by_output_cap(r) -> bool:
    # The manager's buffer (16 MiB a stream) truncates; the agent's own cap (1/16 of --memory)
    # then stops the command, with its marker on stderr.
    return (r.get("truncated") is True and r["exit_code"] == 137
            and "output truncated at" in r["stderr"] and "the command was stopped" in r["stderr"])


def timed_out(r) -> bool:
    return r["timed_out"] is True and r["exit_code"] == 124


# name: check of (status, body, the offender's cgroup counters read before rm)
DENO_CHECKS = {
    # Python's WebAssembly memory, sized from --memory below the cgroup's cap: MemoryError,
    # the interpreter kept (no OOM kill).
    "py_memory_hog": lambda st, r, hits: (st == 200 and r["exit_code"] == 1 and not r["oom_killed"]
                                          and r["stderr"].rstrip().endswith("MemoryError")),
    # V8's heap limit (no cgroup OOM kill; V8's report in agent.log) answers as an OOM kill.
    # HTTP 502 'agent went away' before, naming no cap.
    "js_memory_hog": lambda st, r, hits: st == 200 and r["oom_killed"] and r["exit_code"] == 137,
    "js_buffer_hog": lambda st, r, hits: st == 200 and r["oom_killed"] and hits["memory"] > 0,
    # Python is interrupted and keeps its interpreter; a JS loop costs the agent its process
    # (the supervisor starts another): both answer as a timeout.
    "py_cpu_loop": lambda st, r, hits: st == 200 and timed_out(r),
    "js_cpu_loop": lambda st, r, hits: st == 200 and timed_out(r),
    "py_output_flood": lambda st, r, hits: st == 200 and stopped_by_output_cap(r),
    "js_output_flood": lambda st, r, hits: st == 200 and stopped_by_output_cap(r),
}


@pytest.mark.only_drivers("deno")
@pytest.mark.parametrize("workload", list(DENO_OFFENDERS))
def test_offender_capped_in_a_deno_sandbox(managers, driver, workload):
    limits, argv, timeout_s = DENO_OFFENDERS[workload]
    m = managers.new("abuse", "server:\n  reap_interval: 1h\n", driver=driver)
    neighbour = create(m, {})
    offender = create(m, {"limits": limits})
    assert m.exec(neighbour, DENO_PROBE)["exit_code"] == 0
    status, body, lat = offend(m, neighbour, offender, argv, timeout_s=timeout_s, probe=DENO_PROBE)
    hits = cap_hits(m.state_dir, offender)
    print(f"deno {workload}: HTTP {status}, cgroup counters {hits}")
    report(driver, workload, lat, probe="node -e 0")
    rm_leaves_nothing(m, workload, offender, neighbour, probe=DENO_PROBE)
    if not DENO_CHECKS[workload](status, body, hits):
        pytest.fail(f"{workload} was not capped as expected: HTTP {status} " + summary(body), pytrace=False)
