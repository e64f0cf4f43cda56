"""Micro-VMs with --image: the image's root as a read-only disk under the
sandbox's writable disk (run with SBX_TEST_DRIVERS=microvm).

The Debian image is real: mmdebstrap --variant=minbase --include=python3
bookworm, made once per recipe under /var/cache/sbx-test (a minute or two the
first time) and laid out like an entry of the image store (rootfs/ beside
image.json), so its block image is cached beside it as rootfs.ext4. That
cache is removed when this module starts, so the run makes it anew with the
code under test. The busybox image is a plain directory (no image.json): a
copy per sandbox. VMs boot under TCG on hosts without usable KVM, so the ones
these tests share are booted once, in parallel.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import require_listed_driver, skip_or_fail
from test_microvm import boot_vms

microvm_only = pytest.mark.only_drivers("microvm")

RECIPE = ["mmdebstrap", "--variant=minbase", "--include=python3", "bookworm"]
CACHE = os.environ.get("SBX_TEST_CACHE", "/var/cache/sbx-test")
BUSYBOX = "/bin/busybox"


def debian_image() -> str:
    """The Debian rootfs of RECIPE, made once per recipe (bench/microvm_image_boot.sh shares it)."""
    if not shutil.which("mmdebstrap"):
        skip_or_fail("mmdebstrap is not installed (apt-get install mmdebstrap)")
    key = hashlib.sha256(" ".join(RECIPE).encode()).hexdigest()[:12]
    entry = os.path.join(CACHE, f"microvm-debian-{key}")
    rootfs = os.path.join(entry, "rootfs")
    os.makedirs(entry, exist_ok=True)
    with open(os.path.join(entry, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isdir(rootfs):
            tmp = tempfile.mkdtemp(dir=entry, prefix="rootfs.tmp.")
            r = subprocess.run([*RECIPE, tmp], capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                pytest.fail(f"{' '.join(RECIPE)} failed: {r.stderr[-2000:]}")
            os.rename(tmp, rootfs)
        with open(os.path.join(entry, "image.json"), "w") as f:
            json.dump({"id": "sha256:" + key, "names": ["sbx-test-debian"], "source": {"recipe": RECIPE}}, f)
    return rootfs


def busybox_image(root: str) -> str:
    if not os.path.exists(BUSYBOX):
        skip_or_fail("busybox-static is not installed (apt-get install busybox-static)")
    for d in ("bin", "tmp", "etc", "marker-dir"):
        os.makedirs(os.path.join(root, d))
    os.chmod(os.path.join(root, "tmp"), 0o1777)
    shutil.copy(BUSYBOX, os.path.join(root, "bin", "busybox"))
    for applet in ("sh", "echo", "ls", "cat", "touch", "rm", "mkdir", "dd", "df", "sync"):
        os.symlink("busybox", os.path.join(root, "bin", applet))
    with open(os.path.join(root, "etc", "image-marker"), "w") as f:
        f.write("from the image\n")
    # An absolute link where the agent goes: followed inside the image, never in the guest's initramfs.
    os.symlink("/bin", os.path.join(root, "sbin"))
    return root


def qemu_of(sid: str) -> tuple[int, list[str]]:
    """The pid and argv of the QEMU of sandbox sid."""
    for e in os.scandir("/proc"):
        if not e.name.isdigit():
            continue
        try:
            argv = open(f"/proc/{e.name}/cmdline", "rb").read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if os.path.basename(argv[0]).startswith("qemu-system") and f"/sandboxes/{sid}/" in " ".join(argv):
            return int(e.name), argv
    raise AssertionError(f"no QEMU for {sid}")


@pytest.fixture(scope="module")
def images(sbx, tmp_path_factory):
    require_listed_driver(sbx, "microvm")  # before a minute of mmdebstrap
    debian = debian_image()
    cache = os.path.join(os.path.dirname(debian), "rootfs.ext4")
    if os.path.exists(cache):
        os.unlink(cache)  # made anew by this run's sbx (below, by two creates at once)
    busybox = busybox_image(str(tmp_path_factory.mktemp("image") / "rootfs"))
    return {"debian": debian, "cache": cache, "busybox": busybox}


@pytest.fixture(scope="module")
def vms(sbx, images):
    """Sandboxes booted at once for this module: name -> id (removed at the end)."""
    d = images["debian"]
    yield from boot_vms(sbx, {
        "debian": ["--image", d, "--disk", "64M"],
        # The same image, booted at the same time: one disk made, and shared.
        "jail": ["--image", d, "--network", "jail"],
        "busybox": ["--image", images["busybox"]],
    }, timeout=600)


@microvm_only
def test_python_runs_in_a_micro_vm_with_a_debian_image(sbx, vms, driver):
    sid = vms["debian"]
    assert sbx.exec(sid, "python3", "-c", "print(1)").ok().out == "1\n"
    assert sbx.exec(sid, "cat", "/etc/debian_version").ok().out.startswith("12")
    # Its own kernel still, and the agent (which the image knows nothing of) as PID 1.
    assert sbx.exec(sid, "uname", "-r").ok().out.strip().endswith("-cloud-amd64")
    assert b"sbx-agent" in sbx.exec(sid, "cat", "/proc/1/cmdline").ok().stdout


@microvm_only
def test_files_persist_on_the_writable_disk_and_the_image_is_read_only(sbx, vms, images, driver):
    sid = vms["debian"]
    marker = "written-by-" + sid
    sbx.sh(sid, f"echo {marker} > /work/note && echo t > /tmp/t && sync").ok()
    assert sbx.exec(sid, "cat", "/work/note").ok().out == marker + "\n"
    assert sbx.exec(sid, "cat", "/tmp/t").ok().out == "t\n"
    # On the sandbox's own disk: read it back from the host's layer.img.
    layer = os.path.join(sbx.sandbox_dir(sid), "layer.img")
    r = subprocess.run(["debugfs", "-R", "cat /upper/work/note", layer], capture_output=True, text=True)
    assert r.stdout == marker + "\n", r
    # The image is not writable from the guest...
    r = sbx.sh(sid, "echo x > /usr/bin/python3")
    assert r.rc != 0 and "Read-only" in r.err, r
    r = sbx.sh(sid, "touch /usr/new-file")
    assert r.rc != 0, r
    # ...nor from QEMU, which opened the image's disk read-only.
    pid, _ = qemu_of(sid)
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target == images["cache"]:
            flags = int(open(f"/proc/{pid}/fdinfo/{fd}").read().split("flags:")[1].split()[0], 8)
            assert flags & os.O_ACCMODE == os.O_RDONLY, (target, oct(flags))
            break
    else:
        raise AssertionError(f"QEMU {pid} holds no descriptor of {images['cache']}")
    assert not os.path.exists(os.path.join(images["debian"], "work", "note"))


@microvm_only
def test_disk_caps_the_writable_layer_over_an_image(sbx, vms, driver):
    sid = vms["debian"]  # --disk 64M
    r = sbx.sh(sid, "dd if=/dev/zero of=/work/big bs=1M count=100", timeout=120)
    assert r.rc != 0 and "No space left" in r.err, r
    sbx.exec(sid, "rm", "/work/big").ok()
    size_kb = int(sbx.sh(sid, "df -k /work | tail -1").ok().out.split()[1])
    assert 40_000 < size_kb < 70_000, size_kb
    assert sbx.exec(sid, "python3", "-c", "print('still here')").ok().out == "still here\n"


@microvm_only
def test_sandboxes_of_one_image_share_its_cached_disk(sbx, vms, images, driver):
    cache = images["cache"]
    assert os.path.isfile(cache), "no rootfs.ext4 beside the store image's rootfs"
    assert not [n for n in os.listdir(os.path.dirname(cache)) if ".tmp." in n and n.startswith("rootfs.ext4")]
    for name in ("debian", "jail"):
        _, argv = qemu_of(vms[name])
        assert any(f"file={cache}," in a and "readonly=on" in a for a in argv), (name, argv)
        assert not os.path.exists(os.path.join(sbx.sandbox_dir(vms[name]), "image.ext4"))
    before = os.stat(cache)
    sid = sbx.create("--image", images["debian"], driver="microvm", timeout=300)
    try:
        assert sbx.exec(sid, "python3", "-c", "print(2)").ok().out == "2\n"
        after = os.stat(cache)
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), "the cached disk was made again"
    finally:
        sbx.remove(sid)


@microvm_only
def test_network_jail_names_the_gateway_in_the_images_resolv_conf(sbx, vms, driver):
    sid = vms["jail"]
    conf = sbx.exec(sid, "cat", "/etc/resolv.conf").ok().out
    # The default route's gateway, from the guest's kernel (little-endian hex).
    routes = [line.split() for line in sbx.exec(sid, "cat", "/proc/net/route").ok().out.splitlines()[1:]]
    (gw_hex,) = [r[2] for r in routes if r[1] == "00000000"]
    gateway = ".".join(str(b) for b in reversed(bytes.fromhex(gw_hex)))
    assert "sbx network jail" in conf and f"nameserver {gateway}\n" in conf, (conf, gateway)


@microvm_only
def test_a_plain_busybox_directory_is_an_image_too(sbx, vms, images, driver):
    sid = vms["busybox"]
    assert sbx.exec(sid, "/bin/cat", "/etc/image-marker").ok().out == "from the image\n"
    names = set(sbx.exec(sid, "/bin/ls", "/").ok().out.split())
    assert "marker-dir" in names and "usr" not in names, names
    sbx.sh(sid, "echo kept > /tmp/k").ok()
    assert sbx.sh(sid, "test -L /sbin && test -s /bin/sbx-agent && echo linked").ok().out == "linked\n"
    assert sbx.exec(sid, "/bin/cat", "/tmp/k").ok().out == "kept\n"
    # A plain directory may change: each sandbox gets its own copy, none is cached beside it.
    assert os.path.isfile(os.path.join(sbx.sandbox_dir(sid), "image.ext4"))
    assert not os.path.exists(os.path.join(os.path.dirname(images["busybox"]), "rootfs.ext4"))
    assert not os.path.exists(os.path.join(images["busybox"], "tmp", "k"))


@microvm_only
def test_a_missing_image_is_a_clear_error(sbx, driver, tmp_path):
    r = sbx.run("create", "--driver", "microvm", "--image", str(tmp_path / "nope"), timeout=60)
    assert r.rc != 0 and r.err.startswith("sbx: error:") and "does not exist" in r.err, r
    assert str(tmp_path / "nope") in r.err, r


@microvm_only
def test_an_image_spanning_filesystems_is_refused(sbx, driver):
    # The host's own / as a micro-VM's image would be a copy of the whole host.
    r = sbx.run("create", "--driver", "microvm", "--image", "/", timeout=120)
    assert r.rc != 0 and "is a mount point" in r.err, r
    assert "sbx: hint:" in r.err, r
