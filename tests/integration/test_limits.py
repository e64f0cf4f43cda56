"""Resource limits: pids, memory, disk, CPU. A sandbox that hits a limit must
not take the host or its neighbours down with it."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import skip_or_fail, wait_until



subprocess_only = pytest.mark.only_drivers("subprocess")


def need_python(sbx, sid):
    if sbx.exec(sid, "python3", "-c", "pass").rc != 0:
        pytest.skip("python3 is not available inside this sandbox's image")


def read_knob(sbx, sid, name):
    for d in sbx.cgroup_dirs(sid):
        p = Path(d, name)
        if p.exists():
            return p.read_text().strip()
    return None


def test_fork_bomb_contained(sbx, make_sandbox, driver):
    other = make_sandbox(driver=driver)
    bomb = make_sandbox("--pids", "64", "--cpus", "0.5", driver=driver)
    # The bomb's own shell stays (sleep) so the exec is still running meanwhile, and
    # its messages go to /dev/null so closed output pipes cannot end it early.
    p = sbx.popen("exec", "--timeout", "20s", bomb, "--", "bash", "-c",
                  "exec 2>/dev/null >/dev/null; f(){ f|f& }; f; sleep 30",
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)  # let it fill its pids budget
        if driver == "subprocess":
            # On a loaded host the bomb may need longer to take off.
            wait_until(lambda: int(read_knob(sbx, bomb, "pids.current") or 0) >= 32, 15)
            cur = read_knob(sbx, bomb, "pids.current")
            assert cur is not None and int(cur) <= 64, f"pids.current = {cur} with --pids 64"
            # Sanity: the bomb really runs (else this test proves nothing).
            assert int(cur) >= 32, f"pids.current = {cur}: the fork bomb did not take off"
            ev = read_knob(sbx, bomb, "pids.events")
            assert ev is None or int(ev.split()[-1]) > 0, f"pids.events = {ev!r}: the limit never bit"
        # The host can still fork and run things meanwhile.
        for _ in range(10):
            assert subprocess.run(["true"], timeout=10).returncode == 0
        # A neighbour sandbox is unaffected.
        r = sbx.exec(other, "sh", "-c", "echo ok", timeout=30)
        assert r.rc == 0 and r.out == "ok\n", r
        # And removing the bombed sandbox cleans it up quickly.
        t0 = time.monotonic()
        r = sbx.run("rm", bomb, timeout=60)
        elapsed = time.monotonic() - t0
        assert r.rc == 0, r
        assert elapsed < 8, f"sbx rm of the fork-bombed sandbox took {elapsed:.1f} s"
        if driver == "subprocess":
            left = [d for d in sbx.cgroup_dirs(bomb) if os.path.isdir(d)]
            assert not left, f"cgroups remain after rm: {left}"
    finally:
        try:
            p.wait(timeout=25)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_memory_hog_killed(sbx, make_sandbox, driver):
    other = make_sandbox(driver=driver)
    sid = make_sandbox("--memory", "64M", driver=driver)
    need_python(sbx, sid)
    # In 1 MiB pieces: one 300 MiB request is refused outright (MemoryError)
    # where the whole machine is smaller than that, as a micro-VM's guest is.
    r = sbx.exec(sid, "python3", "-c", "b = [b'x' * (1 << 20) for _ in range(300)]; print('survived', len(b))",
                 timeout=120)
    assert r.rc == 137, r
    assert "survived" not in r.out
    assert "out of memory" in r.err, r
    assert "(limit 64M)" in r.err, r  # the sandbox's own limit, read only when an OOM kill needs it
    if driver == "runsc":
        # gVisor (20221219) cannot survive the kernel killing its sentry or a
        # stub, so the limit ends the whole sandbox; it must say so, not linger as running.
        assert "sandbox" in r.err and "ended" in r.err, r
        rec = sbx.record(sid)
        assert rec is not None and rec["state"] == "dead", rec
        assert "memory" in rec.get("error", ""), rec
    else:
        # The sandbox itself carries on.
        assert sbx.exec(sid, "echo", "alive", timeout=30).ok().out == "alive\n"
    # Its neighbour carries on.
    assert sbx.exec(other, "echo", "fine", timeout=30).ok().out == "fine\n"


@subprocess_only
def test_the_oom_killer_takes_the_command_never_the_agent(sbx, sandbox):
    # The agent is the sandbox's pid 1, and a namespace's pid 1 is fair game
    # for the OOM killer: when it was the biggest process in a full sandbox
    # (a big write's page cache on cgroup v1, small commands), the sandbox
    # died. Its commands score 1000 (the first to go); the agent keeps sbx's.
    r = sbx.sh(sandbox, "cat /proc/1/oom_score_adj /proc/self/oom_score_adj")
    assert r.rc == 0, r
    agent, command = r.out.split()
    assert agent == "0", r
    assert command == "1000", r
    # Background processes are the agent's commands too.
    r = sbx.run("exec", "-d", sandbox, "--", "sleep", "30")
    assert r.rc == 0, r
    r = sbx.sh(sandbox, "for p in /proc/[0-9]*; do [ \"$(cat $p/comm)\" = sleep ] && cat $p/oom_score_adj; done")
    assert r.out.split() == ["1000"], r


def test_disk_cap(sbx, make_sandbox, driver):
    sid = make_sandbox("--disk", "8M", driver=driver)
    r = sbx.sh(sid, "dd if=/dev/zero of=/tmp/big bs=1M count=32", timeout=60)
    assert r.rc != 0, r
    assert "No space left on device" in r.err, r
    r = sbx.sh(sid, "rm -f /tmp/big && echo fine > /work/small && cat /work/small").ok()
    assert r.out == "fine\n"


def cgroup_cpu_seconds(sbx, sid):
    """CPU time the host charged to the sandbox's cgroup (what --cpus caps), or None."""
    usage = read_knob(sbx, sid, "cpuacct.usage")
    if usage is not None:
        return int(usage) / 1e9
    stat = read_knob(sbx, sid, "cpu.stat")
    if stat is not None:
        fields = dict(line.split() for line in stat.splitlines())
        if "usage_usec" in fields:
            return int(fields["usage_usec"]) / 1e6
    return None


def cgroup_throttled_seconds(sbx, sid):
    """How long the host held the sandbox's cgroup back for its CPU quota, or None."""
    stat = read_knob(sbx, sid, "cpu.stat")
    if stat is None:
        return None
    fields = dict(line.split() for line in stat.splitlines())
    if "throttled_usec" in fields:
        return int(fields["throttled_usec"]) / 1e6
    if "throttled_time" in fields:
        return int(fields["throttled_time"]) / 1e9
    return None


@pytest.mark.skip_drivers(deno="Pyodide's time.process_time() counts wall time, so the measurement cannot "
                               "see the cap; test_cgroup_knobs_match_flags checks the deno sandbox's cpu quota")
@pytest.mark.xfail_drivers(microvm="a guest's own clocks cannot see the host throttling its vCPU (no steal "
                                   "time under TCG), so this in-guest measurement reads ~1.0; to be measured from the host")
def test_cpu_cap(sbx, make_sandbox, driver):
    sid = make_sandbox("--cpus", "0.5", driver=driver)
    need_python(sbx, sid)
    script = (
        "import time\n"
        "t0 = time.monotonic(); c0 = time.process_time()\n"
        "while time.monotonic() - t0 < 2.0: pass\n"
        "print(time.process_time() - c0, time.monotonic() - t0)\n"
    )
    # The host's count where there is one: gVisor's in-sandbox process_time
    # counts the time a throttled task waits as running.
    host_before, throttled_before = cgroup_cpu_seconds(sbx, sid), cgroup_throttled_seconds(sbx, sid)
    r = sbx.exec(sid, "python3", "-c", script, timeout=60).ok()
    host_after, throttled_after = cgroup_cpu_seconds(sbx, sid), cgroup_throttled_seconds(sbx, sid)
    cpu, wall = (float(x) for x in r.out.split())
    if host_before is not None and host_after is not None:
        cpu = host_after - host_before
    elif driver == "runsc":
        # No usage counter (v1 here has cpu without cpuacct): the quota's own
        # throttling count shows the cap bit; half of 2 s is the expectation.
        if throttled_before is None or throttled_after is None:
            skip_or_fail("no cgroup CPU counter on this host to measure the runsc sandbox by")
        held = throttled_after - throttled_before
        assert held / wall > 0.2, f"--cpus 0.5: the busy loop was throttled only {held:.2f} s in {wall:.2f} s"
        return
    ratio = cpu / wall
    assert ratio < 0.8, f"--cpus 0.5: a busy loop got {cpu:.2f} CPU-s in {wall:.2f} s (ratio {ratio:.2f})"
    assert ratio > 0.05, f"the busy loop hardly ran ({cpu:.2f} CPU-s in {wall:.2f} s)"


def cpu_period_us(sbx, sid):
    period = read_knob(sbx, sid, "cpu.cfs_period_us")
    return int(period) if period is not None else int(read_knob(sbx, sid, "cpu.max").split()[1])


def cpu_cap(sbx, sid):
    quota = read_knob(sbx, sid, "cpu.cfs_quota_us")
    if quota is None:
        quota = read_knob(sbx, sid, "cpu.max").split()[0]
    return int(quota) / cpu_period_us(sbx, sid)


@pytest.mark.only_drivers("subprocess", "runsc")
def test_the_cpu_cap_is_in_force_when_create_returns(sbx, make_sandbox, driver):
    # runsc boots uncapped (gVisor's boot is Go on every core) and the cap is
    # set once the agent answers: still before create returns, before any exec.
    sid = make_sandbox("--cpus", "0.25", driver=driver)
    assert cpu_cap(sbx, sid) == pytest.approx(0.25)


@pytest.mark.only_drivers("subprocess", "runsc")
@pytest.mark.parametrize("cpus, period", [("1", 20_000), ("0.25", 20_000), ("0.01", 100_000)])
def test_a_cpu_caps_period_is_20ms_unless_its_quota_would_fall_under_1ms(sbx, make_sandbox, driver, cpus, period):
    # A capped sandbox that spends its quota early waits out the rest of the
    # period: with the kernel's 100 ms, a manager's p99 at 8 clients was 23 ms
    # against 14 ms with 20 ms (docs/speed.md). A cap of 0.01 CPU would get a
    # quota of 0.2 ms, under the kernel's least (1 ms): its period is longer.
    sid = make_sandbox("--cpus", cpus, driver=driver)
    assert cpu_period_us(sbx, sid) == period
    assert cpu_cap(sbx, sid) == pytest.approx(float(cpus))


@subprocess_only
def test_cgroup_knobs_match_flags(sbx, make_sandbox, driver):
    sid = make_sandbox("--memory", "96M", "--pids", "50", "--cpus", "0.25", driver=driver)
    mem = read_knob(sbx, sid, "memory.limit_in_bytes") or read_knob(sbx, sid, "memory.max")
    assert mem == str(96 << 20), mem
    assert read_knob(sbx, sid, "pids.max") == "50"
    assert cpu_cap(sbx, sid) == pytest.approx(0.25)
