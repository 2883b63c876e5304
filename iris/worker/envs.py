"""Per-job Python environments: uv-built venvs keyed by content hash, cached across jobs.

Not the process runner: this only builds and finds environments.

A job's environment holds exactly its `pip=[...]` requirements plus the task runtime's own
(cloudpickle, msgpack, pyzmq, uvloop, cryptography, pinned to the worker's versions so
pickles written by the worker load in the task). No `--system-site-packages`: a job never sees the worker's or
another job's packages. The `iris` package itself reaches the venv through a `.pth` file
naming a directory that holds only an `iris` symlink, so the task can `import iris` and
nothing else of the worker's tree leaks in.

The key is sha256 over everything a venv's contents depend on: the interpreter (its real
path and version), the `iris` package its `.pth` names (the checkout's absolute path) and the
sorted, normalized requirements. Two jobs asking for the same set share one venv, and so may
every worker of a machine (`iris worker --env-cache DIR`, or $IRIS_ENV_CACHE): workers of two
checkouts sharing a cache get venvs of their own, each naming its own `iris`. Builds of one
key are serialized by a file lock (threads and processes alike); a venv is published by
writing its `.iris-ready` marker last (a venv cannot be renamed after building: uv writes
absolute paths into its scripts), so a half-built venv is never used and a failed one is
deleted.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from iris.base.errors import InvalidRequestError, IrisError
from iris.base.requirements import normalize_requirement

_READY = ".iris-ready"
# iris/worker/envs.py -> iris/ (found by path: importing `iris` would pull in the client)
_IRIS_PACKAGE = Path(__file__).resolve().parents[1]
# cryptography: a task that receives weights or big call frames from another host opens
# them (iris/actors/bulk_seal.py), so every task runtime has it (loaded only when used).
_RUNTIME_PACKAGES = ("cloudpickle", "msgpack", "pyzmq", "uvloop", "cryptography")
Progress = Callable[[str], None]


class EnvironmentBuildError(IrisError):
    """uv could not build the environment; the message carries uv's own output."""


def _pinned_runtime() -> tuple[str, ...]:
    import importlib.metadata  # here: ~15 ms a worker start, and only env builds need it

    pins = []
    for name in _RUNTIME_PACKAGES:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pins.append(name)
    return tuple(pins)


def _default_uv() -> str:
    found = shutil.which("uv") or str(Path(sys.prefix) / "bin" / "uv")
    return found


@dataclass(frozen=True)
class EnvConfig:
    root: Path  # where venvs live, one directory per key
    uv: str = field(default_factory=_default_uv)  # the uv binary; the one beside the worker
    python: str = sys.executable  # base interpreter; uv must never download one here
    uv_cache_dir: Path | None = None  # None: uv's default cache, shared by every build
    runtime_requirements: tuple[str, ...] = field(default_factory=_pinned_runtime)
    offline: bool = False  # True: install only from uv's cache (no registry access)
    iris_package: Path = _IRIS_PACKAGE  # the `iris` a task imports: this checkout's


def read_requirements_file(path: Path) -> list[str]:
    """Requirements from a bundle's requirements.txt: comments and blank lines skipped."""
    reqs = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            reqs.append(line)
    return reqs


@dataclass(frozen=True)
class Environment:
    key: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def activate(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` with this venv first on PATH and the worker's Python settings removed."""
        out = {k: v for k, v in env.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
        out["VIRTUAL_ENV"] = str(self.path)
        out["PATH"] = f"{self.path / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        return out


def _usable(env: Environment) -> bool:
    """Built whole (its marker is written last) and its interpreter still there: a venv's
    python is a symlink to the base interpreter, which an upgrade may have removed; such
    a venv is built again rather than failing every task that uses it."""
    return (env.path / _READY).exists() and env.python.exists()


class EnvironmentCache:
    """Builds and finds per-job venvs under `config.root`."""

    def __init__(self, config: EnvConfig):
        # Absolute: a venv's scripts, its `.pth` and the tasks (started in their own working
        # directories) name the venv by this path; a relative one names nothing there.
        self.config = replace(config, root=Path(os.path.abspath(config.root)))
        config = self.config
        self._python_version: str | None = None
        config.root.mkdir(parents=True, exist_ok=True)

    def requirements_for(self, pip: Iterable[str]) -> list[str]:
        """The full sorted requirement list an env for `pip` holds (runtime included)."""
        if isinstance(pip, str):
            raise InvalidRequestError("pip: expected a list of requirements, got a string",
                                      "pip")
        reqs = {normalize_requirement(r) for r in pip}
        reqs.update(normalize_requirement(r) for r in self.config.runtime_requirements)
        return sorted(reqs)

    def key_for(self, pip: Iterable[str]) -> str:
        blob = json.dumps({"python": self._version(),
                           "interpreter": os.path.realpath(self.config.python),
                           "iris": str(self.config.iris_package),
                           "requirements": self.requirements_for(pip)})
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def lookup(self, pip: Iterable[str]) -> Environment | None:
        env = Environment(self.key_for(pip), self.config.root / self.key_for(pip))
        return env if _usable(env) else None

    def get(self, pip: Iterable[str], progress: Progress | None = None) -> Environment:
        """The environment for `pip`, built first if needed (the BUILDING state)."""
        reqs = self.requirements_for(pip)
        key = self.key_for(pip)
        env = Environment(key, self.config.root / key)
        if _usable(env):
            return env
        lock_dir = self.config.root / ".locks"
        lock_dir.mkdir(exist_ok=True)
        with open(lock_dir / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a second builder waits, then finds it ready
            if not _usable(env):
                self._build(env, reqs, progress)
        return env

    def _version(self) -> str:
        if self._python_version is None and \
                os.path.realpath(self.config.python) == os.path.realpath(sys.executable):
            self._python_version = sys.version  # the same interpreter: no process to ask
        if self._python_version is None:
            out = subprocess.run([self.config.python, "-c", "import sys; print(sys.version)"],
                                 capture_output=True, text=True, check=True)
            self._python_version = out.stdout.strip()
        return self._python_version

    def _build(self, env: Environment, reqs: list[str], progress: Progress | None) -> None:
        shutil.rmtree(env.path, ignore_errors=True)  # a build that died half way
        try:
            self._uv(["venv", "--python", self.config.python, str(env.path)], progress)
            install = ["pip", "install", "--python", str(env.python)]
            if self.config.offline:
                install.append("--offline")
            self._uv([*install, *reqs], progress)
            self._link_iris(env)
        except BaseException:
            shutil.rmtree(env.path, ignore_errors=True)
            raise
        (env.path / _READY).write_text(json.dumps(reqs))

    def _uv(self, args: list[str], progress: Progress | None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        env.update(UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1")
        if self.config.uv_cache_dir is not None:
            env["UV_CACHE_DIR"] = str(self.config.uv_cache_dir)
        proc = subprocess.Popen([self.config.uv, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                text=True)
        output = []
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                output.append(line)
                if progress is not None:
                    progress(line.rstrip("\n"))
        if proc.wait() != 0:
            raise EnvironmentBuildError(
                f"uv {args[0]} {args[1] if len(args) > 1 else ''} failed "
                f"(exit {proc.returncode}):\n{''.join(output).strip()}")

    def _link_iris(self, env: Environment) -> None:
        # One directory per checkout: a cache shared by workers of two checkouts must not
        # hand one's tasks the other's `iris` (the key names the checkout too).
        target = self.config.iris_package
        src = self.config.root / ".iris-src" / hashlib.sha256(
            str(target).encode()).hexdigest()[:16]
        link = src / "iris"
        if not link.exists():
            src.mkdir(parents=True, exist_ok=True)
            tmp = src / f".iris-{os.getpid()}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(target)
            os.replace(tmp, link)  # atomic: concurrent builders of other keys agree
        site = next((env.path / "lib").glob("python*/site-packages"))
        (site / "_iris_runtime.pth").write_text(f"{src}\n")
