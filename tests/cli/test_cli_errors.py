"""Bad command lines, from outside: each error names the problem, exits 2, prints no
traceback, and under --json is also one JSON document on stdout ({"error": ...})."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

cli_main = importlib.import_module("iris.cli.main")  # the module; iris.cli.main is the function

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEAD = "tcp://127.0.0.1:1"  # a well-formed address nothing answers: no test here reaches it


def _run(argv, capsys):
    code = cli_main.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("argv", "said"), [
    (["job", "logs", "x", "--task", "abc", "--json"], "argument --task: invalid int value"),
    (["bogus", "--json"], "invalid choice: 'bogus'"),
    (["job", "status", "--json"], "the following arguments are required: JOB"),
    (["job", "list", "--json", "--bogus"], "unrecognized arguments: --bogus"),
    (["--json"], "the following arguments are required: VERB"),
    (["worker", "--env-cache", "", "--json"], "argument --env-cache: empty"),
    (["controller", "serve", "--state-dir", " ", "--json"], "argument --state-dir: empty"),
    (["cluster", "start", "--local", "--dashboard-port", "99999", "--json"],
     "argument --dashboard-port: 99999: a port is 0"),
], ids=["wrong-type", "unknown-verb", "missing-arg", "unknown-option", "no-verb",
        "empty-env-cache", "empty-state-dir", "port-out-of-range"])
def test_cli_a_refused_command_line_is_json_under_json(argv, said, capsys):
    code, out, err = _run(argv, capsys)
    assert code == 2
    assert said in json.loads(out)["error"] and json.loads(out)["usage"] is True
    assert "usage: iris" in err and said in err  # the text reads as argparse's own


def test_cli_a_refused_command_line_without_json_prints_no_json(capsys):
    code, out, err = _run(["job", "logs", "x", "--task", "abc"], capsys)
    assert (code, out) == (2, "") and "invalid int value: 'abc'" in err


@pytest.mark.parametrize(("argv", "said", "field"), [
    (["--address", "garbage", "job", "list", "--json"], "cluster address 'garbage'", None),
    (["--address", DEAD, "job", "run", "--env", "FOO", "--json", "--", "true"],
     "--env FOO: expected NAME=VALUE", "--env"),
    (["--address", DEAD, "job", "stop", "--json"], "give a job id or --prefix", "job_id"),
    (["--address", DEAD, "job", "run", "--json", "--"], "give the command after --", "command"),
    (["--address", DEAD, "job", "stop", "x", "--prefix", "/a/", "--json"], "not both",
     "job_id"),
    (["--address", DEAD, "user", "budget", "set", "alice", "--clear", "--hours", "3", "--json"],
     "--clear removes the budget: it takes no --hours", "--hours"),
    (["demo", "--rollouts", "0", "--json"], "--rollouts 0: must be at least 1", "--rollouts"),
    (["worker", "--controller", "10.0.0.2:5555", "--json"], "--controller '10.0.0.2:5555': "
     "expected tcp://HOST:PORT", None),
    (["--address", DEAD, "worker", "drain", "w-1", "--timeout", "nan", "--json"],
     "--timeout nan: expected a number of seconds > 0", "--timeout"),
], ids=["bad-address", "env-without-equals", "stop-nothing", "run-nothing", "stop-both",
        "clear-with-hours", "demo-rollouts", "worker-bad-controller", "drain-timeout-nan"])
def test_cli_bad_input_is_refused_at_once_and_said_as_json(argv, said, field, capsys):
    code, out, err = _run(argv, capsys)
    assert code == 2 and said in err and "Traceback" not in err
    doc = json.loads(out)
    assert said in doc["error"] and doc.get("field") == field


def test_cli_keys_generate_where_it_cannot_write_says_so(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out, err = _run(["keys", "generate", str(blocker / "keys")], capsys)
    assert code == 2 and f"cannot write keys to {blocker / 'keys'}" in err


def test_cli_a_verb_whose_module_cannot_import_says_which(monkeypatch, capsys):
    monkeypatch.setitem(cli_main._HANDLERS, ("job", "list"), "no_such_module:job_list")
    code, out, err = _run(["--address", DEAD, "job", "list", "--json"], capsys)
    assert code == 2 and "cannot load this command's module iris.cli.no_such_module" in err
    assert "reinstall Iris" in json.loads(out)["error"]


def test_cli_script_and_module_refuse_bad_input_alike_without_traceback():
    script = Path(sys.executable).parent / "iris"
    if not script.exists():
        pytest.skip(f"no `iris` script beside {sys.executable} (not an installed venv)")
    env = {**os.environ, "PYTHONPATH": ROOT}
    argv = ["job", "logs", "x", "--task", "abc", "--json"]
    runs = [subprocess.run(cmd + argv, capture_output=True, text=True, timeout=120, env=env)
            for cmd in ([str(script)], [sys.executable, "-m", "iris"])]
    assert [r.returncode for r in runs] == [2, 2]
    assert runs[0].stdout == runs[1].stdout and runs[0].stderr == runs[1].stderr
    assert "Traceback" not in runs[0].stderr and json.loads(runs[0].stdout)["error"]


def test_cli_cluster_config_after_the_action_reads_as_before_it(tmp_path, capsys):
    missing = str(tmp_path / "none.yaml")
    after = _run(["cluster", "status", "--config", missing, "--json"], capsys)
    before = _run(["cluster", "--config", missing, "status", "--json"], capsys)
    assert after == before and after[0] == 2
    assert f"{missing}: cannot read config file" in json.loads(after[1])["error"]


def test_cli_keys_generate_says_where_as_json(tmp_path, capsys):
    code, out, _ = _run(["keys", "generate", str(tmp_path / "keys"), "--json"], capsys)
    assert code == 0 and json.loads(out) == {"dir": str(tmp_path / "keys"),
                                             "authorized": str(tmp_path / "keys/authorized")}


def test_cli_cluster_start_local_json_is_one_line_a_script_can_use(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.Popen([sys.executable, "-m", "iris", "cluster", "start", "--local",
                             "--workers", "0", "--dashboard-port", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    try:
        started = json.loads(proc.stdout.readline())
        assert started["workers"] == 0 and started["dashboard"].startswith("http://")
        listed = subprocess.run([sys.executable, "-m", "iris", "job", "list", "--json",
                                 "--address", started["address"]], capture_output=True,
                                text=True, env=env, timeout=120)
        assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
