"""The network jail (`--network jail`) against a little world of network namespaces.

The world, built by the `world` fixture on this machine only:
  - a namespace "the internet" joined to the host by a veth; the host routes
    198.51.100.0/24 (TEST-NET-2) to it.  It holds the "public" hosts
    198.51.100.10 and .11, a DNS server at 198.51.100.53 (public-a.test,
    public-b.test), and "private" hosts at 10.x, 192.168.x, 172.16.x,
    100.64.x and 169.254.169.254, each routed from the host through it;
  - a listener on the host itself (every host address, loopback included).
The host can reach every one of them (checked first), so what a sandbox cannot
reach is the jail's doing.  No packet goes anywhere but loopback and these
namespaces: sandboxes are created with SBX_NET_DNS pointing at the world's DNS.

From a jailed sandbox the public hosts answer and every private one, the host
and IPv6 do not; from `--network none` nothing answers.  Subprocess and runsc; micro-VMs
in the test_microvm_* tests (lane vm of scripts/test.sh), whose world waits for the other
lane's to go (WORLD_LOCK: the addresses are fixed).
"""
from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import secrets
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import (ID_RE, Sbx, create_in_parallel, driver_problem, forwarder_lock, jail_traces,
                      skip_or_fail, wait_until)

NET_DRIVERS = ("subprocess", "runsc")
PUBLIC_A, PUBLIC_B, WORLD_DNS, HOST_SIDE = "198.51.100.10", "198.51.100.11", "198.51.100.53", "198.51.100.1"
PRIVATE = {"10/8": "10.99.77.10", "192.168/16": "192.168.77.10", "172.16/12": "172.16.77.10",
           "100.64/10": "100.64.77.10", "cloud metadata": "169.254.169.254"}
WORLD_PORT = 8080
WORLD_LOCK = "/run/sbx-tests-world.lock"

# Runs in the world's namespace: "hello <address>" over TCP on every address,
# and a tiny DNS server: A records of fixed names; "flip.test", whose address
# (and TTL) the test sets by writing "ADDRESS TTL" to the file argv[1], so it
# changes between queries; "alias.test", a CNAME chain alias -> hop -> public-b;
# NXDOMAIN otherwise. It counts the A queries per name in argv[1] + ".log".
WORLD_SERVER = textwrap.dedent(f"""
    import socket, struct, sys, threading
    NAMES = {{"public-a.test": "{PUBLIC_A}", "public-b.test": "{PUBLIC_B}", "hop.test": None}}
    CNAMES = {{"alias.test": "hop.test", "hop.test": "public-b.test"}}
    control = sys.argv[1]
    def encode(name):
        return b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\\0"
    def tcp(s):
        while True:
            c, _ = s.accept()
            try: c.sendall(b"hello " + c.getsockname()[0].encode())
            finally: c.close()
    def records(name):
        out = []
        while name in CNAMES:
            target = CNAMES[name]
            out.append((name, 5, 30, encode(target))); name = target
        if name == "flip.test":
            addr, ttl = open(control).read().split()
            out.append((name, 1, int(ttl), socket.inet_aton(addr)))
        elif NAMES.get(name):
            out.append((name, 1, 30, socket.inet_aton(NAMES[name])))
        return out
    def dns(s):
        while True:
            q, peer = s.recvfrom(512)
            i, labels = 12, []
            while q[i]:
                labels.append(q[i + 1:i + 1 + q[i]].decode().lower()); i += 1 + q[i]
            question = q[12:i + 5]
            qtype = struct.unpack("!H", q[i + 1:i + 3])[0]
            name = ".".join(labels)
            known = name in NAMES or name in CNAMES or name == "flip.test"
            answer, count = b"", 0
            if qtype == 1:
                with open(control + ".log", "a") as log: log.write(name + "\\n")
                for owner, rtype, ttl, rdata in records(name):
                    answer += encode(owner) + struct.pack("!HHIH", rtype, 1, ttl, len(rdata)) + rdata
                    count += 1
            flags = 0x8180 if known else 0x8183
            head = q[:2] + struct.pack("!HHHHH", flags, 1, count, 0, 0)
            s.sendto(head + question + answer, peer)
    # Both bound before "ready": the host connects as soon as it reads it.
    resolver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); resolver.bind(("{WORLD_DNS}", 53))
    threading.Thread(target=dns, args=(resolver,), daemon=True).start()
    listener = socket.socket(); listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", {WORLD_PORT})); listener.listen(64)
    print("ready", flush=True)
    tcp(listener)
""")

# Runs inside a sandbox: tries every target at once, prints {target: "open <reply>" | "closed <why>"}.
PROBE = textwrap.dedent("""
    import json, socket, sys, threading
    out = {}
    def one(t):
        host, port = t.rsplit(":", 1)
        host = host.strip("[]")
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(4)
        try:
            s.connect((host, int(port)))
            out[t] = "open " + s.recv(100).decode(errors="replace")
        except Exception as e:
            out[t] = "closed " + str(e)
        finally:
            s.close()
    ts = [threading.Thread(target=one, args=(t,)) for t in sys.argv[1:]]
    for t in ts: t.start()
    for t in ts: t.join()
    print(json.dumps(out))
""")

RESOLVE = "import socket, sys\ntry:\n print(socket.gethostbyname(sys.argv[1]))\nexcept Exception as e:\n print('failed', e)\n"


def ip(*args, check=True, ns=None) -> subprocess.CompletedProcess:
    argv = ["ip"] + (["-n", ns] if ns else []) + list(args)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed: {r.stderr.strip()}")
    return r


def host_addresses() -> tuple[list[str], list[str]]:
    """The host's own global IPv4 and IPv6 addresses, and its IPv6 link-local ones
    written as seen over the jail's eth0 (from `ip -j addr`)."""
    v4, v6 = [], []
    for link in json.loads(ip("-j", "addr").stdout):
        if link["ifname"].startswith("sbx"):
            continue
        for a in link.get("addr_info", []):
            if a.get("scope") == "link" and a["family"] == "inet6":
                v6.append(a["local"] + "%eth0")
            elif a.get("scope") == "global":
                (v4 if a["family"] == "inet" else v6).append(a["local"])
    return v4, v6


def clashes() -> list[str]:
    """Routes or addresses of this host that the world's addresses would collide with."""
    taken = []
    for fam in ("-4", "-6"):
        for r in json.loads(ip(fam, "-j", "route").stdout):
            if r.get("dst") != "default":
                taken.append(r["dst"])
    wanted = ["198.51.100."] + [a.rsplit(".", 1)[0] + "." for a in PRIVATE.values()]
    return [t for t in taken if any(t.startswith(w) for w in wanted)]


def host_connect(addr: str, port: int, timeout: float = 3) -> str:
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(fam) as s:
        s.settimeout(timeout)
        s.connect((addr, port))
        return s.recv(100).decode()


class World:
    def __init__(self):
        self.token = secrets.token_hex(3)
        # Not "sbx...": the jail's filter treats every sbx* interface as a jail.
        self.ns = f"njt-{self.token}"
        self.veth = f"njt{self.token}h"
        self.routes: list[str] = []
        self.server: subprocess.Popen | None = None
        self.host_listeners: list[socket.socket] = []
        self.host_port = 0

    def build(self):
        ip("netns", "add", self.ns)
        ip("link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.ns)
        ip("addr", "add", f"{HOST_SIDE}/24", "dev", self.veth)
        ip("link", "set", self.veth, "up")
        for a in (PUBLIC_A, PUBLIC_B, WORLD_DNS):
            ip("addr", "add", f"{a}/24", "dev", "eth0", ns=self.ns)
        ip("link", "set", "eth0", "up", ns=self.ns)
        ip("link", "set", "lo", "up", ns=self.ns)
        for a in PRIVATE.values():
            ip("addr", "add", f"{a}/32", "dev", "lo", ns=self.ns)
            ip("route", "add", f"{a}/32", "via", PUBLIC_A)
            self.routes.append(f"{a}/32")
        ip("route", "add", "default", "via", HOST_SIDE, ns=self.ns)
        self.control = f"/tmp/njt-{self.token}-flip"
        self.set_flip(PUBLIC_A, 30)
        self.server = subprocess.Popen(["ip", "netns", "exec", self.ns, sys.executable, "-c", WORLD_SERVER,
                                        self.control],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       start_new_session=True)
        line = self.server.stdout.readline()
        assert line.strip() == "ready", f"the world's server did not start: {line!r} {self.server.stderr.read()}"
        # The host's own listener: every host address, IPv4 and IPv6, loopback included.
        s4 = socket.socket()
        s4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s4.bind(("0.0.0.0", 0))
        self.host_port = s4.getsockname()[1]
        s6 = socket.socket(socket.AF_INET6)
        s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s6.bind(("::", self.host_port))
        for s in (s4, s6):
            s.listen(64)
            s.settimeout(0.5)
            self.host_listeners.append(s)
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def set_flip(self, addr: str, ttl: int):
        """What flip.test resolves to from now on, and for how long."""
        Path(self.control + ".tmp").write_text(f"{addr} {ttl}")
        os.replace(self.control + ".tmp", self.control)

    def asked(self) -> list[str]:
        """The names the world's DNS was asked A records of, in order."""
        p = Path(self.control + ".log")
        return p.read_text().split() if p.exists() else []

    def _serve(self, s: socket.socket):
        while self.host_listeners:
            try:
                c, _ = s.accept()
            except OSError:
                continue
            with c:
                c.sendall(b"hello host")

    def destroy(self):
        for s in self.host_listeners:
            s.close()
        self.host_listeners = []
        if self.server:
            try:
                os.killpg(self.server.pid, 9)
            except ProcessLookupError:
                pass
            self.server.wait(timeout=10)
        for r in self.routes:
            ip("route", "del", r, check=False)
        ip("link", "del", self.veth, check=False)
        ip("netns", "del", self.ns, check=False)
        for f in (self.control, self.control + ".log"):
            if os.path.exists(f):
                os.unlink(f)


@pytest.fixture(scope="module")
def world():
    if os.geteuid() != 0:
        skip_or_fail("the network tests need root (network namespaces, routes)")
    if subprocess.run(["which", "ip"], capture_output=True).returncode != 0:
        skip_or_fail("the network tests need iproute2's `ip`")
    # One world on the host at a time: its addresses are fixed, and the other
    # CI lane (micro-VMs) builds one too. Taken before looking for clashes,
    # which the other lane's world would be.
    held = os.open(WORLD_LOCK, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    w = World()
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        taken = clashes()
        if taken:
            skip_or_fail(f"this host already routes addresses of the test world: {taken}")
        w.build()
        # The host reaches every world host: what a sandbox cannot reach is the jail's doing.
        for a in [PUBLIC_A, PUBLIC_B, *PRIVATE.values()]:
            assert host_connect(a, WORLD_PORT) == f"hello {a}", a
        yield w
    finally:
        w.destroy()
        os.close(held)


@pytest.fixture(scope="module")
def net_sbx(session_root) -> Sbx:
    """A runner with its own state root whose jails use the world's DNS server."""
    runner = Sbx(os.path.join(session_root, "state-net"), os.path.join(session_root, "empty-config.yaml"),
                 label="net")
    runner.default_timeout = 60
    yield runner
    problems = runner.cleanup_and_check()
    problems += [f"[net] jail left behind: {p}" for p in jail_traces(runner.created)]
    assert not problems, "\n".join(problems)


@pytest.fixture(params=NET_DRIVERS)
def net_driver(request, net_sbx) -> str:
    problem = driver_problem(net_sbx, request.param)
    if problem:
        skip_or_fail(problem)
    return request.param


def _is_network(entry: str) -> bool:
    try:
        ipaddress.ip_network(entry, strict=False)
        return True
    except ValueError:
        return False


@pytest.fixture
def jailed(net_sbx, net_driver):
    """Factory: jailed(*create_flags) -> id, created with the world's DNS; all removed afterwards."""
    made = []
    holds = contextlib.ExitStack()

    def make(*flags, network="jail"):
        # A domain in the allowlist starts the host-wide DNS forwarder (see forwarder_lock).
        if any(a == "--allow" and not _is_network(b) for a, b in zip(flags, flags[1:])):
            holds.enter_context(forwarder_lock())
        r = net_sbx.run("create", "--driver", net_driver, "--network", network, *flags,
                        env={"SBX_NET_DNS": WORLD_DNS})
        sid = r.out.strip()
        if ID_RE.match(sid):
            made.append(sid)
            net_sbx.created.append(sid)
        assert r.rc == 0, f"create failed: {r!r}"
        return sid

    with holds:
        yield make
        for sid in made:
            net_sbx.remove(sid)


def probe(sbx: Sbx, sid: str, targets: list[str]) -> dict[str, str]:
    r = sbx.run("exec", "-i", sid, "--", "python3", "-", *targets, input=PROBE, timeout=60).ok()
    return json.loads(r.out)


def resolve(sbx: Sbx, sid: str, name: str) -> str:
    return sbx.run("exec", "-i", sid, "--", "python3", "-", name, input=RESOLVE, timeout=60).ok().out.strip()


def jail_info(sbx: Sbx, sid: str) -> dict:
    r = sbx.sh(sid, "cat /etc/resolv.conf").ok()
    gw = next(line.split()[1] for line in r.out.splitlines() if line.startswith("nameserver"))
    return {"gateway": gw, "ifname": "sbx" + sid[4:]}


def private_targets(world: World, gateway: str) -> list[str]:
    v4, v6 = host_addresses()
    port = world.host_port
    out = [f"{a}:{WORLD_PORT}" for a in PRIVATE.values()]
    out += [f"{a}:{port}" for a in {gateway, HOST_SIDE, "127.0.0.1", *v4}]
    out += [f"[::1]:{port}"] + [f"[{a}]:{port}" for a in v6]
    return out


# --------------------------------------------------------------------------


def test_jail_reaches_public_hosts_only(world, net_sbx, jailed):
    sid = jailed()
    info = jail_info(net_sbx, sid)
    blocked = private_targets(world, info["gateway"])
    # The host reaches its own listener on every one of its addresses.
    v4, v6 = host_addresses()
    for a in {HOST_SIDE, *v4, *[a for a in v6 if "%" not in a]}:
        assert host_connect(a, world.host_port) == "hello host"
    res = probe(net_sbx, sid, [f"{PUBLIC_A}:{WORLD_PORT}", f"{PUBLIC_B}:{WORLD_PORT}", *blocked])
    assert res[f"{PUBLIC_A}:{WORLD_PORT}"] == f"open hello {PUBLIC_A}", res
    assert res[f"{PUBLIC_B}:{WORLD_PORT}"] == f"open hello {PUBLIC_B}", res
    reached = {t: v for t, v in res.items() if t in blocked and v.startswith("open")}
    assert not reached, f"a jailed sandbox reached private or host addresses: {reached}"


def test_jail_resolves_names_through_the_host(world, net_sbx, jailed):
    sid = jailed()
    assert resolve(net_sbx, sid, "public-a.test") == PUBLIC_A
    assert resolve(net_sbx, sid, "public-b.test") == PUBLIC_B
    # The resolver is reached through the jail's gateway only: directly, it is a public host like any other.
    res = probe(net_sbx, sid, [f"{WORLD_DNS}:{WORLD_PORT}"])
    assert res[f"{WORLD_DNS}:{WORLD_PORT}"].startswith("open"), res


def test_network_none_reaches_nothing(world, net_sbx, jailed):
    sid = jailed(network="none")
    targets = [f"{PUBLIC_A}:{WORLD_PORT}", *private_targets(world, HOST_SIDE)]
    res = probe(net_sbx, sid, targets)
    reached = {t: v for t, v in res.items() if v.startswith("open")}
    assert not reached, f"a sandbox without network reached: {reached}"
    assert resolve(net_sbx, sid, "public-a.test").startswith("failed")


def test_allowlist_narrows_to_listed_destinations(world, net_sbx, jailed):
    by_cidr = jailed("--allow", f"{PUBLIC_B}/32", "--allow", "10.99.77.10/32")
    res = probe(net_sbx, by_cidr, [f"{PUBLIC_A}:{WORLD_PORT}", f"{PUBLIC_B}:{WORLD_PORT}", f"10.99.77.10:{WORLD_PORT}"])
    assert res[f"{PUBLIC_B}:{WORLD_PORT}"] == f"open hello {PUBLIC_B}", res
    assert res[f"{PUBLIC_A}:{WORLD_PORT}"].startswith("closed"), res
    # An allowlist only narrows: a private network stays blocked even when listed.
    assert res[f"10.99.77.10:{WORLD_PORT}"].startswith("closed"), res
    # A name opens what it resolves to once the sandbox asks (test_egress.py).
    by_name = jailed("--allow", "Public-A.test")
    assert resolve(net_sbx, by_name, "public-a.test") == PUBLIC_A
    res = probe(net_sbx, by_name, [f"{PUBLIC_A}:{WORLD_PORT}", f"{PUBLIC_B}:{WORLD_PORT}"])
    assert res[f"{PUBLIC_A}:{WORLD_PORT}"] == f"open hello {PUBLIC_A}", res
    assert res[f"{PUBLIC_B}:{WORLD_PORT}"].startswith("closed"), res


def test_two_jails_cannot_reach_each_other(world, net_sbx, jailed, net_driver):
    a, b = jailed(), jailed()
    gw_a = jail_info(net_sbx, a)["gateway"]
    own_a = gw_a.rsplit(".", 1)[0] + "." + str(int(gw_a.rsplit(".", 1)[1]) + 1)
    server = net_sbx.popen("exec", a, "--", "python3", "-c",
                           "import socket,time\ns=socket.socket();s.bind(('0.0.0.0',9000));s.listen(8)\n"
                           "print('up',flush=True)\nt=time.time()\n"
                           "while time.time()-t<40:\n c,_=s.accept();c.sendall(b'hello a');c.close()\n")
    try:
        assert server.stdout.readline().strip() == b"up"
        mine = probe(net_sbx, a, [f"{own_a}:9000"])
        assert mine[f"{own_a}:9000"] == "open hello a", mine
        theirs = probe(net_sbx, b, [f"{own_a}:9000"])
        assert theirs[f"{own_a}:9000"].startswith("closed"), theirs
    finally:
        server.kill()
        server.wait(timeout=30)


def test_rm_and_gc_leave_no_trace(world, net_sbx, net_driver):
    env = {"SBX_NET_DNS": WORLD_DNS}
    ids = [net_sbx.run("create", "--driver", net_driver, "--network", "jail", env=env).ok().out.strip()
           for _ in range(2)]
    net_sbx.created.extend(ids)
    present = jail_traces(ids)
    assert any(t.startswith("link") for t in present), f"no jail found while the sandboxes run: {present}"
    net_sbx.remove(ids[0]).ok()
    assert jail_traces(ids[:1]) == []
    # A sandbox whose agent died is collected by gc, jail included.
    pid = net_sbx.record(ids[1])["agent_pid"]
    os.kill(pid, 9)
    assert wait_until(lambda: net_sbx.record(ids[1])["state"] == "dead", 10)
    net_sbx.run("gc").ok()
    assert jail_traces(ids) == []


def test_gc_frees_a_jail_whose_sandbox_is_forgotten(world, net_sbx):
    # A crash can leave a jail whose sandbox directory is gone: gc still finds it by its lease.
    r = net_sbx.run("create", "--driver", "subprocess", "--network", "jail", env={"SBX_NET_DNS": WORLD_DNS}).ok()
    sid = r.out.strip()
    net_sbx.created.append(sid)
    forget_and_gc(net_sbx, sid)


def forget_and_gc(sbx: Sbx, sid: str):
    """Kills the sandbox's agent (a VM's monitor), deletes its directory, and
    checks that gc still finds its jail by the lease and frees it."""
    pid = sbx.record(sid)["agent_pid"]
    os.kill(pid, 9)
    assert wait_until(lambda: not os.path.exists(f"/proc/{pid}/ns"), 10)
    subprocess.run(["rm", "-rf", sbx.sandbox_dir(sid)], check=True)
    assert jail_traces([sid]), "the jail should still be there before gc"
    out = sbx.run("gc", "--json").ok().out
    assert f"netjail {sid}" in out, out
    assert jail_traces([sid]) == []


def test_sandbox_root_cannot_unjail_itself(world, net_sbx, jailed, net_driver):
    sid = jailed()
    gw = jail_info(net_sbx, sid)["gateway"]
    # Root in the sandbox tries to take another address and a route of its own.
    r = net_sbx.sh(sid, "ip addr add 203.0.113.7/32 dev eth0 && echo ADDR-CHANGED; "
                        f"ip route add 10.99.77.10/32 via {gw} dev eth0 && echo ROUTE-CHANGED; true")
    if net_driver == "subprocess":
        # The namespace belongs to the host's root, not to the sandbox's user namespace.
        assert "ADDR-CHANGED" not in r.out and "ROUTE-CHANGED" not in r.out, r
    # Whatever gVisor's netstack let it do, the host still refuses what it sends from a forged address.
    res = probe(net_sbx, sid, [f"10.99.77.10:{WORLD_PORT}", f"{PUBLIC_A}:{WORLD_PORT}"])
    assert res[f"10.99.77.10:{WORLD_PORT}"].startswith("closed"), res


# --------------------------------------------------------------------------
# microvm: the guest's NIC is the jail's tap, filtered on the host. The guest
# has busybox only (no python3), so the probes are busybox nc and nslookup.
# VMs boot in seconds under TCG: the ones these tests share are booted once,
# in parallel, and only when SBX_TEST_DRIVERS names microvm.

# Runs in the guest: tries every target at once, prints "target|open <reply>" or "target|closed <why>".
VM_PROBE = textwrap.dedent("""
    for t in "$@"; do
      (h=${t%:*}; p=${t##*:}; h=${h#[}; h=${h%]}
       r=$(timeout 6 nc -w 4 "$h" "$p" </dev/null 2>&1)
       case "$r" in hello*) echo "$t|open $r" ;; *) echo "$t|closed $r" ;; esac) &
    done
    wait
""")


def vm_probe(sbx: Sbx, sid: str, targets: list[str]) -> dict[str, str]:
    r = sbx.exec(sid, "sh", "-c", VM_PROBE, "probe", *targets, timeout=60).ok()
    out = dict(line.split("|", 1) for line in r.out.splitlines() if "|" in line)
    assert set(out) == set(targets), r
    return out


def vm_resolve(sbx: Sbx, sid: str, name: str) -> str:
    """The name's IPv4 address as busybox nslookup (through /etc/resolv.conf) finds it, or 'failed ...'."""
    r = sbx.exec(sid, "sh", "-c", f"timeout 10 nslookup -type=a {name} 2>&1", timeout=60)
    after_name = r.out.split("Name:", 1)[1] if "Name:" in r.out else ""
    addrs = [line.split()[-1] for line in after_name.splitlines() if line.strip().startswith("Address")]
    return addrs[0] if addrs else f"failed {r.out.strip()!r}"


@pytest.fixture(scope="module")
def vm_jails(world, net_sbx):
    """Micro-VMs booted at once: name -> id ("jail", "jail2": --network jail; "none").
    The busybox guest (--image host): its nc and nslookup are the probes here."""
    made, errors = create_in_parallel(
        net_sbx, {name: ["--driver", "microvm", "--image", "host", "--network", network]
                  for name, network in {"jail": "jail", "jail2": "jail", "none": "none"}.items()},
        env={"SBX_NET_DNS": WORLD_DNS})
    try:
        assert not errors, "\n".join(errors)
        yield made
    finally:
        if made:
            net_sbx.remove(*made.values())


@pytest.mark.only_drivers("microvm")
def test_microvm_jail_reaches_public_hosts_only(driver, world, net_sbx, vm_jails):
    sid = vm_jails["jail"]
    assert net_sbx.record(sid)["driver_data"]["netjail"], "the VM's record names no jail"
    info = jail_info(net_sbx, sid)
    blocked = private_targets(world, info["gateway"])
    res = vm_probe(net_sbx, sid, [f"{PUBLIC_A}:{WORLD_PORT}", f"{PUBLIC_B}:{WORLD_PORT}", *blocked])
    assert res[f"{PUBLIC_A}:{WORLD_PORT}"] == f"open hello {PUBLIC_A}", res
    assert res[f"{PUBLIC_B}:{WORLD_PORT}"] == f"open hello {PUBLIC_B}", res
    reached = {t: v for t, v in res.items() if t in blocked and v.startswith("open")}
    assert not reached, f"a jailed micro-VM reached private or host addresses: {reached}"


@pytest.mark.only_drivers("microvm")
def test_microvm_jail_resolves_names_through_the_host(driver, world, net_sbx, vm_jails):
    sid = vm_jails["jail"]
    assert vm_resolve(net_sbx, sid, "public-a.test") == PUBLIC_A
    assert vm_resolve(net_sbx, sid, "public-b.test") == PUBLIC_B
    gw = jail_info(net_sbx, sid)["gateway"]
    # The guest asks its gateway; the world's resolver is reached only through it.
    assert net_sbx.sh(sid, "grep nameserver /etc/resolv.conf").ok().out.split() == ["nameserver", gw]


@pytest.mark.only_drivers("microvm")
def test_microvm_network_none_has_no_nic_and_reaches_nothing(driver, world, net_sbx, vm_jails):
    sid = vm_jails["none"]
    assert net_sbx.sh(sid, "ls /sys/class/net").ok().out.split() == ["lo"]
    res = vm_probe(net_sbx, sid, [f"{PUBLIC_A}:{WORLD_PORT}", *private_targets(world, HOST_SIDE)])
    reached = {t: v for t, v in res.items() if v.startswith("open")}
    assert not reached, f"a micro-VM without network reached: {reached}"
    assert vm_resolve(net_sbx, sid, "public-a.test").startswith("failed")


@pytest.mark.only_drivers("microvm")
def test_microvm_jails_cannot_reach_each_other(driver, world, net_sbx, vm_jails):
    a, b = vm_jails["jail"], vm_jails["jail2"]
    gw_a = jail_info(net_sbx, a)["gateway"]
    own_a = gw_a.rsplit(".", 1)[0] + "." + str(int(gw_a.rsplit(".", 1)[1]) + 1)
    server = net_sbx.popen("exec", a, "--", "sh", "-c",
                           "echo up; end=$(($(date +%s) + 40)); "
                           "while [ $(date +%s) -lt $end ]; do echo 'hello a' | nc -l -p 9000; done")
    try:
        assert server.stdout.readline().strip() == b"up"
        theirs = vm_probe(net_sbx, b, [f"{own_a}:9000"])
        assert theirs[f"{own_a}:9000"].startswith("closed"), theirs
        mine = vm_probe(net_sbx, a, [f"{own_a}:9000"])
        assert mine[f"{own_a}:9000"] == "open hello a", mine
    finally:
        server.kill()
        server.wait(timeout=30)


@pytest.mark.only_drivers("microvm")
def test_microvm_guest_root_cannot_unjail_itself(driver, world, net_sbx, vm_jails):
    # The sandbox's root in the guest tries to take another address and send
    # to PUBLIC_B from it: the agent's confinement refuses (no CAP_NET_ADMIN),
    # and behind that the host's filter on the tap drops forged sources.
    sid = vm_jails["jail"]
    gw = jail_info(net_sbx, sid)["gateway"]
    r = net_sbx.sh(sid, "ip addr add 203.0.113.7/32 dev eth0 && echo ADDR-CHANGED; "
                        f"ip route add {PUBLIC_B}/32 via {gw} dev eth0 src 203.0.113.7 && echo ROUTE-CHANGED; true")
    assert "ADDR-CHANGED" not in r.out and "ROUTE-CHANGED" not in r.out, r
    res = vm_probe(net_sbx, sid, [f"{PUBLIC_A}:{WORLD_PORT}", f"10.99.77.10:{WORLD_PORT}"])
    assert res[f"{PUBLIC_A}:{WORLD_PORT}"] == f"open hello {PUBLIC_A}", res
    assert res[f"10.99.77.10:{WORLD_PORT}"].startswith("closed"), res


@pytest.mark.only_drivers("microvm")
def test_microvm_rm_leaves_no_trace(driver, world, net_sbx, vm_jails):
    sid = vm_jails["jail2"]
    present = jail_traces([sid])
    assert any(t.startswith("link") for t in present), f"no tap found while the VM runs: {present}"
    net_sbx.remove(sid).ok()
    assert jail_traces([sid]) == []


@pytest.mark.only_drivers("microvm")
def test_microvm_gc_frees_the_jail_of_a_forgotten_vm(driver, world, net_sbx, vm_jails):
    # A crash can leave a VM's tap whose sandbox directory is gone: gc finds it by its lease.
    forget_and_gc(net_sbx, vm_jails["jail"])
