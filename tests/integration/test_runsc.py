"""gVisor-specific checks of the runsc driver (run with SBX_TEST_DRIVERS=runsc).

The shared conformance tests say what every driver must do; these say that a
runsc sandbox really runs on gVisor's kernel and that rm leaves runsc nothing.
"""
from __future__ import annotations

import os
import platform
import subprocess

import pytest

from conftest import wait_until

runsc_only = pytest.mark.only_drivers("runsc")


def runsc_list(sbx) -> list[str]:
    root = os.path.join(sbx.state_dir, "runsc")
    if not os.path.isdir(root):
        return []
    r = subprocess.run(["runsc", "--root", root, "list", "-quiet"], capture_output=True, text=True, timeout=30)
    return r.stdout.split()


def runsc_processes(sid: str) -> list[str]:
    out = []
    for e in os.scandir("/proc"):
        if not e.name.isdigit():
            continue
        try:
            cmd = open(f"/proc/{e.name}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("runsc") and sid in cmd:
            out.append(f"{e.name}: {cmd[:200]}")
    return out


@runsc_only
def test_runs_on_gvisors_kernel(sbx, make_sandbox, driver):
    sid = make_sandbox(driver=driver)
    r = sbx.exec(sid, "cat", "/proc/version").ok()
    host = open("/proc/version").read()
    assert r.out != host, "the sandbox sees the host kernel's /proc/version"
    # gVisor presents its own fixed kernel version, never the host's release.
    rel = sbx.exec(sid, "uname", "-r").ok().out.strip()
    assert rel != platform.release(), f"uname -r inside is the host's {rel}"
    # Host kernel interfaces that gVisor does not implement are absent.
    r = sbx.sh(sid, "test -e /proc/sys/kernel/modprobe || test -e /sys/kernel/debug/tracing && echo HOST || echo none")
    assert r.out.strip() == "none", r


@runsc_only
def test_agent_is_the_containers_init(sbx, make_sandbox, driver):
    sid = make_sandbox(driver=driver)
    r = sbx.exec(sid, "cat", "/proc/1/cmdline").ok()
    assert b"sbx-agent" in r.stdout, r
    # every exec goes through that agent: runsc knows one container and one process tree
    assert runsc_list(sbx).count(sid) == 1


@runsc_only
def test_agent_socket_cannot_be_replaced(sbx, make_sandbox, driver):
    # The share holding the agent's socket is writable only until the socket
    # exists; sandboxed code must not swap in a listener of its own.
    sid = make_sandbox(driver=driver)
    for script in ("rm -f /.sbx/agent.sock", "mv /.sbx/agent.sock /.sbx/x", "touch /.sbx/planted"):
        r = sbx.sh(sid, script)
        assert r.rc != 0, f"`{script}` succeeded inside the sandbox: {r!r}"
    assert not os.path.exists(os.path.join(sbx.sandbox_dir(sid), "sock", "planted"))
    assert sbx.exec(sid, "echo", "still-mine").ok().out == "still-mine\n"


@runsc_only
def test_writable_layer_survives_between_execs(sbx, make_sandbox, driver):
    sid = make_sandbox(driver=driver)
    sbx.sh(sid, "echo kept > /work/f && echo tmp > /tmp/t").ok()
    assert sbx.sh(sid, "cat /work/f /tmp/t").ok().out == "kept\ntmp\n"


@runsc_only
def test_rm_leaves_nothing_for_runsc(sbx, driver):
    sid = sbx.create(driver=driver)
    assert sid in runsc_list(sbx)
    assert runsc_processes(sid), "no runsc sandbox/gofer process for a running sandbox?"
    sbx.remove(sid).ok()
    assert sid not in runsc_list(sbx), "runsc still lists the container after rm"
    left = wait_until(lambda: not runsc_processes(sid), 5)
    assert left, f"runsc processes left after rm: {runsc_processes(sid)}"
    assert not os.path.exists(sbx.sandbox_dir(sid))
    assert not sbx.cgroup_dirs(sid)


@runsc_only
def test_dead_sandbox_is_reported(sbx, driver):
    sid = sbx.create(driver=driver)
    try:
        st = subprocess.run(["runsc", "--root", os.path.join(sbx.state_dir, "runsc"), "kill", sid, "KILL"],
                            capture_output=True, timeout=30)
        assert st.returncode == 0, st
        assert wait_until(lambda: (sbx.record(sid) or {}).get("state") == "dead", 10), sbx.record(sid)
        r = sbx.exec(sid, "true")
        assert r.rc != 0 and "died" in r.err + r.out, r
    finally:
        sbx.remove(sid)
    assert sid not in runsc_list(sbx)


@runsc_only
def test_oom_named(sbx, make_sandbox, driver):
    sid = make_sandbox("--memory", "64M", driver=driver)
    r = sbx.exec(sid, "python3", "-c", "x=[]\nwhile True: x.append(b'a'*1000000)", timeout=60)
    assert r.rc == 137, r
    assert "out of memory" in r.err.lower(), r
    # gVisor 20221219 cannot survive the kernel killing its sentry or a ptrace
    # stub: the sandbox is reported dead, not left "running".
    assert (sbx.record(sid) or {}).get("state") == "dead", sbx.record(sid)


@runsc_only
def test_doctor_names_platform(sbx, driver):
    r = sbx.run("doctor", "--driver", "runsc", timeout=60)
    text = r.out + r.err
    assert "platform" in text and ("ptrace" in text or "kvm" in text), r
    assert "smoke run" in text, r
