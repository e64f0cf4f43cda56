"""Bad input is answered alike everywhere: a CPU cap beyond the host's cores
(CLI and API, from core's spec validation), an unknown state filter, durations
kept exactly as given, and a mistyped subcommand or flag named with "did you
mean ...?" (exit 2).
"""
from __future__ import annotations

import os

import pytest

from manager_fixtures import manager, manager_root, module_managers  # noqa: F401

CORES = os.sysconf("SC_NPROCESSORS_ONLN")
TOO_MANY = CORES * 4 + 1


def cores_text() -> str:
    return f"{CORES} core" + ("" if CORES == 1 else "s")


def test_cpus_beyond_the_host_are_refused_with_the_count(sbx):
    r = sbx.run("create", "--driver", "subprocess", "--cpus", str(TOO_MANY))
    assert r.rc == 2 and r.out == "", r
    assert f"--cpus {TOO_MANY} is more than this host's {cores_text()}" in r.err, r
    r = sbx.run("exec", "--rm", "--driver", "subprocess", "--cpus", str(TOO_MANY), "--", "true")
    assert r.rc == 2 and f"this host's {cores_text()}" in r.err, r


def test_cpus_beyond_the_host_are_a_400_from_the_api(manager):
    r = manager.request("POST", "/v1/sandboxes", {"limits": {"cpus": TOO_MANY}})
    assert r.status == 400, r
    assert f"is more than this host's {cores_text()}" in r.json()["error"]["message"], r


def test_an_unknown_state_filter_is_refused_naming_the_states(sbx):
    r = sbx.run("ls", "--filter", "state=bogus")
    assert r.rc == 2 and r.out == "", r
    assert "the filter state=bogus: unknown sandbox state 'bogus'" in r.err, r
    assert "states are creating, running, paused, dead, failed, pooled" in r.err, r


@pytest.mark.parametrize("flag", ["--idle-timeout", "--ttl"])
@pytest.mark.parametrize("value", ["1.5s", "500ms"])
def test_idle_timeout_and_ttl_refuse_what_whole_seconds_cannot_hold(sbx, flag, value):
    r = sbx.run("create", "--driver", "subprocess", flag, value)
    assert r.rc == 2 and r.out == "", r
    assert f"{flag} {value} is not a whole number of seconds" in r.err, r


@pytest.mark.parametrize("argv, said, hint", [
    (["exce"], "unknown subcommand 'exce' of sbx", "did you mean exec?"),
    (["lss"], "unknown subcommand 'lss' of sbx", "did you mean ls?"),
    (["pool", "stauts"], "unknown subcommand 'stauts' of sbx pool", "did you mean status?"),
    (["frobnicate"], "unknown subcommand 'frobnicate' of sbx", "see `sbx --help`"),
    (["exec", "--timout", "1s", "sbx_aaaaaaaaaaaa", "--", "true"], "unknown flag --timout for sbx exec",
     "did you mean --timeout?"),
    (["ls", "--jsno"], "unknown flag --jsno for sbx ls", "did you mean --json?"),
    (["--state-dri", "/tmp", "ls"], "unknown flag --state-dri for sbx", "did you mean --state-dir?"),
    (["create", "--nmae", "x"], "unknown flag --nmae for sbx create", "did you mean --name?"),
])
def test_a_mistyped_subcommand_or_flag_gets_did_you_mean(sbx, argv, said, hint):
    r = sbx.run(*argv)
    assert r.rc == 2 and r.out == "", r
    assert f"sbx: error: {said}\n" in r.err and f"sbx: hint: {hint}\n" in r.err, r


def test_a_state_root_too_long_for_the_agent_socket_is_named_at_once(sbx, tmp_path):
    # The agent's unix socket lives in the sandbox's state directory; past 107
    # bytes no socket can exist there, so waiting 30 s for it to answer (as sbx
    # once did, then said only "did not answer") helps nobody.
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    r = sbx.run("--state-dir", str(deep / "state"), "exec", "--rm", "--driver", "subprocess", "--", "true", timeout=20)
    assert r.rc != 0 and "path too long for a unix socket" in r.err and "shorter --state-dir" in r.err, r
    assert "did not answer" not in r.err, r


def test_a_flag_value_spelled_like_a_subcommand_is_still_a_value(sbx, tmp_path):
    # sbx registers only the subcommand a command line names (the first word that is one);
    # here that word is --config's value (a file named like a subcommand), and the line
    # must mean what it says all the same.
    for name in ("gc", "exec"):
        (tmp_path / name).write_text(open(sbx.config_file).read() if os.path.exists(sbx.config_file) else "")
    r = sbx.run("--config", "gc", "ls", "-q", cwd=tmp_path)
    assert r.rc == 0 and "error" not in r.err, r
    r = sbx.run("--config", "exec", "exec", "--rm", "--driver", "subprocess", "--", "echo", "ok", cwd=tmp_path)
    assert r.rc == 0 and r.out == "ok\n", r
    r = sbx.run("--config", "gc", "--version", cwd=tmp_path)
    assert r.rc == 0 and r.out.startswith("sbx "), r


@pytest.mark.parametrize("argv, flag", [
    (["--memory", "1g", "{id}", "--", "echo", "ran"], "--memory"),
    (["{id}", "--cpus=0.5", "--", "echo", "ran"], "--cpus"),
    (["-l", "team=a", "{id}", "echo", "ran"], "--label"),
    (["--persistent", "{id}", "--", "echo", "ran"], "--persistent"),
    (["--image", "host", "{id}", "--", "echo", "ran"], "--image"),
])
def test_a_new_sandboxs_flag_on_a_running_one_is_refused_not_ignored(sbx, make_sandbox, argv, flag):
    # `sbx exec ID --memory 1g -- CMD` once ran CMD under the sandbox's own cap
    # and said nothing: the flag only ever shaped a one-shot's new sandbox.
    sid = make_sandbox()
    r = sbx.run("exec", *[a.replace("{id}", sid) for a in argv])
    assert r.rc == 2 and "ran" not in r.out, r
    assert f"sbx: error: {flag} describes a new sandbox: it goes with --rm\n" in r.err, r
    assert "sbx exec --rm" in r.err, r


def test_a_warm_exec_still_takes_driver_and_a_one_shot_its_limits(sbx, make_sandbox):
    # --driver is not refused for a running sandbox: it also says where an id is looked up.
    sid = make_sandbox()
    r = sbx.run("exec", "--driver", "subprocess", sid, "--", "echo", "ok")
    assert r.rc == 0 and r.out == "ok\n", r
    r = sbx.run("exec", "--rm", "--driver", "subprocess", "--memory", "64m", "--", "echo", "ok")
    assert r.rc == 0 and r.out == "ok\n", r
    h = sbx.run("exec", "--help")
    assert h.rc == 0 and "--memory SIZE" in h.out and "--allow" in h.out, h
