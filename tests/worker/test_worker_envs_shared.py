"""One task environment cache shared by the workers of a machine (`iris worker --env-cache`):
two processes wanting the same venv at once get one build, and checkouts sharing a cache
never run each other's Iris."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from iris.worker.envs import EnvConfig, EnvironmentCache

WAIT_S = 300.0  # builds on two loaded cores, a cold uv cache downloading

# A stand-in for uv that records each call, then runs the real one; a `venv` call first says
# it started and waits for the test's go, so a second builder surely arrives mid-build.
UV_WRAPPER = """#!/bin/sh
echo "$1" >> {log}
if [ "$1" = venv ]; then
    touch {started}
    n=0
    while [ ! -e {go} ] && [ $n -lt 6000 ]; do sleep 0.05; n=$((n + 1)); done
fi
exec {uv} "$@"
"""

BUILDER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from iris.worker.envs import EnvConfig, EnvironmentCache
    cache = EnvironmentCache(EnvConfig(root=Path(sys.argv[1]), uv=sys.argv[2]))
    env = cache.get([])
    print(json.dumps({"key": env.key, "path": str(env.path)}))
""")


def _uv_wrapper(tmp_path: Path) -> Path:
    uv = shutil.which("uv") or str(Path(sys.prefix) / "bin" / "uv")
    wrapper = tmp_path / "uv"
    wrapper.write_text(UV_WRAPPER.format(log=tmp_path / "uv.log", started=tmp_path / "started",
                                         go=tmp_path / "go", uv=uv))
    wrapper.chmod(0o755)
    return wrapper


def _waiting_for_lock(pid: int, lock_file: Path) -> bool:
    """Whether process `pid` is blocked in flock() on `lock_file` (/proc/locks lists a
    blocked request as "N: -> FLOCK ADVISORY WRITE PID MAJ:MIN:INODE ...")."""
    inode = os.stat(lock_file).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1] == "->" and fields[5] == str(pid) and \
                fields[6].rsplit(":", 1)[1] == str(inode):
            return True
    return False


def _builder(root: Path, uv: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BUILDER, str(root), str(uv)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_envs_two_processes_wanting_one_env_at_once_get_one_build(tmp_path, wait_until):
    root, uv = tmp_path / "shared", _uv_wrapper(tmp_path)
    first = _builder(root, uv)
    second = None
    try:
        wait_until(lambda: (tmp_path / "started").exists() or first.poll() is not None,
                   WAIT_S, "the first process to start building")
        key = EnvironmentCache(EnvConfig(root=root)).key_for([])
        second = _builder(root, uv)
        wait_until(lambda: _waiting_for_lock(second.pid, root / ".locks" / f"{key}.lock"),
                   WAIT_S, "the second process to wait for the first one's build")
        (tmp_path / "go").touch()
        outs = [p.communicate(timeout=WAIT_S) for p in (first, second)]
    finally:
        (tmp_path / "go").touch()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert [p.returncode for p in (first, second)] == [0, 0], outs
    built = [json.loads(out) for out, _ in outs]
    assert built[0] == built[1] == {"key": key, "path": str(root / key)}
    assert (tmp_path / "uv.log").read_text().split() == ["venv", "pip"]  # one build in all
    ran = subprocess.run([str(root / key / "bin" / "python"), "-c", "import iris, cloudpickle"],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr


def _checkout(tmp_path: Path, name: str) -> Path:
    """A stand-in for another clone of Iris: its own `iris` package, telling which it is."""
    package = tmp_path / name / "iris"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"WHERE = {name!r}\n")
    return package


def test_envs_checkouts_sharing_a_cache_each_run_their_own_iris(tmp_path):
    root = tmp_path / "shared"
    a, b = (EnvironmentCache(EnvConfig(root=root, iris_package=_checkout(tmp_path, name)))
            for name in ("a", "b"))
    assert a.key_for([]) != b.key_for([])
    assert a.key_for([]) == EnvironmentCache(EnvConfig(
        root=root, iris_package=tmp_path / "a" / "iris")).key_for([])
    for cache, name in ((a, "a"), (b, "b")):
        env = cache.get([])
        ran = subprocess.run([str(env.python), "-c", "import iris; print(iris.WHERE)"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path,
                             env=env.activate({"PATH": "/usr/bin:/bin"}))
        assert (ran.returncode, ran.stdout.strip()) == (0, name), ran.stderr
    assert b.lookup([]) is not None and a.lookup([]) is not None  # neither replaced the other


_IMPORT_IRIS = "import iris, sys; print(iris.__file__)"


def _imports_iris_from_elsewhere(env, cwd: Path) -> str:
    """What the venv's python prints for `import iris`, run as a task is: its own cwd."""
    done = subprocess.run([str(env.python), "-c", _IMPORT_IRIS], capture_output=True,
                          text=True, cwd=cwd, env=env.activate({"PATH": "/usr/bin:/bin"}),
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_envs_a_relative_cache_dir_gives_venvs_a_task_elsewhere_can_run(tmp_path,
                                                                        monkeypatch):
    """`iris worker --env-cache envs` (or $IRIS_ENV_CACHE=envs): the venv, its scripts and
    its `.pth` name the cache by where it is, not relative to the worker's cwd."""
    monkeypatch.chdir(tmp_path)
    env = EnvironmentCache(EnvConfig(root=Path("envs"))).get([])
    assert env.path.is_absolute() and env.path.parent == tmp_path / "envs"
    (tmp_path / "task").mkdir()
    iris_file = _imports_iris_from_elsewhere(env, tmp_path / "task")
    assert Path(iris_file).resolve().parent == Path(__file__).resolve().parents[2] / "iris"


def test_envs_a_venv_whose_interpreter_is_gone_is_built_again(tmp_path):
    """A cached venv's python links to the base interpreter; once that is gone (removed,
    upgraded), the venv is built again, not handed to every task that then fails."""
    cache = EnvironmentCache(EnvConfig(root=tmp_path / "envs"))
    env = cache.get([])
    env.python.unlink()
    env.python.symlink_to(tmp_path / "no-such-python")
    assert cache.lookup([]) is None
    again = cache.get([])
    assert again == env and again.python.exists()
    _imports_iris_from_elsewhere(again, tmp_path)
