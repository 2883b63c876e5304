"""Whether this pytest process started any process, for the leak check (conftest.py,
`no_leaked_processes`).

The check finds a test's processes by a tag in their environment, which means reading
/proc/<pid>/environ of every process on the machine (300-600 during a run: ~5 ms a scan),
after each of ~1,900 tests and every 0.1 s while a test's processes exit. A process can only
carry the tag if this process started it (or one of its descendants did) after the tag was
set, so a test during which this process started nothing needs no scan.

Every way Python starts a process passes one of two doors, both counted here:
- an audit event: subprocess.Popen (and so asyncio's subprocesses), os.fork, os.forkpty,
  os.posix_spawn(p), os.spawn* and os.system;
- `_posixsubprocess.fork_exec`, which multiprocessing's spawn and forkserver starts call
  through the module's attribute, unaudited (subprocess holds its own reference, audited).
"""

from __future__ import annotations

import _posixsubprocess
import sys

_AUDITED = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"})
_count = 0


def started() -> int:
    """How many processes this process has started so far (it only grows)."""
    return _count


def _audit(event: str, _args) -> None:
    global _count
    if event in _AUDITED:
        _count += 1


def _counting(fork_exec):
    def fork_exec_counted(*args, **kwargs):
        global _count
        _count += 1
        return fork_exec(*args, **kwargs)

    return fork_exec_counted


def install() -> None:
    """Start counting (once per process: an audit hook cannot be removed)."""
    if getattr(sys, "_iris_spawns_counted", False):
        return
    sys._iris_spawns_counted = True
    sys.addaudithook(_audit)
    _posixsubprocess.fork_exec = _counting(_posixsubprocess.fork_exec)
