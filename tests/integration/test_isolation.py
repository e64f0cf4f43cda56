"""What a sandbox must not see or do: host files, processes, network, privileges.

Tests marked only_drivers("subprocess") look at host-side details of the
subprocess driver (uid maps, /proc/<pid>/status of its agent); the rest hold
for every driver.
"""
from __future__ import annotations

import os
import platform
import re
import secrets
import shutil
import socket
import threading
from pathlib import Path

import pytest

from conftest import REPO, proc_status, wait_until

subprocess_only = pytest.mark.only_drivers("subprocess")


def need_python(sbx, sid):
    if sbx.exec(sid, "python3", "-c", "pass").rc != 0:
        pytest.skip("python3 is not available inside this sandbox's image")


# --------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------


@pytest.fixture
def host_markers():
    """Marker files in host places a sandbox must not see: /root, /home."""
    token = "sbxit-marker-" + secrets.token_hex(4)
    made = []
    for parent in ("/root", "/home"):
        d = Path(parent, token)
        try:
            d.mkdir(parents=True)
        except OSError as e:
            pytest.skip(f"cannot create a host marker under {parent}: {e}")
        (d / "secret.txt").write_text(f"host secret {token}\n")
        made.append(d)
    yield token, made
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


def test_host_files_invisible(sbx, sandbox, host_markers):
    token, dirs = host_markers
    for d in dirs:
        r = sbx.sh(sandbox, f"ls -a {d.parent}; cat {d}/secret.txt")
        assert token not in r.out, f"the sandbox sees the host's {d}: {r!r}"
        assert r.rc != 0, f"cat of the host's {d}/secret.txt succeeded inside: {r!r}"
    r = sbx.sh(sandbox, f"find / -path /proc -prune -o -path /sys -prune -o -path /usr -prune -o "
                        f"-name '{token}*' -print 2>/dev/null; true").ok()
    assert token not in r.out, r


def test_state_root_and_repo_invisible(sbx, sandbox):
    for path in (sbx.state_dir, f"{sbx.state_dir}/sandboxes/{sandbox}", str(REPO), str(REPO / "build" / "sbx")):
        r = sbx.sh(sandbox, f"ls -d '{path}' 2>&1 || echo MISSING")
        assert "MISSING" in r.out, f"{path} is visible inside the sandbox: {r!r}"


def test_base_layer_unwritable_and_own_dirs_writable(sbx, sandbox):
    for script in ("touch /usr/bin/sbxit-x", "echo evil >> /etc/passwd", "touch /bin/sbxit-x",
                   "mkdir /usr/sbxit-dir", "touch /lib/sbxit-x"):
        r = sbx.sh(sandbox, script)
        assert r.rc != 0, f"`{script}` succeeded inside the sandbox: {r!r}"
    assert not os.path.exists("/usr/bin/sbxit-x") and not os.path.exists("/usr/sbxit-dir")
    assert "evil" not in Path("/etc/passwd").read_text()
    r = sbx.sh(sandbox, "for d in /tmp /work /root /var/tmp; do echo ok > $d/w && cat $d/w || exit 1; done").ok()
    assert r.out == "ok\n" * 4


def test_sandboxes_do_not_see_each_other(sbx, make_sandbox, driver):
    a = make_sandbox(driver=driver)
    b = make_sandbox(driver=driver)
    token = secrets.token_hex(6)
    sbx.sh(a, f"echo {token} > /tmp/marker-{token} && echo {token} > /work/marker-{token}").ok()
    r = sbx.sh(b, f"cat /tmp/marker-{token} /work/marker-{token} 2>&1; grep -rs {token} /tmp /work; true")
    assert token not in r.out.replace(f"marker-{token}", ""), f"B sees A's files: {r!r}"
    marker = f"sleep 7{int(token[:4], 16)}"
    p = sbx.popen("exec", a, "--", "sh", "-c", f"exec {marker}")
    try:
        assert wait_for(lambda: marker in sbx.sh(a, "ps -eo args").out, 5), "A's sleep never showed up in A"
        r = sbx.sh(b, "ps -eo args").ok()
        assert marker not in r.out, f"B sees A's processes: {r.out}"
    finally:
        p.kill()
        p.communicate()


# --------------------------------------------------------------------------
# processes, hostname
# --------------------------------------------------------------------------


def test_host_processes_invisible(sbx, sandbox):
    r = sbx.sh(sandbox, "ps -eo pid=,args=").ok()
    lines = [l.strip() for l in r.out.splitlines() if l.strip()]
    assert len(lines) <= 4, f"the sandbox sees more than its own processes:\n{r.out}"
    # PID 1 is the sandbox's agent: named for its sandbox where the host sees it (subprocess: issue 10
    # defect 7), its own path inside gVisor (runsc's host processes are runsc's).
    pid, name = lines[0].split()[:2]
    assert pid == "1" and (name == "sbx-sandbox" or name.endswith("sbx-agent")), r.out
    host_pid = os.getpid()
    r = sbx.sh(sandbox, f"kill -0 {host_pid} && echo VISIBLE || echo invisible")
    assert "invisible" in r.out, f"kill -0 of host pid {host_pid} worked inside: {r!r}"
    r = sbx.sh(sandbox, f"test -e /proc/{host_pid} && echo VISIBLE || echo invisible")
    assert "invisible" in r.out


def test_hostname_is_sandbox(sbx, sandbox):
    r = sbx.sh(sandbox, "cat /proc/sys/kernel/hostname; uname -n").ok()
    assert r.out == "sandbox\nsandbox\n", r


# --------------------------------------------------------------------------
# network
# --------------------------------------------------------------------------


def test_only_loopback_interface(sbx, sandbox):
    r = sbx.exec(sandbox, "cat", "/proc/net/dev").ok()
    ifaces = [l.split(":")[0].strip() for l in r.out.splitlines()[2:] if ":" in l]
    assert ifaces == ["lo"], f"interfaces inside: {ifaces}"


@pytest.fixture
def host_tcp_server():
    """A TCP listener on the host's 127.0.0.1 that records any connection."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    hits = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, addr = srv.accept()
            except OSError:
                continue
            hits.append(addr)
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], hits
    stop.set()
    t.join(2)
    srv.close()


def test_host_loopback_unreachable(sbx, sandbox, host_tcp_server):
    port, hits = host_tcp_server
    # Sanity: the server answers on the host.
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    assert wait_for(lambda: len(hits) == 1)
    hits.clear()
    script = (f"import socket,sys\n"
              f"s=socket.socket(); s.settimeout(3)\n"
              f"try:\n s.connect(('127.0.0.1',{port})); print('CONNECTED')\n"
              f"except OSError as e: print('refused', e)\n")
    r = sbx.exec(sandbox, "python3", "-c", script)
    if r.rc == 127:
        r = sbx.exec(sandbox, "bash", "-c",
                     f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo CONNECTED || echo refused")
    assert "CONNECTED" not in r.out, f"the sandbox reached the host's 127.0.0.1:{port}: {r!r}"
    assert not hits, f"the host server got a connection from the sandbox: {hits}"


def wait_for(pred, timeout=2.0):
    return wait_until(pred, timeout, 0.02)


# --------------------------------------------------------------------------
# identity and privileges
# --------------------------------------------------------------------------


def test_root_inside(sbx, sandbox):
    assert sbx.sh(sandbox, "id -u; id -g").ok().out == "0\n0\n"


def _ids(status: dict, key: str) -> list[int]:
    return [int(x) for x in status[key].split()]


@subprocess_only
def test_host_sees_unprivileged_uid(sbx, sandbox, driver):
    rec = sbx.record(sandbox)
    pid = rec["agent_pid"]
    st = proc_status(pid)
    assert st is not None, f"agent pid {pid} from ls --json does not exist on the host"
    for key in ("Uid", "Gid"):
        ids = _ids(st, key)
        assert all(i >= 65536 for i in ids), f"agent {key} on the host is {ids}: privileged or in the host's range"
    # Every process of a running command too, not only the agent.
    p = sbx.popen("exec", sandbox, "--", "sleep", "5")
    try:
        procs = wait_for(lambda: (lambda ps: ps if len(ps) >= 2 else None)(cgroup_procs(sbx, sandbox)), 3.0)
        assert procs, f"expected the agent and sleep in the sandbox's cgroup, got {cgroup_procs(sbx, sandbox)}"
        for q in procs:
            s = proc_status(q)
            if s is None:
                continue
            uids = _ids(s, "Uid")
            assert 0 not in uids and min(uids) >= 65536, f"pid {q} ({s.get('Name')}) runs as host uid {uids}"
    finally:
        p.kill()
        p.communicate()


def cgroup_procs(sbx, sid) -> list[int]:
    for d in sbx.cgroup_dirs(sid):
        try:
            return [int(x) for x in Path(d, "cgroup.procs").read_text().split()]
        except OSError:
            continue
    return []


@subprocess_only
def test_two_sandboxes_use_different_uid_ranges(sbx, make_sandbox, driver):
    a, b = make_sandbox(driver=driver), make_sandbox(driver=driver)
    ra, rb = sbx.record(a), sbx.record(b)
    assert abs(ra["uid_base"] - rb["uid_base"]) >= 65536, (ra["uid_base"], rb["uid_base"])
    ua = _ids(proc_status(ra["agent_pid"]), "Uid")[0]
    ub = _ids(proc_status(rb["agent_pid"]), "Uid")[0]
    assert ua != ub, f"both sandboxes' agents run as host uid {ua}"
    assert abs(ua - ub) >= 65536, f"host uids {ua} and {ub} are in overlapping 65536-id ranges"
    for sid, uid in ((a, ua), (b, ub)):
        r = sbx.exec(sid, "cat", "/proc/self/uid_map").ok()
        inside, outside, count = (int(x) for x in r.out.split())
        assert inside == 0 and outside == uid and count <= 65536, r.out


@subprocess_only
def test_no_capabilities_nonewprivs_seccomp(sbx, sandbox, driver):
    r = sbx.exec(sandbox, "cat", "/proc/self/status").ok()
    st = dict(line.split(":", 1) for line in r.out.splitlines() if ":" in line)
    st = {k: v.strip() for k, v in st.items()}
    for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[key], 16) == 0, f"{key} = {st[key]}"
    assert st["NoNewPrivs"] == "1"
    assert st["Seccomp"] == "2"
    # Root can regain nothing through exec or setuid, and the bits are locked
    # (the agent sets them once for every command; prctl 27 = PR_GET_SECUREBITS).
    need_python(sbx, sandbox)
    r = sbx.exec(sandbox, "python3", "-c", "import ctypes; print(ctypes.CDLL(None).prctl(27, 0, 0, 0, 0))").ok()
    assert int(r.out) == 0xEF, f"securebits {int(r.out):#x}"


def test_privileged_syscalls_refused(sbx, sandbox):
    for script in ("mount -t tmpfs x /mnt", "unshare -r true", "unshare -m true", "unshare -n true",
                   "umount /proc", "chroot / true"):
        r = sbx.sh(sandbox, script)
        assert r.rc != 0, f"`{script}` succeeded inside the sandbox: {r!r}"


@pytest.mark.skip_drivers(deno="Pyodide (the deno driver's Python) makes no system calls of its own (no libc "
                               "syscall()); its confinement is tested in test_deno.py")
def test_privileged_syscalls_refused_raw(sbx, sandbox):
    if platform.machine() != "x86_64":
        pytest.skip(f"raw syscall numbers below are for x86_64, not {platform.machine()}")
    need_python(sbx, sandbox)
    script = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return r, ctypes.get_errno()
res = {}
res['mount'] = (libc.mount(b"x", b"/mnt", b"tmpfs", 0, None), ctypes.get_errno())
res['unshare_user'] = (libc.unshare(0x10000000), ctypes.get_errno())
res['unshare_ns'] = (libc.unshare(0x00020000), ctypes.get_errno())
res['keyctl'] = sc(250, 0, 0, 0, 0, 0)             # keyctl(KEYCTL_GET_KEYRING_ID, ...)
res['add_key'] = sc(248, 0, 0, 0, 0, 0)
res['bpf'] = sc(321, 0, 0, 0)                        # bpf(BPF_MAP_CREATE, NULL, 0)
res['setns'] = sc(308, 0, 0)
res['clone_newuser'] = sc(56, 0x10000000 | 17, 0, 0, 0, 0)  # clone(CLONE_NEWUSER|SIGCHLD)
if res['clone_newuser'][0] == 0:
    os._exit(0)
for k, (rc, err) in sorted(res.items()):
    print(k, rc, err)
"""
    r = sbx.exec(sandbox, "python3", "-c", script).ok()
    results = {line.split()[0]: (int(line.split()[1]), int(line.split()[2])) for line in r.out.splitlines()}
    assert set(results) >= {"mount", "unshare_user", "keyctl", "bpf", "add_key", "setns", "clone_newuser"}, r
    for name, (rc, err) in results.items():
        assert rc == -1, f"{name} succeeded inside the sandbox (returned {rc})"


@pytest.mark.skip_drivers(deno="Pyodide (the deno driver's Python) has no ptrace and no /proc of its own")
def test_commands_cannot_reach_the_agents_memory(sbx, sandbox):
    """A command's shim shares the agent's memory (agent/spawn.cpp): neither
    it nor the agent may be traced, or have its memory read or written
    through /proc, by the command it runs."""
    need_python(sbx, sandbox)
    script = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
shim = os.getppid()
print("shim", shim, open(f"/proc/{shim}/stat").read().split(")")[1].split()[0])
for pid in (shim, 1):
    r = libc.ptrace(ctypes.c_long(16), ctypes.c_long(pid), None, None)   # PTRACE_ATTACH
    print("attach", pid, r, ctypes.get_errno())
    r = libc.ptrace(ctypes.c_long(0x4206), ctypes.c_long(pid), None, None)   # PTRACE_SEIZE
    print("seize", pid, r, ctypes.get_errno())
    for mode in ("rb", "r+b"):
        try:
            open(f"/proc/{pid}/mem", mode).close()
            print("mem", pid, mode, "opened")
        except OSError as e:
            print("mem", pid, mode, "refused", e.errno)
"""
    r = sbx.exec(sandbox, "python3", "-c", script).ok()
    lines = [line.split() for line in r.out.splitlines()]
    assert lines[0][0] == "shim" and int(lines[0][1]) > 1, r
    for words in lines[1:]:
        if words[0] in ("attach", "seize"):
            assert int(words[2]) == -1, f"the command could {words[0]} pid {words[1]}: {r.out}"
        else:
            assert words[3] == "refused", f"the command opened /proc/{words[1]}/mem ({words[2]}): {r.out}"


# --------------------------------------------------------------------------
# the agent's channel is the host's, never the sandboxed code's
# --------------------------------------------------------------------------


def test_commands_get_no_extra_descriptors(sbx, sandbox):
    # A command starts with stdin, stdout and stderr only: any other inherited
    # descriptor (the agent's socket, its binary) is a handle into the agent.
    # `ls` lists its own descriptors; the one it opened to read the directory
    # points at /proc/<pid>/fd and is not inherited.
    r = sbx.exec(sandbox, "ls", "-l", "/proc/self/fd/").ok()
    fds = {}
    for line in r.out.splitlines():
        if " -> " in line:
            name, target = line.split(" -> ", 1)
            fds[name.split()[-1]] = target
    assert {"0", "1", "2"} <= set(fds), r.out
    extra = {fd: t for fd, t in fds.items()
             if fd not in ("0", "1", "2") and not re.fullmatch(r"/proc/\d+/fd", t)}
    assert not extra, f"commands inherit descriptors beyond stdio: {extra}"


STEALER = r"""
import os, select, socket, sys
# Take any socket descriptor this command inherited and answer the host on it.
for fd in range(3, 64):
    try:
        s = socket.socket(fileno=fd)
        if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            break
        s.detach()
    except OSError:
        continue
else:
    print("no listening socket inherited"); sys.exit(0)
print("stealing on fd", fd, flush=True)
if os.fork():
    os._exit(0)
os.setsid()
import time
s.setblocking(False)  # keep the shared description non-blocking (see the freeze test)
end = time.monotonic() + 6
while time.monotonic() < end:  # spin: win the race for each connection against the agent's poll
    try:
        c, _ = s.accept()
    except BlockingIOError:
        continue
    with open("/tmp/stolen", "a") as f:
        f.write("x\n")
    c.close()
"""


def test_sandboxed_code_cannot_intercept_host_connections(sbx, make_sandbox, driver):
    # Two CPUs so the spinning thief is not throttled together with the agent
    # (as many as the host has, where it has fewer: more are refused).
    sandbox = make_sandbox("--cpus", str(min(2, os.sysconf("SC_NPROCESSORS_ONLN"))), driver=driver)
    need_python(sbx, sandbox)
    r = sbx.exec(sandbox, "python3", "-c", STEALER, timeout=30).ok()
    failures = []
    for i in range(8):
        r = sbx.exec(sandbox, "echo", f"ok{i}", timeout=20)
        if r.rc != 0 or r.out != f"ok{i}\n":
            failures.append(r)
    assert not failures, (f"{len(failures)} of 8 host execs were intercepted by code inside the sandbox; "
                          f"first: {failures[0]!r}")


def test_sandboxed_code_cannot_freeze_the_agent(sbx, sandbox):
    need_python(sbx, sandbox)
    # Flip every inherited socket to blocking mode: if one is the agent's
    # listening socket (a shared file description), its accept loop blocks.
    script = ("import socket\n"
              "for fd in range(3, 64):\n"
              "    try: socket.socket(fileno=fd).setblocking(True)\n"
              "    except OSError: pass\n")
    sbx.exec(sandbox, "python3", "-c", script, timeout=30)
    for i in range(3):
        r = sbx.exec(sandbox, "echo", f"alive{i}", timeout=8)
        assert r.rc == 0 and r.out == f"alive{i}\n", r


@pytest.mark.only_drivers("subprocess")
def test_parallel_creates_get_distinct_uid_ranges(sbx, driver):
    import subprocess as sp
    procs = [sbx.popen("create", "--driver", driver) for _ in range(4)]
    ids = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        sid = out.decode().strip()
        if sid:
            sbx.created.append(sid)
            ids.append(sid)
        assert p.returncode == 0, err
    try:
        recs = {r["id"]: r for r in sbx.ls() if r["id"] in ids}
        bases = sorted(r["uid_base"] for r in recs.values())
        assert len(recs) == 4 and len(set(bases)) == 4, bases
        assert all(b - a >= 65536 for a, b in zip(bases, bases[1:])), bases
    finally:
        sbx.remove(*ids)
    del sp


# --------------------------------------------------------------------------
# more host resources a sandbox must not reach
# --------------------------------------------------------------------------


@pytest.mark.skip_drivers(deno="Pyodide (the deno driver's Python) has no AF_UNIX sockets; its network "
                               "confinement is tested in test_deno.py")
def test_host_abstract_unix_socket_unreachable(sbx, sandbox):
    # Abstract unix sockets belong to the network namespace, not the filesystem.
    name = "sbxit-" + secrets.token_hex(4)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("\0" + name)
    srv.listen(1)
    srv.settimeout(0.5)
    try:
        need_python(sbx, sandbox)
        script = ("import socket\n"
                  "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
                  "try:\n"
                  f"    s.connect('\\0{name}'); print('CONNECTED')\n"
                  "except OSError as e:\n"
                  "    print('refused', e)\n")
        r = sbx.exec(sandbox, "python3", "-c", script).ok()
        assert "CONNECTED" not in r.out, f"the sandbox reached the host's abstract socket @{name}"
        with pytest.raises(OSError):
            srv.accept()
    finally:
        srv.close()


def test_host_dev_shm_invisible(sbx, sandbox):
    marker = Path("/dev/shm", "sbxit-" + secrets.token_hex(4))
    try:
        marker.write_text("host shm\n")
    except OSError as e:
        pytest.skip(f"cannot write a marker in the host's /dev/shm: {e}")
    try:
        r = sbx.sh(sandbox, f"ls -a /dev/shm; cat {marker} 2>&1; true").ok()
        # cat's own complaint names the file (GNU and busybox word it differently).
        listing = "\n".join(l for l in r.out.splitlines() if not l.startswith("cat:"))
        assert marker.name not in listing and "host shm" not in r.out, r
    finally:
        marker.unlink()


def test_dev_has_no_host_devices(sbx, sandbox, driver):
    r = sbx.sh(sandbox, "ls /dev; for f in /dev/*; do [ -b \"$f\" ] && echo BLOCK:$f; done; true").ok()
    assert "BLOCK:" not in r.out, f"block devices inside the sandbox: {r.out}"
    names = set(r.out.split())
    assert {"null", "zero", "urandom"} <= names, names
    # gVisor's /dev is the sentry's own: its fuse is gVisor's FUSE, which needs
    # a mount the sandbox cannot make; no node there reaches a host device.
    for host_only in ["kmsg", "mem", "kvm", "sda", "vda", "nvme0", "loop0"] + ([] if driver == "runsc" else ["fuse"]):
        assert host_only not in names, f"/dev/{host_only} is visible inside the sandbox"
