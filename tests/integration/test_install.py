"""An installed sbx (`cmake --install` into a prefix) runs sandboxes on every
driver with only what the install put there: the agent, the deno agent and the
micro-VM guest are found relative to the installed binary.

The build tree stays where it is, so each driver's doctor entry is checked to
name the prefix's files, not the build tree's."""
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import SBX_BIN_SOURCE, skip_or_fail

BUILD_DIR = Path(SBX_BIN_SOURCE).resolve().parent
# What each driver runs, and which file of the prefix its doctor entry must name.
RUNS = {
    "subprocess": (["/bin/echo", "installed"], "libexec/sbx/sbx-agent"),
    "runsc": (["/bin/echo", "installed"], "libexec/sbx/sbx-agent"),
    "microvm": (["/bin/echo", "installed"], "lib/sbx/guest"),
    "deno": (["python3", "-c", "print('installed')"], "libexec/sbx/sbx-agent-deno"),
}


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not (BUILD_DIR / "cmake_install.cmake").exists():
        skip_or_fail(f"{BUILD_DIR} is not a CMake build tree (SBX_BIN={SBX_BIN_SOURCE})")
    root = tmp_path_factory.mktemp("prefix")
    r = subprocess.run(["cmake", "--install", str(BUILD_DIR), "--prefix", str(root)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return root


def installed_env(prefix: Path, state: Path) -> dict[str, str]:
    # Nothing that points sbx at the build tree or at another state root.
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "SBX_STATE_DIR": str(state)}


def test_install_puts_every_runtime_file_in_the_prefix(prefix):
    for rel in ("bin/sbx", "libexec/sbx/sbx-agent", "libexec/sbx/sbx-agent-deno/agent.ts",
                "share/man/man1/sbx.1", "share/bash-completion/completions/sbx"):
        assert (prefix / rel).exists(), f"cmake --install left out {rel}"
    if (BUILD_DIR / "guest" / "vmlinuz").exists():
        for rel in ("lib/sbx/guest/vmlinuz", "lib/sbx/guest/initrd.cpio.gz"):
            assert (prefix / rel).exists(), f"cmake --install left out {rel}"


@pytest.mark.only_drivers(*RUNS)
def test_installed_sbx_runs_a_sandbox(prefix, sbx, driver):
    argv, own_file = RUNS[driver]
    # A short state root: the agents' unix sockets live under it (108-byte limit).
    state = Path(tempfile.mkdtemp(prefix="sbx-inst-", dir="/tmp"))
    env = installed_env(prefix, state / "state")
    sbx_bin = str(prefix / "bin" / "sbx")
    doc = subprocess.run([sbx_bin, "doctor", "--driver", driver, "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    rep = json.loads(doc.stdout)
    entry = next(d for d in rep["drivers"] if d["name"] == driver)
    details = " ".join(str(c.get("detail", "")) for c in entry["checks"])
    assert os.path.realpath(prefix / own_file) in {os.path.realpath(w) for w in details.split() if w.startswith("/")}, \
        f"doctor's {driver} entry does not name the prefix's {own_file}: {details}"
    try:
        r = subprocess.run([sbx_bin, "exec", "--rm", "--driver", driver, "--", *argv], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and r.stdout == "installed\n", (r.returncode, r.stdout, r.stderr)
    finally:
        subprocess.run([sbx_bin, "rm", "--all"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(state, ignore_errors=True)
