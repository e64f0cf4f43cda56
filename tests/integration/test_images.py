"""Images: `sbx image build` with real mmdebstrap from Debian's archive, the
store's ls/inspect/rm/gc, and sandboxes that boot on an image by name.

The numpy image is built into a private store (SBX_IMAGES_DIR) for this
module, with the host's shared apt cache, so nothing of it outlives the run.
The default-image tests use the host's store, where scripts/setup.sh built
`default`. Micro-VMs boot the same images (their root is the image as a
read-only disk); `--image host` means the busybox guest there, so the host-view
test stays with the drivers that have a host view."""
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import skip_or_fail
from manager_fixtures import assert_error
from manager_fixtures import managers, manager_root  # noqa: F401 (fixtures)

RECIPE_PACKAGES = "python3-numpy"
NAME = "sbxit-numpy"
# A host build tool no image here installs: seeing it means the host view.
HOST_ONLY = "/usr/bin/cmake"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    if shutil.which("mmdebstrap") is None:
        skip_or_fail("mmdebstrap is not installed (apt-get install mmdebstrap)")
    return str(tmp_path_factory.mktemp("images") / "store")


@pytest.fixture(scope="module")
def img_env(store):
    return {"SBX_IMAGES_DIR": store}


@pytest.fixture(scope="module")
def numpy_image(sbx, store, img_env):
    """(id, stderr of the build): the image NAME, built once for the module."""
    r = sbx.run("image", "build", NAME, "--packages", RECIPE_PACKAGES, env=img_env, timeout=1200)
    if r.rc != 0 and "Temporary failure resolving" in r.err:
        skip_or_fail(f"Debian's archive is not reachable: {r.err[-300:]}")
    r.ok()
    image_id = r.out.strip()
    assert image_id.startswith("sha256:") and len(image_id) == 71, r
    return image_id, r.err


@pytest.mark.only_drivers("subprocess", "runsc", "microvm")
def test_numpy_image_runs_import_numpy(sbx, driver, numpy_image, img_env):
    # make_sandbox has no env: created through the runner, with the private store.
    r = sbx.run("create", "--driver", driver, "--image", NAME, env=img_env).ok()
    sid = r.out.strip()
    sbx.created.append(sid)
    try:
        r = sbx.exec(sid, "python3", "-c", "import numpy; print(numpy.arange(4).sum())").ok()
        assert r.out == "6\n"
        # `python` is python3 wherever python3 is (python-is-python3 comes with it).
        assert sbx.exec(sid, "python", "-c", "import sys; print(sys.version_info[0])").ok().out == "3\n"
        # The image, not the host: the host's build tools are not there, Debian's files are.
        assert sbx.exec(sid, "test", "-e", HOST_ONLY).rc != 0
        assert sbx.exec(sid, "cat", "/etc/debian_version").ok().out.strip()
        # The image's files belong to the host: the sandbox cannot change them,
        # and what it writes stays in its own layer.
        assert sbx.exec(sid, "sh", "-c", "echo x >> /usr/lib/python3/dist-packages/numpy/__init__.py").rc != 0
        sbx.exec(sid, "sh", "-c", "echo mine > /tmp/x && cat /tmp/x").ok()
        store_rootfs = json.loads(sbx.run("image", "inspect", NAME, env=img_env).ok().stdout)["rootfs"]
        assert not os.path.exists(os.path.join(store_rootfs, "tmp/x"))
    finally:
        sbx.run("rm", sid, env=img_env).ok()


def test_same_recipe_is_a_cache_hit_with_the_same_id(sbx, numpy_image, img_env):
    image_id, first_err = numpy_image
    assert "built sbxit-numpy" in first_err or "python3-numpy" in first_err, first_err
    # The same packages written differently are the same recipe.
    r = sbx.run("image", "build", "sbxit-alias", "--packages", f"{RECIPE_PACKAGES},{RECIPE_PACKAGES}",
                env=img_env, timeout=120).ok()
    assert r.out.strip() == image_id
    assert "up to date" in r.err, r
    rec = json.loads(sbx.run("image", "inspect", image_id, env=img_env).ok().stdout)
    assert rec["names"] == ["sbxit-alias", NAME]


def test_ls_json_and_inspect(sbx, numpy_image, img_env, store):
    image_id, _ = numpy_image
    images = json.loads(sbx.run("image", "ls", "--json", env=img_env).ok().stdout)
    mine = [i for i in images if i["id"] == image_id]
    assert len(mine) == 1, images
    img = mine[0]
    assert NAME in img["names"]
    assert img["size"] > 50 * 1024 * 1024
    # The versions the build got are recorded (what makes a rebuild comparable).
    assert img["packages"]["python3-numpy"] and img["packages"]["python-is-python3"]
    assert img["source"]["type"] == "recipe"
    assert "python3-numpy" in img["source"]["recipe"]["packages"]
    assert img["rootfs"] == f"{store}/{image_id[7:]}/rootfs"
    # Read-only, root-owned, stored once.
    st = os.stat(img["rootfs"])
    assert st.st_uid == 0 and (st.st_mode & 0o777) == 0o755
    # inspect by name, id and id prefix: the same record.
    by_name = json.loads(sbx.run("image", "inspect", NAME, env=img_env).ok().stdout)
    by_prefix = json.loads(sbx.run("image", "inspect", image_id[7:19], env=img_env).ok().stdout)
    assert by_name["id"] == by_prefix["id"] == image_id
    table = sbx.run("image", "ls", env=img_env).ok().out
    assert NAME in table and image_id[:19] in table


def test_a_missing_image_is_a_clear_error(sbx, img_env):
    r = sbx.run("create", "--driver", "subprocess", "--image", "no-such-image", env=img_env)
    assert r.rc != 0
    assert "no image 'no-such-image'" in r.err and "sbx image build no-such-image" in r.err, r
    r = sbx.run("image", "inspect", "no-such-image", env=img_env)
    assert r.rc != 0 and "no image" in r.err


@pytest.mark.only_drivers("subprocess", "runsc")
def test_image_host_is_the_host_view(sbx, make_sandbox, driver):
    if not os.path.exists(HOST_ONLY):
        pytest.skip(f"{HOST_ONLY} is not on this host")
    sid = make_sandbox("--image", "host", driver=driver)
    sbx.exec(sid, "test", "-x", HOST_ONLY).ok()


@pytest.mark.only_drivers("subprocess", "runsc", "microvm")
def test_python_works_in_the_default_image(sbx, make_sandbox, driver):
    r = sbx.run("image", "inspect", "default")
    if r.rc != 0:
        skip_or_fail("the default image is not built (run sbx image build default, as scripts/setup.sh does)")
    rootfs = json.loads(r.stdout)["rootfs"]
    sid = make_sandbox(driver=driver)  # no --image: the default
    assert sbx.exec(sid, "python", "-c", "print(6 * 7)").ok().out == "42\n"
    assert sbx.exec(sid, "test", "-e", HOST_ONLY).rc != 0, "the sandbox sees the host, not the default image"
    rec = sbx.record(sid)
    assert rec["spec"]["image"] == rootfs
    doctor = json.loads(sbx.run("doctor", "--json").stdout)
    line = next(c for c in doctor["host"] if c["name"].startswith("default image"))
    assert line["ok"] and json.loads(r.stdout)["id"][:19] in line["detail"]


def test_rm_is_refused_while_a_sandbox_of_any_state_root_uses_it(sbx, numpy_image, img_env):
    image_id, _ = numpy_image
    # Short: the agent's socket path must fit a sockaddr_un.
    root = tempfile.mkdtemp(prefix="sbxit-o-", dir="/tmp")
    other_root = {**img_env, "SBX_STATE_DIR": root}
    sid = sbx.run("create", "--driver", "subprocess", "--image", NAME, env=other_root).ok().out.strip()
    try:
        r = sbx.run("image", "rm", image_id, env=img_env)
        assert r.rc != 0
        assert "is used by 1 sandbox" in r.err and sid in r.err, r
        # Dropping one of its two names deletes nothing, so that is allowed.
        assert sbx.run("image", "rm", "sbxit-alias", env=img_env).ok().out == "removed name sbxit-alias\n"
        r = sbx.run("image", "rm", NAME, env=img_env)
        assert r.rc != 0 and "is used by" in r.err
        users = json.loads(sbx.run("image", "inspect", NAME, env=img_env).ok().stdout)["users"]
        assert [u["sandbox"] for u in users] == [sid]
    finally:
        sbx.run("rm", sid, env=other_root).ok()
        shutil.rmtree(root, ignore_errors=True)
    assert json.loads(sbx.run("image", "inspect", NAME, env=img_env).ok().stdout)["users"] == []


def test_gc_takes_unnamed_unused_images_and_leftovers(sbx, numpy_image, img_env, store):
    image_id, _ = numpy_image
    # An unnamed image (as a retagged name leaves behind), an abandoned build,
    # and a users record whose sandbox is gone: the store's own format.
    ghost = f"{store}/{'e' * 64}"
    os.makedirs(f"{ghost}/rootfs/etc")
    with open(f"{ghost}/image.json", "w") as f:
        json.dump({"id": "sha256:" + "e" * 64, "names": [], "created_ms": 1, "source": {}, "packages": {}, "size": 0}, f)
    os.makedirs(f"{store}/tmp/{'f' * 64}.build/rootfs", exist_ok=True)
    kept = f"{store}/{image_id[7:]}"
    os.makedirs(f"{kept}/users", exist_ok=True)
    with open(f"{kept}/users/sbx_aaaaaaaaaaaa", "w") as f:
        f.write("/nonexistent/sandboxes/sbx_aaaaaaaaaaaa\n")
    dry = json.loads(sbx.run("image", "gc", "--dry-run", "--json", env=img_env).ok().stdout)
    kinds = sorted(a["kind"] for a in dry["actions"] if not a["kind"] == "apt_cache")
    assert kinds == ["image", "image_tmp", "image_user"], dry
    assert os.path.exists(ghost)
    r = json.loads(sbx.run("image", "gc", "--json", env=img_env).ok().stdout)
    assert all(a["done"] for a in r["actions"] if a["kind"] != "apt_cache"), r
    assert not os.path.exists(ghost)
    assert not os.path.exists(f"{store}/tmp/{'f' * 64}.build")
    assert not os.path.exists(f"{kept}/users/sbx_aaaaaaaaaaaa")
    # The named image stays.
    assert sbx.run("image", "inspect", NAME, env=img_env).ok()


def test_build_errors_are_clear_and_leave_nothing(sbx, numpy_image, img_env, store):
    before = sorted(os.listdir(store))
    r = sbx.run("image", "build", "sbxit-typo", "--packages", "python3-nump", env=img_env, timeout=600)
    assert r.rc != 0
    assert "package 'python3-nump' is not in the Debian archive" in r.err, r
    assert sorted(os.listdir(store)) == before
    assert not [n for n in os.listdir(f"{store}/tmp") if n.endswith(".build")]
    r = sbx.run("image", "build", "sbxit-bad", "--packages", "numpy;rm", env=img_env)
    assert r.rc != 0 and "is not a Debian package name" in r.err
    r = sbx.run("image", "build", "host", env=img_env)
    assert r.rc != 0 and "--image host means the host view" in r.err
    if shutil.which("setpriv"):
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *sbx.argv(
            "image", "build", "sbxit-user", "--packages", "curl")], capture_output=True, text=True,
            env=sbx.env({**img_env, "HOME": "/nonexistent", "SBX_CONFIG": "/dev/null"}), timeout=60)
        assert r.returncode != 0 and "needs root" in r.stderr, r.stderr


def test_the_api_names_images_of_the_store(managers, numpy_image, store):
    # The manager's store is named in its config (images.dir); the API names images, never paths.
    m = managers.new("images", f"images:\n  dir: {store}\nserver:\n  reap_interval: 1h\n")
    sid = m.create({"image": NAME, "network": "none"})["id"]
    try:
        r = m.exec(sid, ["python", "-c", "import numpy; print(numpy.__name__)"])
        assert r["stdout"] == "numpy\n", r
    finally:
        m.delete(sid)
    err = assert_error(m.request("POST", "/v1/sandboxes", {"image": "no-such-image", "network": "none"}), 400,
                       "invalid_argument")
    assert NAME in err.get("hint", ""), err
    assert_error(m.request("POST", "/v1/sandboxes", {"image": f"{store}/{numpy_image[0][7:]}/rootfs"}), 400)
    sid = m.create({"image": "host", "network": "none"})["id"]
    m.delete(sid)


def test_removing_the_last_name_removes_the_image(sbx, numpy_image, img_env, store):
    image_id, _ = numpy_image
    r = sbx.run("image", "rm", NAME, env=img_env).ok()
    assert r.out == f"removed name {NAME}\nremoved image {image_id}\n"
    assert not os.path.exists(f"{store}/{image_id[7:]}")
    assert json.loads(sbx.run("image", "ls", "--json", env=img_env).ok().stdout) == []
