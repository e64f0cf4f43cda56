"""The Debian package, installed the way an operator installs it: a clean
Debian 12 root made by mmdebstrap (the "important" variant: what a fresh
install has), `apt-get install -y ./sbx_*.deb` inside it from Debian's
archive, then the installed sbx runs a sandbox on the default local driver.

The .deb comes from the test's build tree (scripts/build-deb.sh BUILD_DIR,
which reuses it while nothing that goes into it changed). The root's tarball
is made once per suite and variant under /var/cache/sbx-test, and so are the
downloaded .debs and npm's cache, bind-mounted into the root; each module run
unpacks a fresh root from the tarball. Commands run in the root through an
unshared mount namespace (proc, sys, dev, a tmpfs /run and /tmp) that
pivot_root()s into it: a chroot would do for apt, but not for sandboxes (the
kernel refuses new user and mount namespaces to a chrooted process).

The root gets the host's network settings, nothing else: /etc/resolv.conf
and the host's local CA certificates (/usr/local/share/ca-certificates, and
NODE_EXTRA_CA_CERTS when the host sets it), for hosts whose egress is
TLS-inspected."""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, SBX_BIN_SOURCE, skip_or_fail

BUILD_DIR = Path(SBX_BIN_SOURCE).resolve().parent
CACHE = Path(os.environ.get("SBX_TEST_CACHE", "/var/cache/sbx-test"))
SUITE = "bookworm"
RECIPE = ["mmdebstrap", "--variant=important", "--aptopt=Acquire::Languages \"none\"",
          "--dpkgopt=force-unsafe-io", SUITE]
UNITS = ("sbx-serve.service", "sbx-serve-microvm.service")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Runs "$2" inside root "$1", as described above; the mounts die with the namespace.
ENTER = r"""
set -e
r=$1 cache=$3
mount --bind "$r" "$r"
mount -t proc proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
mount -t tmpfs -o mode=755 tmpfs "$r/run"
mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
mkdir -p "$cache/apt-archives" "$cache/npm" "$r/root/.npm"
mount --bind "$cache/apt-archives" "$r/var/cache/apt/archives"
mount --bind "$cache/npm" "$r/root/.npm"
cd "$r"
mkdir -p .host
pivot_root . .host
umount -l /.host
rmdir /.host || true
cd /
exec /usr/bin/env -i PATH="$4" HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive $5 /bin/sh -c "$2"
"""


def in_root(root: Path, script: str, timeout: float = 600, env: dict[str, str] | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
    # Passed as words of env(1): no value may hold whitespace.
    assert not any(re.search(r"\s", k + v) for k, v in (env or {}).items()), env
    extra = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "--fork", "/bin/sh", "-c", ENTER,
                        "enter", str(root), script, str(CACHE / f"deb-{SUITE}"), PATH, extra],
                       capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, f"in the root: {script}\nexit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def deb() -> Path:
    if os.geteuid() != 0:
        skip_or_fail("the install test needs root (mmdebstrap, mount namespaces)")
    if not (BUILD_DIR / "CMakeCache.txt").exists():
        skip_or_fail(f"{BUILD_DIR} is not a CMake build tree (SBX_BIN={SBX_BIN_SOURCE})")
    for tool in ("dpkg-shlibdeps", "cpack"):
        if not shutil.which(tool):
            skip_or_fail(f"{tool} is missing (apt-get install dpkg-dev cmake)")
    t0 = time.monotonic()
    r = subprocess.run([str(REPO / "scripts" / "build-deb.sh"), str(BUILD_DIR)], capture_output=True, text=True,
                       timeout=3600)
    assert r.returncode == 0, r.stderr[-3000:]
    path = Path(r.stdout.strip().splitlines()[-1])
    print(f"\ntest_deb: {path.name}: {path.stat().st_size / 1e6:.1f} MB (build-deb.sh took "
          f"{time.monotonic() - t0:.0f} s)", file=sys.stderr)
    return path


def base_tarball() -> Path:
    """The clean root of RECIPE as a tarball, made once per recipe."""
    if not shutil.which("mmdebstrap"):
        skip_or_fail("mmdebstrap is not installed (apt-get install mmdebstrap)")
    key = hashlib.sha256(" ".join(RECIPE).encode()).hexdigest()[:12]
    CACHE.mkdir(parents=True, exist_ok=True)
    tar = CACHE / f"deb-root-{SUITE}-{key}.tar"
    with open(CACHE / f"deb-root-{SUITE}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tar.exists():
            tmp = tar.with_suffix(".tmp.tar")
            r = subprocess.run([*RECIPE, str(tmp)], capture_output=True, text=True, timeout=1800)
            if r.returncode != 0:
                tmp.unlink(missing_ok=True)
                pytest.fail(f"{' '.join(RECIPE)} failed: {r.stderr[-2000:]}")
            tmp.rename(tar)
    return tar


@pytest.fixture(scope="module")
def root(deb):
    tar = base_tarball()
    d = Path(tempfile.mkdtemp(prefix="sbx-debroot-", dir="/var/tmp"))
    try:
        subprocess.run(["tar", "-xf", str(tar), "-C", str(d)], check=True, timeout=600)
        shutil.copy2("/etc/resolv.conf", d / "etc" / "resolv.conf")
        shutil.copy2(deb, d / "root" / deb.name)
        t0 = time.monotonic()
        r = in_root(d, f"apt-get update -qq && apt-get install -y ./root/{deb.name}", timeout=1800)
        print(f"\ntest_deb: apt-get install -y ./{deb.name} in a clean {SUITE} took {time.monotonic() - t0:.0f} s",
              file=sys.stderr)
        (d / "root" / "apt-install.log").write_text(r.stdout)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def installed_files(deb: Path) -> set[str]:
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].lstrip(".") for line in out.splitlines()}


def test_package_names_debian_dependencies_and_holds_every_runtime_file(deb):
    version = subprocess.run([str(BUILD_DIR / "sbx"), "--version"], capture_output=True, text=True).stdout.split()[-1]
    assert deb.name == f"sbx_{version}_amd64.deb"
    field = lambda f: subprocess.run(["dpkg-deb", "-f", str(deb), f], capture_output=True, text=True).stdout.strip()
    depends = field("Depends")
    for pkg in ("libc6", "libnftables1", "libmnl0", "e2fsprogs"):
        assert re.search(rf"\b{pkg}\b", depends), f"Depends lacks {pkg}: {depends}"
    for pkg in ("runsc", "qemu-system-x86", "mmdebstrap"):
        assert pkg in field("Recommends"), field("Recommends")
    files = installed_files(deb)
    want = ["/usr/bin/sbx", "/usr/libexec/sbx/sbx-agent", "/usr/libexec/sbx/sbx-agent-deno/agent.ts",
            "/usr/libexec/sbx/setup-deno.sh", "/usr/share/sbx/deno/package-lock.json",
            "/usr/share/man/man1/sbx.1", "/usr/share/man/man1/sbx-serve.1",
            "/usr/share/bash-completion/completions/sbx", "/usr/share/zsh/vendor-completions/_sbx",
            "/usr/share/fish/vendor_completions.d/sbx.fish", "/usr/lib/sbx/guest/vmlinuz",
            "/usr/lib/sbx/guest/initrd.cpio.gz", *(f"/usr/lib/systemd/system/{u}" for u in UNITS)]
    assert not [f for f in want if f not in files], f"missing from the package: {[f for f in want if f not in files]}"
    assert not [f for f in files if not f.startswith("/usr/")], "the package installs outside /usr"


def test_installed_sbx_version_man_pages_and_completions(root):
    r = in_root(root, "sbx --version; command -v sbx")
    version = subprocess.run([str(BUILD_DIR / "sbx"), "--version"], capture_output=True, text=True).stdout
    assert r.stdout.splitlines() == [version.strip(), "/usr/bin/sbx"]
    # man-db is not in a fresh minimal install; where it is, man finds the page.
    r = in_root(root, "if command -v man >/dev/null; then man -w sbx; else ls /usr/share/man/man1/sbx.1; fi")
    assert r.stdout.strip().endswith(("man1/sbx.1", "man1/sbx.1.gz")), r.stdout
    for f in ("usr/share/bash-completion/completions/sbx", "usr/share/man/man1/sbx-serve.1"):
        assert (root / f).is_file(), f


def test_units_are_installed_name_the_installed_sbx_and_verify_clean(root):
    for unit in UNITS:
        text = (root / "usr/lib/systemd/system" / unit).read_text()
        starts = re.findall(r"^ExecStart=(\S+)", text, re.M)
        assert starts == ["/usr/bin/sbx"], (unit, starts)
    # Installed, not enabled: no maintainer script links them anywhere.
    assert not list((root / "etc/systemd/system").rglob("sbx-serve*"))
    if not (root / "usr/bin/systemd-analyze").exists():
        skip_or_fail("systemd-analyze is not in the root")
    # --man=no: man-db is not installed, and Documentation= is checked by running man.
    paths = " ".join(f"/usr/lib/systemd/system/{u}" for u in UNITS)
    r = in_root(root, f"systemd-analyze verify --man=no {paths} 2>&1", check=False)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr


def test_default_driver_runs_python_after_the_one_command_deno_setup(root):
    # Before the setup: the default (deno) driver says which command installs its runtime.
    r = in_root(root, "sbx exec --rm -- python3 -c 'print(1)'", check=False)
    assert r.returncode == 125 and "/usr/libexec/sbx/setup-deno.sh" in r.stderr, r.stderr
    r = in_root(root, "sbx doctor --driver deno 2>&1", check=False)
    assert "/usr/libexec/sbx/setup-deno.sh" in r.stdout, r.stdout
    # The host's local CAs (a TLS-inspecting egress), as the host's own npm trusts them.
    for crt in Path("/usr/local/share/ca-certificates").glob("*.crt"):
        shutil.copy2(crt, root / "usr/local/share/ca-certificates" / crt.name)
    env = {"NODE_EXTRA_CA_CERTS": os.environ["NODE_EXTRA_CA_CERTS"]} if "NODE_EXTRA_CA_CERTS" in os.environ else {}
    t0 = time.monotonic()
    in_root(root, "update-ca-certificates >/dev/null 2>&1; /usr/libexec/sbx/setup-deno.sh", env=env, timeout=1200)
    print(f"\ntest_deb: /usr/libexec/sbx/setup-deno.sh took {time.monotonic() - t0:.0f} s", file=sys.stderr)
    r = in_root(root, "sbx exec --rm -- python3 -c 'print(1)'", check=False)
    assert r.returncode == 0 and r.stdout == "1\n", (r.returncode, r.stdout, r.stderr)
    r = in_root(root, "sbx doctor --json --driver deno", check=False)
    assert '"driver": "deno"' in r.stdout, r.stdout[-2000:]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_microvm_unit_start_check(root):
    """The micro-VM unit's own ExecStart=, on loopback: on this PVM host it refuses
    with the reason and what to do, after its other checks passed."""
    text = (root / "usr/lib/systemd/system/sbx-serve-microvm.service").read_text()
    argv = shlex.split(re.search(r"^ExecStart=(.*)$", text, re.M).group(1))
    assert "--require-kvm" in argv and argv[argv.index("--listen") + 1] == "0.0.0.0:8400"
    port = free_port()
    argv[argv.index("--listen") + 1] = f"127.0.0.1:{port}"
    env = {"ADMIN_API_KEY": "k" + hashlib.sha256(os.urandom(8)).hexdigest()}
    # This host's /dev/kvm is PVM; on some boots it has none at all: either way the unit refuses.
    no_kvm = not os.path.exists("/dev/kvm")
    pvm = no_kvm or os.path.exists("/sys/module/kvm_pvm")
    # Where KVM works the manager starts: it is stopped once it answers.
    script = f"exec {shlex.join(argv)} 2>&1" if pvm else (
        f"{shlex.join(argv)} >/tmp/log 2>&1 & pid=$!; for i in $(seq 100); do "
        f"grep -q listening /tmp/log && break; sleep 0.2; done; kill $pid; wait $pid; cat /tmp/log")
    r = in_root(root, script, env=env, check=False, timeout=120)
    lines = r.stdout.splitlines()
    checks = {m.group(2): m.group(1) for m in (re.match(r"sbx serve: (ok|FAILED) ([^:]+):", x) for x in lines) if m}
    for name in ("running as root", "VMM qemu", "guest image", "cgroups"):
        assert checks.get(name) == "ok", (name, r.stdout)
    if not pvm:
        assert checks.get("KVM") == "ok", r.stdout
        return
    assert r.returncode == 125, r.stdout
    assert checks.get("KVM") == "FAILED", r.stdout
    why, fix = ("no /dev/kvm", "load the KVM module") if no_kvm else ("/dev/kvm is PVM", "run the micro-VM manager on a host with hardware KVM")
    assert f"sbx: error: micro-VMs cannot run with hardware isolation here (--require-kvm): KVM: {why}" in r.stdout
    assert f"sbx: hint: {fix}" in r.stdout
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
