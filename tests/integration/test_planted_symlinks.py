"""A sandbox's own directories (/root, /tmp, /var/tmp, its workdir and their
parents) are made and handed over by the host's root each time a sandbox
starts on a writable layer: again after a reboot (`sbx start`) and on a copy of
another sandbox's layer (`sbx fork`, `create --from`). That layer holds what
the sandboxed code wrote, so a component of one of those paths may be a
symlink it planted, pointing at a host path. The host must never follow it:
no host directory made, chowned or bind-mounted into the sandbox."""
from __future__ import annotations

import os

import pytest

from test_disks import simulate_reboot

pytestmark = pytest.mark.only_drivers("subprocess", "runsc")

WORKDIR = "/tmp/w/deep"
ROOT = ("-w", "/")


@pytest.fixture
def victim(tmp_path):
    """A host directory owned by root, what the planted symlink points at."""
    v = tmp_path / "victim"
    v.mkdir(mode=0o755)
    (v / "keep").write_text("host\n")
    os.chown(v, 0, 0)
    return v


def plant(sbx, sid, victim) -> None:
    # /tmp is the sandbox's own: it may replace /tmp/w (its workdir's parent) with anything.
    # (mv, not rm: on runsc the workdir is a mount point, which a rename carries along.)
    r = sbx.sh(sid, f"cd / && mv /tmp/w /tmp/w.old && ln -s {victim} /tmp/w && ls -ld /tmp/w")
    assert r.rc == 0 and "->" in r.out, r


def assert_untouched(victim) -> None:
    st = os.stat(victim)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o755), f"the host's {victim} was chowned/chmodded: {st}"
    assert sorted(os.listdir(victim)) == ["keep"], f"the host made something in {victim}: {os.listdir(victim)}"
    with open("/proc/self/mountinfo") as f:
        assert not [line for line in f if str(victim) in line], f"{victim} is mounted somewhere"


@pytest.mark.parametrize("how", ["start", "fork"])
def test_a_planted_symlink_over_the_workdirs_parent_never_reaches_the_host(sbx, make_sandbox, driver, victim, how):
    sid = make_sandbox("--persistent", "--workdir", WORKDIR, driver=driver)
    plant(sbx, sid, victim)
    if how == "start":
        simulate_reboot(sbx, sid)
        r = sbx.run("start", sid, timeout=120)
        assert r.rc == 0, r
        target = sid
    else:
        target = sbx.run("fork", sid, timeout=120).ok().out.strip()
        sbx.created.append(target)
    try:
        assert_untouched(victim)
        # What the sandbox then writes through its symlink stays in its own files.
        # (-w /: the workdir is gone, replaced by the symlink.)
        sbx.sh(target, f"echo mine > {WORKDIR}/x 2>/dev/null; echo mine > /tmp/w/y 2>/dev/null; true", flags=ROOT).ok()
        assert_untouched(victim)
        # Its other own directories are still its own, and it still runs.
        assert sbx.sh(target, "echo ok > /tmp/z && cat /tmp/z", flags=ROOT).ok().out == "ok\n"
    finally:
        if target != sid:
            sbx.remove(target)
