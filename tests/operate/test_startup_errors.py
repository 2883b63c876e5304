"""A controller that cannot start says so in one line and changes nothing, on real processes.

A second `iris controller serve` (or `controller run-local`) on a state dir a live controller
holds, or on an address another process listens on, is refused naming that process's pid;
a refused `--restore` leaves the checkpoint prefix's OWNER lease as it found it; and when a
controller restores, the restore line is the first thing it prints.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from iris.controller.checkpoint.ownership import LEASE_S
from tests.cluster.test_checkpoint_restore import Site
from tests.conftest import ROOT
from tests.logstore.conftest import _server

pytestmark = pytest.mark.timeout(300)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(state: Path, bind: str, *flags: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "iris", "controller", "serve", "--state-dir", str(state),
         "--bind", bind, "--dashboard-port", "0", *flags], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        start_new_session=True, env=env or {**os.environ, "PYTHONPATH": ROOT})


def _until_serving(proc: subprocess.Popen) -> list[str]:
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("controller serving at"):
            return lines
    raise AssertionError(f"the controller never served: {lines}")


def _refused(argv: list[str], env: dict | None = None) -> str:
    out = subprocess.run([sys.executable, "-m", "iris", *argv], capture_output=True,
                         text=True, timeout=120, stdin=subprocess.DEVNULL,
                         env=env or {**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr and "controller serving" not in out.stdout, out
    [line] = out.stderr.strip().splitlines()
    return line


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=60)
    proc.stdout.close()


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_a_second_controller_on_a_held_state_dir_or_a_taken_address_is_one_line(tmp_path):
    address = f"tcp://127.0.0.1:{_free_port()}"
    first = _serve(tmp_path / "state", address)
    try:
        _until_serving(first)
        before = _tree(tmp_path / "state")
        # The same state dir, another address: named by the pid and address holding it.
        line = _refused(["controller", "serve", "--state-dir", str(tmp_path / "state"),
                         "--bind", f"tcp://127.0.0.1:{_free_port()}"])
        assert line == (f"iris: state dir {tmp_path / 'state'} is in use by the controller "
                        f"pid {first.pid} at {address}: stop it first (or give this one its "
                        "own --state-dir)")
        # Another state dir, the same address: named by the pid listening there.
        line = _refused(["controller", "serve", "--state-dir", str(tmp_path / "other"),
                         "--bind", address])
        assert line.startswith(f"iris: address {address} is already in use by pid "
                               f"{first.pid} (")
        assert _tree(tmp_path / "state") == before
        assert not (tmp_path / "other").exists()
    finally:
        _stop(first)
    # The first one gone, its state dir serves again (a kill -9 would leave no lock either).
    again = _serve(tmp_path / "state", address)
    try:
        _until_serving(again)
    finally:
        _stop(again)


def test_controller_run_local_twice_is_one_line(tmp_path):
    address = f"tcp://127.0.0.1:{_free_port()}"
    config = tmp_path / "cluster.yaml"
    config.write_text(f"name: twice\ncontroller:\n  address: {address}\n  state_dir: "
                      f"{tmp_path / 'state'}\nstorage:\n  log_dir: {tmp_path / 'logs'}\n"
                      "regions:\n  here:\n    zones: [a]\n")
    argv = ["controller", "run-local", "--config", str(config), "--dashboard-port", "0"]
    first = subprocess.Popen([sys.executable, "-m", "iris", *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                             start_new_session=True, env={**os.environ, "PYTHONPATH": ROOT})
    try:
        _until_serving(first)
        line = _refused(argv)
        assert f"is in use by the controller pid {first.pid} at {address}" in line
    finally:
        _stop(first)


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    yield from _server(tmp_path_factory)


def _owner(site: Site, gcs) -> tuple[bytes, str]:
    """The prefix's OWNER record and its generation, read straight from the fake GCS."""
    name = urllib.parse.quote("iris/state/controller-state/OWNER", safe="")
    base = f"{gcs.url}/storage/v1/b/{site.bucket}/o/{name}"
    with urllib.request.urlopen(base, timeout=10) as meta:
        generation = json.load(meta)["generation"]
    with urllib.request.urlopen(f"{base}?alt=media", timeout=10) as data:
        return data.read(), generation


def test_a_refused_restore_leaves_the_owner_lease_and_a_restore_is_announced_first(
        tmp_path, gcs):
    site = Site(tmp_path, gcs)
    try:
        _, serving = site.serve(tmp_path / "vm1")
        assert serving.startswith("controller serving at"), serving
        taken = json.loads(site.cli("cluster", "checkpoint", "--json"))
        site.kill_controller()  # the machine is lost: its lease still looks alive
        owner = _owner(site, gcs)
        for flags, error in ((["--restore", "yesterday"], "not a checkpoint name"),
                             (["--restore", "20000101T000000.000Z"], "no checkpoint 20000101")):
            line = _refused(["controller", "serve", "--config", str(site.config),
                             "--state-dir", str(tmp_path / "vm2"), "--bind", site.address,
                             "--dashboard-port", "0", *flags], env=site.env)
            assert error in line
            assert _owner(site, gcs) == owner  # not even rewritten with the same words
        # The replacement restores; its first line says so, before the ownership notes.
        proc = _serve(tmp_path / "vm3", site.address, "--config", str(site.config),
                      env=site.env)
        site.procs.append(proc)
        lines = _until_serving(proc)
        assert lines[0].startswith(f"controller restored checkpoint {taken['name']}"), lines
        # The lost owner's lease, still fresh now, was fresh when vm3 claimed: it was noted.
        # (On a loaded host vm3 may start after it lapsed; then there is nothing to note.)
        if json.loads(owner[0])["renewed_at"] + LEASE_S > time.time():
            assert any("presumed dead" in line for line in lines[1:]), lines
    finally:
        site.close()
        for proc in site.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


def test_a_state_dir_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    line = _refused(["controller", "serve", "--state-dir", str(tmp_path / "file" / "state")])
    assert line == f"iris: state dir {tmp_path / 'file' / 'state'}: Not a directory"
    config = tmp_path / "cluster.yaml"
    config.write_text(f"name: nodir\ncontroller:\n  address: tcp://127.0.0.1:{_free_port()}\n"
                      f"  state_dir: {tmp_path / 'file' / 'c'}\nstorage:\n  log_dir: "
                      f"{tmp_path / 'logs'}\nregions:\n  here:\n    zones: [a]\n")
    line = _refused(["cluster", "--config", str(config), "start"])
    assert line.startswith(f"iris: cluster dir {tmp_path / 'file' / 'c'}: Not a directory")
