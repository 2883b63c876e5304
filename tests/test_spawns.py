"""The leak check skips its /proc scan after a test that started no process (tests/spawns.py):
every way this process can start one must be counted, or a leak would go unseen."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import spawns


def _counted(start) -> int:
    before = spawns.started()
    start()
    return spawns.started() - before


# multiprocessing's spawn and forkserver starts, counted in a child Python: the forkserver
# and the resource tracker they leave running exit with it.
_MULTIPROCESSING = """
import multiprocessing, sys
import spawns
spawns.install()
counts = []
for context in ("spawn", "forkserver"):
    before = spawns.started()
    child = multiprocessing.get_context(context).Process(target=print)
    child.start()
    child.join(60)
    counts.append(spawns.started() - before)
print(*counts)
"""


async def _asyncio_child() -> None:
    proc = await asyncio.create_subprocess_exec("true")
    await proc.wait()


def test_every_way_to_start_a_process_is_counted():
    assert _counted(lambda: subprocess.run(["true"], check=True)) >= 1
    assert _counted(lambda: os.system("true")) >= 1
    assert _counted(lambda: os.waitpid(os.posix_spawn("/bin/true", ["true"], os.environ), 0)) >= 1
    assert _counted(lambda: asyncio.run(_asyncio_child())) >= 1
    assert _counted(lambda: sys.stdout.flush()) == 0


def test_multiprocessing_starts_are_counted():
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", _MULTIPROCESSING], cwd=here, check=True,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": here}).stdout
    spawn, forkserver = (int(n) for n in out.split())
    assert spawn >= 1 and forkserver >= 1, out
