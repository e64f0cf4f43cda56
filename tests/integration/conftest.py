"""Integration tests that drive the real, built `sbx` binary against real drivers.

Nothing is mocked: the subprocess driver uses real namespaces, cgroups,
overlayfs and seccomp, so these tests need root on Linux (`sbx doctor` says
what is missing; see `driver_problem`).

Environment:
  SBX_BIN                   the sbx binary (default <repo>/build/sbx)
  SBX_TEST_DRIVERS          comma-separated drivers the conformance tests run
                            against (default "subprocess")
  SBX_REQUIRE_CAPABILITIES  "1" turns every "prerequisite missing" skip into a
                            failure (CI sets it, so a broken runner cannot
                            pass by skipping everything)
  SBX_TEST_LANE             set by scripts/test.sh when it runs the suite in
                            parallel lanes (one pytest per group of drivers):
                            the lane's name; its tests that apply to none of
                            its drivers are deselected instead of skipped
  SBX_TEST_DRIVERLESS       "0" deselects the tests that are not parametrized
                            over a driver (another lane runs them once)
  SBX_TEST_NO_SNAPSHOT      "1" runs SBX_BIN in place instead of a per-session
                            copy of sbx and sbx-agent (the copy keeps a rebuild
                            during the run from swapping binaries mid-test)

Every session gets its own state root under /tmp, and every sbx call runs with
LOCAL_SANDBOX_BACKEND=subprocess, USE_REMOTE_SANDBOX=false, SBX_STATE_DIR=<that
root> and an empty config file, unless a test says otherwise.  Sandboxes are
removed by fixture finalizers even when a test fails, and at session end the
suite checks that nothing leaked (cgroups, mounts, state directories).
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SBX_BIN_SOURCE = os.environ.get("SBX_BIN") or str(REPO / "build" / "sbx")


def _snapshot_binaries(src: str) -> str:
    """Copies sbx and the sbx-agent beside it into a private directory, so that a
    rebuild during the run cannot swap binaries under a test (SBX_TEST_NO_SNAPSHOT=1
    runs SBX_BIN in place). sbx finds its agent next to itself."""
    if os.environ.get("SBX_TEST_NO_SNAPSHOT") == "1" or not os.access(src, os.X_OK):
        return src
    agent = os.path.join(os.path.dirname(src), "sbx-agent")
    d = tempfile.mkdtemp(prefix="sbxit-bin-", dir="/tmp")
    atexit.register(shutil.rmtree, d, True)
    for _ in range(5):  # a link in progress leaves a file that does not run yet
        try:
            shutil.copy2(src, os.path.join(d, "sbx"))
            if os.access(agent, os.X_OK):
                shutil.copy2(agent, os.path.join(d, "sbx-agent"))
            deno_agent = os.path.join(os.path.dirname(src), "sbx-agent-deno")
            if os.path.isdir(deno_agent) and not os.path.isdir(os.path.join(d, "sbx-agent-deno")):
                shutil.copytree(deno_agent, os.path.join(d, "sbx-agent-deno"))
            if subprocess.run([os.path.join(d, "sbx"), "--version"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10).returncode == 0:
                return os.path.join(d, "sbx")
        except (OSError, subprocess.SubprocessError):
            pass
        time.sleep(1)
    return src


SBX_BIN = _snapshot_binaries(SBX_BIN_SOURCE)
DRIVERS = [d.strip() for d in os.environ.get("SBX_TEST_DRIVERS", "subprocess").split(",") if d.strip()]
REQUIRE_CAPABILITIES = os.environ.get("SBX_REQUIRE_CAPABILITIES", "").strip() == "1"
ID_RE = re.compile(r"^sbx_[a-z2-7]{12}$")
# With "remote" among the drivers, a session-wide `sbx serve` runs. Every sbx
# call gets its key (so an id created there stays reachable); the tests of the
# "remote" driver also get USE_REMOTE_SANDBOX and SANDBOX_MANAGER_URL, so the
# same conformance tests run through it.
REMOTE_ENV: dict[str, str] = {}
REMOTE_SWITCH: dict[str, str] = {}
CG_CONTROLLERS = ("memory", "pids", "cpu")

# Variables that would change which backend or config sbx uses; scrubbed from
# the inherited environment so the host's settings cannot leak into a test.
_SCRUBBED_ENV = (
    "USE_REMOTE_SANDBOX", "REMOTE_SANDBOX_BACKEND", "SANDBOX_BACKEND", "LOCAL_SANDBOX_BACKEND",
    "SANDBOX_MANAGER_URL", "ADMIN_API_KEY", "SBX_CONFIG", "SBX_STATE_DIR", "SBX_POOL",
)


# --------------------------------------------------------------------------
# small helpers shared by the test modules
# --------------------------------------------------------------------------

def skip_or_fail(reason: str):
    """Skip for a missing prerequisite, or fail when CI demands capabilities."""
    if REQUIRE_CAPABILITIES:
        pytest.fail(f"SBX_REQUIRE_CAPABILITIES=1 but a prerequisite is missing: {reason}", pytrace=False)
    print(f"SKIPPED: {reason}", file=sys.stderr)
    pytest.skip(reason)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wait_until(pred, timeout: float, interval: float = 0.05):
    """Polls pred() until it returns a truthy value or timeout passes; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def proc_status(pid: int) -> dict[str, str] | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def pid_alive(pid: int) -> bool:
    """True if pid exists and is not a zombie (a zombie holds nothing but its pid)."""
    st = proc_status(pid)
    return st is not None and not st.get("State", "").startswith(("Z", "X"))


def cmdlines() -> dict[int, str]:
    """Every host process's /proc/PID/cmdline, NULs as spaces."""
    out = {}
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            try:
                raw = Path(f"/proc/{e.name}/cmdline").read_bytes()
            except OSError:
                continue
            out[int(e.name)] = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return out


def signal_once_started(p: subprocess.Popen, sig: int, check=None, timeout: float = 30):
    """Waits for p's first line of stdout, which must be "started"; calls check()
    while p still runs; sends sig and waits for p to end. Returns what check
    returned. Whatever fails, p is killed and reaped."""
    import select
    try:
        ready, _, _ = select.select([p.stdout], [], [], timeout)
        line = p.stdout.readline() if ready else None
        assert line == b"started\n", f"expected the command's 'started' first, got {line!r}"
        value = check() if check else None
        p.send_signal(sig)
        p.wait(timeout=timeout)
        return value
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()


def mountinfo_lines_mentioning(needle: str) -> list[str]:
    """Lines of every host process's mountinfo that mention needle (deduplicated)."""
    hits = []
    seen = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry.name}/mountinfo").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if needle in line and line not in seen:
                seen.add(line)
                hits.append(f"pid {entry.name}: {line}")
    return hits


def loop_devices_under(prefix: str) -> list[str]:
    """Bound loop devices whose backing file is under prefix: "/dev/loopN FILE" each."""
    out = []
    for f in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            backing = f.read_text().strip()
        except OSError:
            continue  # detached meanwhile
        if backing.startswith(prefix):
            out.append(f"/dev/{f.parent.parent.name} {backing}")
    return sorted(out)


def cgroup_roots() -> list[str]:
    """The cgroup hierarchies sbx puts its 'sbx' parent under (mirrors backends/common/cgroup.cpp)."""
    def words(p):
        try:
            return set(Path(p).read_text().split())
        except OSError:
            return set()

    pure = words("/sys/fs/cgroup/cgroup.controllers")
    unified = words("/sys/fs/cgroup/unified/cgroup.controllers")
    roots = []
    for c in CG_CONTROLLERS:
        if c in pure:
            root = "/sys/fs/cgroup"
        elif c in unified:
            root = "/sys/fs/cgroup/unified"
        else:
            root = None
            for cand in (f"/sys/fs/cgroup/{c}", "/sys/fs/cgroup/cpu,cpuacct"):
                if os.path.exists(cand + "/cgroup.procs") and (c == "cpu" or cand == f"/sys/fs/cgroup/{c}"):
                    root = cand
                    break
        if root and root not in roots:
            roots.append(root)
    return roots


def find_cgroup_dirs(sid: str, parents) -> list[str]:
    """Directories named sid directly under each parent or one level below (a scope)."""
    out = []
    for p in parents:
        if not os.path.isdir(p):
            continue
        for cand in [os.path.join(p, sid)] + [os.path.join(p, e.name, sid) for e in os.scandir(p)
                                                 if e.is_dir(follow_symlinks=False) and not ID_RE.match(e.name)]:
            if os.path.isdir(cand) and cand not in out:
                out.append(cand)
    return out


NETJAIL_RUN_DIR = "/run/sbx/netjail"


def _ip(*args) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=True).stdout


def jail_traces(ids) -> list[str]:
    """Whatever of these sandboxes' jails is still on the host."""
    left = []
    links = {link["ifname"] for link in json.loads(_ip("-j", "link"))}
    routes = _ip("-4", "route")
    nft = subprocess.run(["nft", "list", "table", "inet", "sbx_jail"], capture_output=True, text=True).stdout
    claims = {}
    if os.path.isdir(f"{NETJAIL_RUN_DIR}/addrs"):
        claims = {os.readlink(f"{NETJAIL_RUN_DIR}/addrs/{k}"): k for k in os.listdir(f"{NETJAIL_RUN_DIR}/addrs")}
    for sid in ids:
        ifname = "sbx" + sid[4:]
        if ifname in links:
            left.append(f"link {ifname}")
        if f"dev {ifname} " in routes:
            left.append(f"route via {ifname}")
        if f'"{ifname}"' in nft:
            left.append(f"nftables elements of {ifname}")
        for what in ("netns", "leases"):
            if os.path.exists(f"{NETJAIL_RUN_DIR}/{what}/{sid}"):
                left.append(f"{NETJAIL_RUN_DIR}/{what}/{sid}")
        if sid in claims:
            left.append(f"address claim {claims[sid]}")
        if mounts := [m for m in Path("/proc/self/mountinfo").read_text().splitlines() if f"/netns/{sid}" in m]:
            left.append(f"mount {mounts[0]}")
    return left


def sbx_cgroup_parents() -> list[str]:
    """Every directory a sandbox's cgroup can live under: <root>/sbx."""
    dirs = [f"{r}/sbx" for r in cgroup_roots()]
    for c in CG_CONTROLLERS:  # the v1 layout the suite's contract names explicitly
        d = f"/sys/fs/cgroup/{c}/sbx"
        if d not in dirs:
            dirs.append(d)
    return dirs


# --------------------------------------------------------------------------
# the sbx runner
# --------------------------------------------------------------------------

# Drivers that run interpreters rather than a POSIX userland: a test that
# execs sh or a coreutils program does not apply to them and is skipped when
# it tries (their own test module covers the same behaviour).
NO_SHELL_DRIVERS = {
    "deno": "the deno driver runs only python3/python (Pyodide) and node/deno, not sh or other programs; "
            "test_deno.py covers the same behaviour in Python and JavaScript",
}
POSIX_PROGRAMS = {"sh", "bash", "cat", "echo", "true", "false", "stat", "ls", "test", "sleep", "head", "id",
                  "env", "pwd", "printf", "kill", "readlink", "sha256sum", "mkdir", "touch", "rm", "wc",
                  "grep", "setsid", "dd", "yes", "seq", "tail", "chmod", "ln", "cp", "mv", "find", "noexec"}

class Result:
    def __init__(self, argv, rc, stdout: bytes, stderr: bytes, elapsed: float):
        self.argv = argv
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr  # raw bytes
        self.err = stderr.decode(errors="replace")
        self.elapsed = elapsed

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    def __repr__(self):
        out = self.out
        if len(out) > 2000:
            out = out[:2000] + f"... ({len(self.stdout)} bytes)"
        err = self.err if len(self.err) < 4000 else self.err[:4000] + "..."
        return (f"<sbx {' '.join(map(str, self.argv))!r} rc={self.rc} in {self.elapsed:.2f}s\n"
                f"--- stdout ---\n{out}\n--- stderr ---\n{err}>")

    def ok(self) -> "Result":
        assert self.rc == 0, f"sbx failed: {self!r}"
        return self


class Sbx:
    """Runs the sbx binary with one state root and a scrubbed environment.

    prefix: argv run before sbx (used to give gc tests a private cgroup view).
    cgroup_parents: where this runner's sandboxes get their cgroups, for leak checks.
    """

    def __init__(self, state_dir: str, config_file: str, prefix=(), cgroup_parents=None, label="main"):
        self.state_dir = state_dir
        self.config_file = config_file
        self.prefix = list(prefix)
        self.cgroup_parents = cgroup_parents or sbx_cgroup_parents()
        self.label = label
        self.created: list[str] = []  # every id this runner saw created (leak checks filter by these)
        self.scope_dirs: set[str] = set()  # per-state-root cgroup parents its sandboxes used
        self.default_timeout: float = 60  # seconds any one sbx call may take before the test fails
        self.drivers: dict[str, str] = {}  # id -> driver, for sandboxes this runner created

    # -- environment ------------------------------------------------------
    def env(self, extra: dict | None = None, unset=()) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        env.update({
            "LOCAL_SANDBOX_BACKEND": "subprocess",
            "USE_REMOTE_SANDBOX": "false",
            "SBX_STATE_DIR": self.state_dir,
            "SBX_CONFIG": self.config_file,
        })
        env.update(REMOTE_ENV)
        for k in unset:
            env.pop(k, None)
        if extra:
            env.update(extra)
        return env

    def argv(self, *args) -> list[str]:
        self._skip_if_no_shell([str(a) for a in args])
        return [*self.prefix, SBX_BIN, *map(str, args)]

    def _skip_if_no_shell(self, args: list[str]):
        if not args or args[0] != "exec" or "--" not in args:
            return
        cut = args.index("--")
        flags, cmd = args[1:cut], args[cut + 1:]
        driver = flags[flags.index("--driver") + 1] if "--driver" in flags[:-1] else None
        driver = driver or next((d for a in flags if len(a) >= 5 for sid, d in self.drivers.items()
                                 if sid.startswith(a)), None)  # an id or an id prefix
        if driver in NO_SHELL_DRIVERS and cmd and cmd[0].rsplit("/", 1)[-1] in POSIX_PROGRAMS:
            pytest.skip(f"runs `{cmd[0]}`: {NO_SHELL_DRIVERS[driver]}")

    # -- running ----------------------------------------------------------
    def run(self, *args, input: bytes | str | None = None, env=None, unset=(), timeout: float | None = None,
            stdin=None, cwd=None) -> Result:
        if timeout is None:
            timeout = self.default_timeout
        if isinstance(input, str):
            input = input.encode()
        t0 = time.monotonic()
        try:
            p = subprocess.run(self.argv(*args), input=input, stdin=stdin if input is None else None,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(env, unset),
                               timeout=timeout, cwd=cwd)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"sbx {' '.join(map(str, args))} did not finish within {timeout} s "
                        f"(stdout so far: {e.stdout!r:.500}, stderr: {e.stderr!r:.500})", pytrace=False)
        return Result(list(args), p.returncode, p.stdout, p.stderr, time.monotonic() - t0)

    def popen(self, *args, env=None, unset=(), **kw) -> subprocess.Popen:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen(self.argv(*args), env=self.env(env, unset), **kw)

    # -- conveniences ----------------------------------------------------
    def create(self, *flags, driver: str | None = "subprocess", timeout: float = 60) -> str:
        args = ["create"]
        if driver:
            args += ["--driver", driver]
        r = self.run(*args, *flags, timeout=timeout)
        sid = r.out.strip()
        if ID_RE.match(sid):
            self.created.append(sid)
            self.drivers[sid] = driver or ""
        assert r.rc == 0, f"create failed: {r!r}"
        assert ID_RE.match(sid) and r.out == sid + "\n", f"create must print the id alone on stdout: {r!r}"
        self._note_scopes(sid)
        return sid

    def remove(self, *ids) -> Result:
        return self.run("rm", "-f", *ids, timeout=90)

    def exec(self, sid, *cmd, flags=(), **kw) -> Result:
        return self.run("exec", *flags, sid, "--", *cmd, **kw)

    def sh(self, sid, script, flags=(), **kw) -> Result:
        return self.exec(sid, "sh", "-c", script, flags=flags, **kw)

    def ls(self, *flags) -> list[dict]:
        r = self.run("ls", "--json", *flags).ok()
        data = json.loads(r.stdout)
        for rec in data:
            if rec.get("id") and ID_RE.match(rec["id"]) and rec["id"] not in self.created:
                self.created.append(rec["id"])
        return data

    def ls_ids(self, *flags) -> list[str]:
        ids = self.run("ls", "-q", *flags).ok().out.split()
        self.created.extend(i for i in ids if ID_RE.match(i) and i not in self.created)
        return ids

    def record(self, sid) -> dict | None:
        for rec in self.ls():
            if rec["id"] == sid:
                return rec
        return None

    def sandbox_dir(self, sid) -> str:
        return f"{self.state_dir}/sandboxes/{sid}"

    def cgroup_dirs(self, sid) -> list[str]:
        """The existing cgroup directories of sandbox sid, whatever the layout
        (<hierarchy>/sbx/<id>, or <hierarchy>/sbx/<per-state-root scope>/<id>)."""
        return find_cgroup_dirs(sid, self.cgroup_parents)

    def _note_scopes(self, sid):
        for d in self.cgroup_dirs(sid):
            parent = os.path.dirname(d)
            if parent not in self.cgroup_parents:
                self.scope_dirs.add(parent)

    # -- session end -----------------------------------------------------
    def cleanup_and_check(self) -> list[str]:
        """Removes what is left and returns every leak found (empty = clean)."""
        problems = []
        try:
            left = self.ls_ids()
        except AssertionError as e:
            left = []
            problems.append(f"[{self.label}] `sbx ls -q` failed at session end: {e}")
        if left:
            problems.append(f"[{self.label}] sandboxes still listed at session end "
                            f"(their fixtures or `exec --rm` should have removed them): {left}")
        r = self.run("rm", "--all", timeout=180)
        if r.rc != 0:
            problems.append(f"[{self.label}] `sbx rm --all` failed: {r!r}")
        for sid in self.created:
            for d in self.cgroup_dirs(sid):
                problems.append(f"[{self.label}] cgroup left behind: {d}")
        # Empty per-state-root parents are reported by test_rm_all_leaves_no_scope_cgroup;
        # here they are only removed so the session leaves nothing on the host.
        for d in sorted(self.scope_dirs):
            try:
                os.rmdir(d)
            except OSError:
                pass
        mounts = mountinfo_lines_mentioning(self.state_dir)
        if mounts:
            problems.append(f"[{self.label}] mounts still reference the state root {self.state_dir}:\n  "
                            + "\n  ".join(mounts[:20]))
        loops = loop_devices_under(self.state_dir + "/")
        if loops:
            problems.append(f"[{self.label}] loop devices still bound to disks of {self.state_dir}: {loops}")
        sb = Path(self.state_dir, "sandboxes")
        if sb.is_dir():
            leftovers = sorted(p.name for p in sb.iterdir())
            if leftovers:
                problems.append(f"[{self.label}] sandbox directories left in {sb}: {leftovers}")
        return problems


# --------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------


def pytest_report_header(config):
    src = "" if SBX_BIN == SBX_BIN_SOURCE else f" (snapshot of {SBX_BIN_SOURCE})"
    lane = f"lane {LANE}: " if LANE else ""
    return [f"sbx binary: {SBX_BIN}{src}", f"{lane}drivers: {','.join(DRIVERS)}; "
            f"SBX_REQUIRE_CAPABILITIES={'1' if REQUIRE_CAPABILITIES else '0'}"]


@pytest.fixture(scope="session")
def session_root():
    if not os.access(SBX_BIN, os.X_OK):
        pytest.fail(f"sbx binary not found at {SBX_BIN_SOURCE}: build it with "
                    f"`cmake -S . -B build && make -C build` or set SBX_BIN", pytrace=False)
    # Short, under /tmp: the agent's unix socket path must fit in 108 bytes.
    root = tempfile.mkdtemp(prefix="sbxit-", dir="/tmp")
    config = os.path.join(root, "empty-config.yaml")
    Path(config).write_text("# intentionally empty: the tests configure sbx through the environment\n")
    yield root
    if not mountinfo_lines_mentioning(root):
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"NOTE: left {root} in place: mounts still reference it", file=sys.stderr)


@pytest.fixture(scope="session")
def remote_manager(session_root):
    """The manager behind the "remote" driver (only when SBX_TEST_DRIVERS names it)."""
    if "remote" not in DRIVERS:
        yield None
        return
    # An external manager (scripts/ci-manager-image.sh: the manager image in a
    # container): used as it is; its state root is not ours to inspect or clean.
    if os.environ.get("SBX_TEST_MANAGER_URL"):
        REMOTE_ENV["ADMIN_API_KEY"] = os.environ.get("SBX_TEST_MANAGER_KEY", "")
        REMOTE_SWITCH.update({"USE_REMOTE_SANDBOX": "true", "SANDBOX_MANAGER_URL": os.environ["SBX_TEST_MANAGER_URL"]})
        yield os.environ["SBX_TEST_MANAGER_URL"]
        REMOTE_ENV.clear()
        return
    import secrets
    import socket
    import urllib.request
    root = os.path.join(session_root, "remote-mgr")
    os.makedirs(root)
    state = os.path.join(root, "state")
    key = secrets.token_hex(24)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    env["ADMIN_API_KEY"] = key
    log = open(os.path.join(root, "serve.log"), "wb")
    # No idle reaper: the gc tests decide when sandboxes are collected.
    config = os.path.join(root, "config.yaml")
    Path(config).write_text("server:\n  reap_interval: 1h\n")
    proc = subprocess.Popen([SBX_BIN, "--config", config, "--state-dir", state, "serve", "--listen",
                             f"127.0.0.1:{port}", "--driver", "subprocess"],
                            stdout=log, stderr=log, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy():
        try:
            req = urllib.request.Request(url + "/healthz", headers={"X-API-Key": key})
            return urllib.request.urlopen(req, timeout=2).status == 200
        except OSError:
            return False

    if not wait_until(healthy, 20):
        proc.kill()
        pytest.fail(f"the manager for the remote driver did not come up: {open(log.name).read()[-2000:]}")
    REMOTE_ENV["ADMIN_API_KEY"] = key
    REMOTE_SWITCH.update({"USE_REMOTE_SANDBOX": "true", "SANDBOX_MANAGER_URL": url})
    yield url
    REMOTE_ENV.clear()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    subprocess.run([SBX_BIN, "--state-dir", state, "rm", "--all"], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120)
    log.close()


# The jails' DNS forwarder is one per host, started by any jail that names a
# domain: the tests that kill it or wait for it to stop must not see a jail of
# the other CI lane (or another suite on the host) start it again meanwhile.
# Every test jail that names a domain holds this lock shared; those tests, exclusive.
FORWARDER_TEST_LOCK = "/run/sbx-tests-dns-forwarder.lock"
_forwarder_exclusive = False


@contextlib.contextmanager
def forwarder_lock(exclusive: bool = False):
    """Shared: a domain-naming jail may start the forwarder. Exclusive: no other may meanwhile.
    Inside an exclusive hold of this process, a shared request is already satisfied."""
    global _forwarder_exclusive
    if _forwarder_exclusive and not exclusive:
        yield
        return
    fd = os.open(FORWARDER_TEST_LOCK, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        _forwarder_exclusive = exclusive
        yield
    finally:
        if exclusive:
            _forwarder_exclusive = False
        os.close(fd)


@pytest.fixture(scope="session")
def sbx(session_root, remote_manager) -> Sbx:
    runner = Sbx(os.path.join(session_root, "state"), os.path.join(session_root, "empty-config.yaml"))
    # Every call here takes well under a second when sbx works; a hang must not
    # eat the suite's time budget (tests that need longer pass their own timeout).
    runner.default_timeout = 30
    return runner


@pytest.fixture(scope="session", autouse=True)
def _no_leaks_at_session_end(sbx):
    """Session end: `sbx rm --all` on our own state root, then assert nothing leaked."""
    yield
    problems = sbx.cleanup_and_check()
    assert not problems, "resources leaked by this session:\n" + "\n".join(problems)


@pytest.fixture(scope="session")
def gc_sbx(session_root, sbx) -> Sbx:
    """A runner with its own state root and a private view of the sbx cgroup parent.

    `sbx gc` reaps cgroups it takes for orphans.  Builds that did not scope
    cgroups per state root took every other state root's live sandboxes for
    orphans and killed them (test_gc_spares_other_state_roots checks that with a
    dry run).  So that the gc tests can never hurt other sbx users on a shared
    host, each call of this runner runs in a private mount namespace where
    <hierarchy>/sbx is a bind mount of a session-owned cgroup directory
    <hierarchy>/sbxit_<token>: its sandboxes get real cgroups with real limits,
    but gc only ever sees this session's.
    """
    if shutil.which("unshare") is None:
        skip_or_fail("the gc tests need util-linux `unshare` to give sbx a private cgroup view")
    token = secrets.token_hex(4)
    roots = cgroup_roots()
    if not roots:
        skip_or_fail("no memory/pids/cpu cgroup hierarchy is mounted")
    private = []
    script = []
    for r in roots:
        own, view = f"{r}/sbxit_{token}", f"{r}/sbx"
        os.makedirs(view, exist_ok=True)
        os.mkdir(own)
        private.append(own)
        script.append(f"mount --bind {own} {view} || exit 125")
    script.append('exec "$@"')
    prefix = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "; ".join(script), "sh"]
    runner = Sbx(os.path.join(session_root, "state-gc"), sbx.config_file, prefix=prefix,
                 cgroup_parents=private, label="gc")
    runner.default_timeout = sbx.default_timeout
    yield runner
    problems = runner.cleanup_and_check()
    for own in private:
        if not os.path.isdir(own):
            continue
        # Sandbox cgroups left anywhere below are leaks; scope parents are not.
        # Remove everything bottom-up (best effort) so the host is left clean.
        for dirpath, dirnames, _ in os.walk(own, topdown=False):
            for name in dirnames:
                d = os.path.join(dirpath, name)
                if ID_RE.match(name) and name != "sbx_aaaaaaaaaaaa":
                    problems.append(f"[gc] sandbox cgroup left: {d}")
                try:
                    os.rmdir(d)
                except OSError:
                    pass
        try:
            os.rmdir(own)
        except OSError as e:
            problems.append(f"[gc] cannot remove the private cgroup parent {own}: {e}")
    assert not problems, "resources leaked by the gc tests:\n" + "\n".join(problems)


_driver_problems: dict[str, str | None] = {}


def driver_problem(sbx: Sbx, name: str) -> str | None:
    """Why `name` cannot run here, from `sbx doctor --driver NAME --json`; None if it can."""
    if name in _driver_problems:
        return _driver_problems[name]
    r = sbx.run("doctor", "--driver", name, "--json", timeout=60)
    problem = None
    try:
        rep = json.loads(r.stdout)
    except ValueError:
        rep = None
    if not isinstance(rep, dict):
        problem = f"`sbx doctor --driver {name} --json` gave no JSON report (exit {r.rc}): {r.err.strip()}"
    else:
        entry = next((d for d in rep.get("drivers", []) if d.get("name") == name), None)
        # The manager is no local driver: doctor reports it on its own ("remote": one check).
        if name == "remote" and isinstance(rep.get("remote"), dict):
            entry = {"ok": rep["remote"].get("ok"), "checks": [rep["remote"]]}
        sel = rep.get("selection") or {}
        if entry is None:
            problem = (f"driver {name!r} is not part of this sbx build "
                       f"({sel.get('error', '')}; {sel.get('hint', '')})")
        else:
            # An advisory check (a slow path, such as TCG for micro-VMs) costs speed, not function.
            bad = [c for c in entry.get("checks", []) + rep.get("host", [])
                   if not c.get("ok") and not c.get("advisory")]
            if bad or not entry.get("ok"):
                problem = f"driver {name} cannot run on this host: " + "; ".join(
                    f"{c.get('name')}: {c.get('detail')} (fix: {c.get('remedy')})" for c in bad)
    _driver_problems[name] = problem
    return problem


LANE = os.environ.get("SBX_TEST_LANE", "").strip()
RUN_DRIVERLESS = os.environ.get("SBX_TEST_DRIVERLESS", "1").strip() != "0"


def pytest_collection_modifyitems(config, items):
    """In a lane, a test that does not concern the lane is deselected, not
    skipped: the other lane runs it, and a skip here would be noise."""
    if not LANE and RUN_DRIVERLESS:
        return
    keep, drop = [], []
    for item in items:
        spec = getattr(item, "callspec", None)
        param = spec.params.get("driver") if spec else None
        if param == "-" and LANE:
            drop.append(item)  # applies to no driver of this lane
        elif param is None and not RUN_DRIVERLESS:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_generate_tests(metafunc):
    if "driver" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("only_drivers")
    wanted = list(DRIVERS)
    if marker:
        wanted = [d for d in DRIVERS if d in marker.args]
        if not wanted:
            reason = (f"applies to driver(s) {', '.join(marker.args)} only, "
                      f"and SBX_TEST_DRIVERS={','.join(DRIVERS)}")
            metafunc.parametrize("driver", [pytest.param("-", marks=pytest.mark.skip(reason=reason))],
                                 indirect=True, ids=["no-driver"])
            return
    # @pytest.mark.skip_drivers(deno="why this cannot apply there"): a per-driver skip with its reason.
    skips = metafunc.definition.get_closest_marker("skip_drivers")
    skips = skips.kwargs if skips else {}
    # @pytest.mark.xfail_drivers(runsc="the known defect"): expected to fail there, for a reason on record.
    xfails = metafunc.definition.get_closest_marker("xfail_drivers")
    xfails = xfails.kwargs if xfails else {}

    def param(d):
        if d in skips:
            return pytest.param(d, marks=pytest.mark.skip(reason=skips[d]))
        if d in xfails:
            return pytest.param(d, marks=pytest.mark.xfail(reason=xfails[d], strict=False))
        return d
    metafunc.parametrize("driver", [param(d) for d in wanted], indirect=True)


@pytest.fixture
def driver(request, sbx) -> str:
    """The driver under test; skipped (or failed, in CI) if its prerequisites are missing."""
    name = request.param
    if name == "remote":
        REMOTE_ENV.update(REMOTE_SWITCH)
    try:
        problem = driver_problem(sbx, name)
        if problem:
            skip_or_fail(problem)
        yield name
    finally:
        for k in REMOTE_SWITCH:
            REMOTE_ENV.pop(k, None)


@pytest.fixture
def make_sandbox(sbx):
    """Factory: make_sandbox(*create_flags, driver=..., runner=...) -> id; all removed afterwards."""
    made: list[tuple[Sbx, str]] = []

    def make(*flags, driver="subprocess", runner: Sbx | None = None):
        runner = runner or sbx
        sid = runner.create(*flags, driver=driver)
        made.append((runner, sid))
        return sid

    yield make
    for runner, sid in reversed(made):
        r = runner.remove(sid)
        if r.rc != 0:
            print(f"WARNING: could not remove {sid}: {r!r}", file=sys.stderr)


@pytest.fixture
def sandbox(make_sandbox, driver) -> str:
    """One sandbox of the driver under test, removed after the test."""
    return make_sandbox(driver=driver)


@pytest.fixture
def host_tmp(tmp_path):
    return tmp_path


def create_in_parallel(sbx: Sbx, wanted: dict[str, list[str]], env=None,
                       timeout: float = 120) -> tuple[dict[str, str], list[str]]:
    """Creates one sandbox per name at once (for slow creates such as micro-VM
    boots): ({name: id} of those made, recorded in sbx.created; [failures])."""
    import threading
    made: dict[str, str] = {}
    errors: list[str] = []

    def one(name, flags):
        r = sbx.run("create", *flags, env=env, timeout=timeout)
        sid = r.out.strip()
        if r.rc == 0 and ID_RE.match(sid):
            made[name] = sid
            sbx.created.append(sid)
        else:
            errors.append(f"{name}: {r!r}")

    threads = [threading.Thread(target=one, args=item) for item in wanted.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return made, errors


def require_listed_driver(sbx: Sbx, name: str):
    """For module fixtures of one driver's tests: skip unless SBX_TEST_DRIVERS names
    it, and skip_or_fail where it cannot run here."""
    if name not in DRIVERS:
        pytest.skip(f"SBX_TEST_DRIVERS does not name {name}")
    problem = driver_problem(sbx, name)
    if problem:
        skip_or_fail(problem)
