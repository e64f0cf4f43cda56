"""--image DIR: any directory root filesystem as the read-only base.

The image here is the smallest real one: Debian's statically linked busybox
and its applet links, built in a temp dir (examples/build-debian-rootfs.sh
makes a full Debian one the same way sbx uses it)."""
import os
import shutil

import pytest

from conftest import skip_or_fail

BUSYBOX = "/bin/busybox"


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    if not os.path.exists(BUSYBOX):
        skip_or_fail("busybox-static is not installed (apt-get install busybox-static)")
    root = tmp_path_factory.mktemp("image") / "rootfs"
    for d in ("bin", "tmp", "etc", "marker-dir"):
        (root / d).mkdir(parents=True)
    os.chmod(root / "tmp", 0o1777)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    for applet in ("sh", "echo", "ls", "cat", "touch", "id", "hostname", "rm", "mkdir"):
        os.symlink("busybox", root / "bin" / applet)
    (root / "etc" / "image-marker").write_text("from the image\n")
    return str(root)


@pytest.mark.only_drivers("subprocess", "runsc")
def test_image_is_the_root(sbx, make_sandbox, image, driver):
    sid = make_sandbox("--image", image, driver=driver)
    r = sbx.exec(sid, "/bin/cat", "/etc/image-marker").ok()
    assert r.out == "from the image\n"
    # The host's /usr is not part of an image sandbox.
    r = sbx.exec(sid, "/bin/ls", "/").ok()
    names = set(r.out.split())
    assert "marker-dir" in names and "usr" not in names, names
    r = sbx.exec(sid, "/bin/id").ok()
    assert "uid=0" in r.out


@pytest.mark.only_drivers("subprocess", "runsc")
def test_image_base_is_read_only_and_layer_private(sbx, make_sandbox, image, driver):
    a = make_sandbox("--image", image, driver=driver)
    b = make_sandbox("--image", image, driver=driver)
    # The base belongs to the host: the sandbox cannot change it...
    r = sbx.exec(a, "/bin/sh", "-c", "echo x > /etc/image-marker")
    assert r.rc != 0, r
    r = sbx.exec(a, "/bin/sh", "-c", "echo x > /bin/busybox")
    assert r.rc != 0, r
    # ...but can write its own layer, which no other sandbox and not the image see.
    sbx.exec(a, "/bin/sh", "-c", "echo mine > /tmp/a && mkdir -p /work && echo w > /work/f").ok()
    assert sbx.exec(a, "/bin/cat", "/tmp/a").ok().out == "mine\n"
    assert sbx.exec(b, "/bin/cat", "/tmp/a").rc != 0
    assert not os.path.exists(os.path.join(image, "tmp", "a"))
    assert open(os.path.join(image, "etc", "image-marker")).read() == "from the image\n"


@pytest.mark.only_drivers("subprocess", "runsc")
def test_image_missing_is_a_clear_error(sbx, tmp_path):
    r = sbx.run("create", "--driver", "subprocess", "--image", str(tmp_path / "nope"))
    assert r.rc != 0 and "does not exist" in r.err, r


@pytest.mark.only_drivers("subprocess", "runsc")
def test_image_symlink_cannot_aim_setup_at_the_host(sbx, image, tmp_path, driver):
    # The host creates /tmp, /root, /var/tmp and the workdir in the sandbox's
    # root as root; an image whose /tmp is a link to a host directory must be
    # refused, not have that directory created or chowned on the host.
    bad = tmp_path / "bad"
    shutil.copytree(image, bad, symlinks=True)
    shutil.rmtree(bad / "tmp")
    victim = tmp_path / "victim"
    victim.mkdir()
    os.symlink(str(victim), bad / "tmp")
    before = os.stat(victim)
    r = sbx.run("create", "--driver", driver, "--image", str(bad))
    assert r.rc != 0, r
    assert "symlink" in r.err and "/tmp" in r.err, r
    after = os.stat(victim)
    assert (after.st_uid, after.st_gid, after.st_mode) == (before.st_uid, before.st_gid, before.st_mode)
    assert list(victim.iterdir()) == []
    r = sbx.run("create", "--driver", driver, "--image", image, "--workdir", "/marker-dir/../etc/x")
    assert r.rc != 0 and ".." in r.err, r
