"""`python -m iris worker ...` reads its options without the CLI (iris/worker/command.py):
what it reads must be what `iris worker` reads, and what it does not read goes to the CLI."""

import subprocess
import sys
from pathlib import Path

import pytest

from iris.cli.main import _hoist_global_options
from iris.cli.parser import build_parser
from iris.worker import command

RUNS = [
    [],
    ["--controller", "tcp://10.0.0.2:5555"],
    ["--controller=tcp://h:1", "--attr", "cpu=4", "--attr=memory=8", "--exit-with-parent"],
    ["--address", "tcp://h:1", "--region", "us-central1", "--work-dir", "/var/lib/iris",
     "--worker-id", "host-7", "--bind", "tcp://0.0.0.0:5556", "--keys", "./keys",
     "--token-file", "/etc/iris/cluster.token", "--preemption-notice", "slurm", "--warm"],
    ["--region", "a", "--region", "b", "--preemption-notice=off"],
    ["--controller", "tcp://h:1", "--env-cache", "/var/cache/iris-envs"],
    ["--env-cache=envs", "--work-dir=w"],
]
NOT_MINE = [
    ["list"], ["drain", "w-1"], ["--help"], ["-h"], ["--controller"], ["--contr", "x"],
    ["--controller", "--warm"], ["--preemption-notice", "gcp"], ["--warm=yes"], ["--", "x"],
    ["--json"],
]


@pytest.mark.parametrize("argv", RUNS)
def test_reads_the_options_as_the_cli_does(argv):
    args = build_parser().parse_args(_hoist_global_options(["worker", *argv]))
    assert command.parse(argv) == {key: getattr(args, key) for key in command.defaults()}


@pytest.mark.parametrize("argv", NOT_MINE)
def test_leaves_to_the_cli_what_it_does_not_read(argv):
    assert command.parse(argv) is None


def test_python_m_iris_worker_without_a_controller_says_so(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "iris", "worker", "--work-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "iris worker: --controller ADDR is required" in proc.stderr
    assert "iris.cli" not in proc.stderr


def test_python_m_iris_worker_verbs_still_reach_the_cli():
    proc = subprocess.run([sys.executable, "-m", "iris", "worker", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "iris worker list --json" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "iris", "worker", "--preemption-notice",
                          "gcp", "--controller", "tcp://h:1"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "invalid choice: 'gcp'" in bad.stderr


def test_python_m_iris_worker_refuses_an_env_cache_it_cannot_make(tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    proc = subprocess.run([sys.executable, "-m", "iris", "worker", "--controller",
                           "tcp://127.0.0.1:9", "--work-dir", str(tmp_path / "w"),
                           "--env-cache", str(blocker / "envs")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"iris: --env-cache {blocker / 'envs'}: cannot keep task environments there" \
        in proc.stderr
    assert not (tmp_path / "w" / "worker_id").exists()  # refused before anything else


@pytest.mark.parametrize(("argv", "said"), [
    (["--controller", "garbage"], "--controller 'garbage': expected tcp://HOST:PORT"),
    (["--controller", "tcp://127.0.0.1:1", "--env-cache", ""], "argument --env-cache: empty"),
], ids=["bad-address", "empty-env-cache"])
def test_both_entry_points_refuse_a_bad_worker_command_line_at_once(tmp_path: Path, argv, said):
    """`python -m iris worker` (worker/command.py, without the CLI) and the `iris` script
    refuse alike; a malformed controller address was retried until the worker was killed."""
    script = Path(sys.executable).parent / "iris"
    full = ["worker", *argv, "--work-dir", str(tmp_path / "w")]
    for cmd in ([sys.executable, "-m", "iris"], [str(script)]):
        proc = subprocess.run([*cmd, *full], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and said in proc.stderr, (cmd, proc.stderr)
        assert "Traceback" not in proc.stderr
