"""What a state root and its sandboxes can leave on the host, counted the same
way by every leak test (test_cycles.py, test_faults.py)."""
from __future__ import annotations

from pathlib import Path

from conftest import cgroup_roots, cmdlines, jail_traces, loop_devices_under, mountinfo_lines_mentioning
from manager_fixtures import cgroup_scope


def state_root_traces(state_dir: str) -> list[str]:
    """Mounts, loop devices, cgroups and sandbox directories of this state root."""
    left = [f"mount {m}" for m in mountinfo_lines_mentioning(state_dir)[:5]]
    left += [f"loop device {d}" for d in loop_devices_under(state_dir + "/")]
    scope = cgroup_scope(state_dir)
    for root in cgroup_roots():
        d = Path(root, "sbx", scope)
        if d.is_dir():
            left += [f"cgroup {p}" for p in d.iterdir() if p.is_dir()]
    sb = Path(state_dir, "sandboxes")
    if sb.is_dir():
        left += [f"sandbox directory {p}" for p in sb.iterdir()]
    return left


def sandbox_traces(state_dir: str, ids, jailed: bool) -> list[str]:
    """All of the above, plus the jails (link, route, nft, netns, lease, address claim) and host processes of ids."""
    left = state_root_traces(state_dir)
    if jailed:
        left += jail_traces(ids)
    live = set(ids)
    left += [f"process {pid}: {cmd}" for pid, cmd in cmdlines().items() if any(w in live for w in cmd.split())]
    return left
