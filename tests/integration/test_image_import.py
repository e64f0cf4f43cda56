"""sbx image import: OCI images brought from podman (no registry needed).

A busybox root filesystem is `podman import`ed, given a second layer by
`podman build --isolation chroot` (no OCI runtime, no network: the RUN step
deletes a file, so the layer carries a whiteout), and saved as a docker
archive, an OCI archive and an OCI directory. Each is imported with
`sbx image import` and run with `--image NAME`. Hostile archives (written here
with tarfile) are refused with a message naming the entry, and nothing is
written outside the image's root.

Podman keeps its storage in a temp dir (vfs driver), and the image store is a
temp dir too (SBX_IMAGES_DIR), so neither the host's containers nor its images
are touched."""
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile

import pytest

from conftest import skip_or_fail

BUSYBOX = "/bin/busybox"
FORMATS = {"docker-archive": "docker.tar", "oci-archive": "oci.tar", "oci-dir": "oci-dir"}


def _run(argv, **kw):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, **kw)
    return p.returncode, p.stdout


@pytest.fixture(scope="module")
def podman_images(tmp_path_factory):
    """Saves a two-layer busybox image (or the one-layer base, if podman build cannot run here) three ways."""
    if not shutil.which("podman"):
        skip_or_fail("podman is not installed (apt-get install podman)")
    if not os.path.exists(BUSYBOX):
        skip_or_fail("busybox-static is not installed (apt-get install busybox-static)")
    top = tmp_path_factory.mktemp("podman")
    podman = ["podman", "--root", str(top / "storage"), "--runroot", str(top / "run"),
              "--storage-driver", "vfs", "--events-backend", "none", "--cgroup-manager", "cgroupfs"]
    root = top / "rootfs"
    for d in ("bin", "etc", "tmp"):
        (root / d).mkdir(parents=True)
    os.chmod(root / "tmp", 0o1777)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    for applet in ("sh", "echo", "cat", "ls", "rm", "mkdir"):
        os.symlink("busybox", root / "bin" / applet)
    (root / "etc" / "marker").write_text("from the base layer\n")
    (root / "etc" / "gone").write_text("deleted by the second layer\n")
    rc, out = _run(["tar", "-C", str(root), "-cf", str(top / "rootfs.tar"), "."])
    assert rc == 0, out
    rc, out = _run(podman + ["import", "--change", 'CMD ["/bin/sh"]', str(top / "rootfs.tar"),
                             "localhost/sbxit:base"])
    assert rc == 0, out
    ctx = top / "ctx"
    ctx.mkdir()
    (ctx / "Containerfile").write_text(
        "FROM localhost/sbxit:base\n"
        "RUN rm /etc/gone && mkdir /data && echo built > /data/new\n"
        "ENV GREETING=hello\n"
        "WORKDIR /data\n")
    rc, out = _run(podman + ["build", "--isolation", "chroot", "--ulimit", "nofile=1024:1024",
                             "--ulimit", "nproc=1024:1024", "-t", "localhost/sbxit:built", str(ctx)])
    layered = rc == 0
    if not layered:
        print(f"NOTE: podman build cannot run here, importing the one-layer image only:\n{out}")
    image = "localhost/sbxit:built" if layered else "localhost/sbxit:base"
    paths = {}
    for fmt, name in FORMATS.items():
        rc, out = _run(podman + ["save", "--format", fmt, "-o", str(top / name), image])
        assert rc == 0, out
        paths[fmt] = str(top / name)
    multi = str(top / "multi.tar")
    rc, out = _run(podman + ["save", "-m", "--format", "docker-archive", "-o", multi,
                             "localhost/sbxit:base", image])
    return {"paths": paths, "layered": layered, "multi": multi if rc == 0 and layered else None}


@pytest.fixture
def images_dir(tmp_path, monkeypatch):
    d = tmp_path / "images"
    monkeypatch.setenv("SBX_IMAGES_DIR", str(d))
    return d


def _import(sbx, src, *flags):
    return sbx.run("image", "import", str(src), *flags, timeout=300)


@pytest.mark.only_drivers("subprocess", "runsc")
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_imported_image_runs(sbx, make_sandbox, driver, podman_images, images_dir, fmt):
    name = f"bb-{fmt}"
    r = _import(sbx, podman_images["paths"][fmt], "--name", name).ok()
    image_id = r.out.strip()
    assert re.fullmatch(r"(sha256:)?[0-9a-f]{12,64}", image_id), r
    sid = make_sandbox("--image", name, driver=driver)
    assert sbx.exec(sid, "/bin/busybox", "echo", "hi").ok().out == "hi\n"
    assert sbx.exec(sid, "/bin/cat", "/etc/marker").ok().out == "from the base layer\n"
    if podman_images["layered"]:
        # The second layer's whiteout deleted /etc/gone; its new file is there.
        r = sbx.exec(sid, "/bin/cat", "/etc/gone")
        assert r.rc != 0, r
        assert sbx.exec(sid, "/bin/cat", "/data/new").ok().out == "built\n"
    listed = sbx.run("image", "ls", "--json").ok()
    assert name in listed.out, listed
    # The same image imported again (under another name) is the same id: content-addressed.
    again = _import(sbx, podman_images["paths"][fmt], "--name", name + "-again").ok()
    assert again.out.strip() == image_id, again


def test_import_picks_by_ref_from_a_multi_image_archive(sbx, podman_images, images_dir):
    if not podman_images["multi"]:
        pytest.skip("podman could not build the second image, so there is no multi-image archive")
    r = _import(sbx, podman_images["multi"], "--name", "multi")
    assert r.rc != 0 and "--ref" in r.err, r
    _import(sbx, podman_images["multi"], "--name", "multi", "--ref", "localhost/sbxit:built").ok()


# ---- hostile archives ---------------------------------------------------------

def _tar(members) -> bytes:
    """A tar of (TarInfo, data-or-None) pairs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for info, data in members:
            info.mtime = 1_600_000_000
            if data is not None:
                info.size = len(data)
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _info(name, kind=tarfile.REGTYPE, link=""):
    i = tarfile.TarInfo(name)
    i.type = kind
    i.linkname = link
    i.mode = 0o644
    return i


def _docker_archive(path, layer: bytes):
    """A one-layer docker archive (the `docker save` layout) holding `layer`."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/sh"]},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": ["localhost/hostile:1"],
                            "Layers": ["l0/layer.tar"]}]).encode()
    path.write_bytes(_tar([(_info("manifest.json"), manifest), (_info(config_name), config),
                           (_info("l0/layer.tar"), layer)]))
    return diff_id


def _hostile_layer(kind, outside):
    ok = (_info("bin/ok"), b"harmless\n")
    if kind == "dotdot":
        return "../escape", _tar([ok, (_info("../escape"), b"x")])
    if kind == "symlink-parent":
        return "etc/passwd", _tar([ok, (_info("etc", tarfile.SYMTYPE, str(outside)), None),
                                   (_info("etc/passwd"), b"root::0:0::/:/bin/sh\n")])
    if kind == "hardlink":
        return "shadow", _tar([ok, (_info("shadow", tarfile.LNKTYPE, "/etc/shadow"), None)])
    if kind == "device":
        dev = _info("dev/mem", tarfile.CHRTYPE)
        dev.devmajor, dev.devminor = 1, 1
        return "dev/mem", _tar([ok, (dev, None)])
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["dotdot", "symlink-parent", "hardlink", "device"])
def test_hostile_archive_is_refused(sbx, tmp_path, images_dir, kind):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("planted\n")
    shadow_links = os.stat("/etc/shadow").st_nlink if os.path.exists("/etc/shadow") else None
    entry, layer = _hostile_layer(kind, outside)
    archive = tmp_path / "hostile.tar"
    diff_id = _docker_archive(archive, layer)
    r = _import(sbx, archive, "--name", "hostile")
    assert r.rc != 0, r
    assert entry in r.err and diff_id in r.err, r  # names the entry and the layer
    assert "sbx: hint:" in r.err, r  # says what to do
    # Nothing was written outside, and no half-imported image is left behind.
    assert sorted(os.listdir(outside)) == ["secret"]
    assert (outside / "secret").read_text() == "planted\n"
    assert not (tmp_path / "escape").exists() and not (images_dir / "escape").exists()
    if shadow_links is not None:
        assert os.stat("/etc/shadow").st_nlink == shadow_links
    listed = sbx.run("image", "ls", "--json")
    assert "hostile" not in listed.out, listed
