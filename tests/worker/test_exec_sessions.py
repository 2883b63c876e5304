"""Exec sessions beside a live attempt, on real processes: output in order and acknowledged
by cursor (a lost answer is asked again), the attempt's environment, back-pressure, and the
bounds: at most MAX_SESSIONS, idle or orphaned ones killed. Named ports: never one port to
two live attempts."""

from __future__ import annotations

import sys

import pytest

from iris.base.clock import FakeClock
from iris.base.errors import InvalidRequestError, NotFoundError, OverloadedError
from iris.worker import exec_sessions
from iris.worker.exec_sessions import MAX_BUFFER, ExecSessions
from iris.worker.ports import PortBook, port_env
from iris.worker.records import is_alive

PYTHON = sys.executable
WAIT_S = 60.0


@pytest.fixture
def task(attempts, lines):
    proc = attempts([PYTHON, "-c", "print('up', flush=True); import time; time.sleep(600)"],
                    lines, env={"PATH": "/usr/bin:/bin", "SECRET_OF_THE_TASK": "42"})
    lines.wait_for(lambda t: t == "up")
    return proc


def _drain(session, cursor: int = 0, streams: dict | None = None
           ) -> tuple[bytes, int | None]:
    """Everything the session outputs until it exits; `streams` (if given) gets each
    stream's own bytes: the order across stdout and stderr is as the two readers got them,
    as with ssh, not as written."""
    got = b""
    for _ in range(200):
        out = session.poll(cursor, 1.0)
        got += b"".join(d for _, d in out.chunks)
        if streams is not None:
            for name, data in out.chunks:
                streams[name] = streams.get(name, b"") + data
        cursor = out.cursor
        if out.exit_code is not None:
            return got, out.exit_code
    raise AssertionError(f"no exit; got {got!r}")


def test_a_command_runs_in_the_attempts_environment_and_its_output_comes_in_order(task):
    sessions = ExecSessions()
    try:
        sessions.start("s1", "att-1", ["sh", "-c", "echo $SECRET_OF_THE_TASK; pwd; "
                                       "echo oops >&2; exit 3"], task)
        streams: dict[str, bytes] = {}
        _, code = _drain(sessions.get("s1"), streams=streams)
        assert code == 3
        assert streams["stdout"].decode().split() == ["42", str(task.spec.cwd)]
        assert streams["stderr"] == b"oops\n"
    finally:
        sessions.close()


def test_a_poll_asked_again_with_the_same_cursor_gets_the_same_output(task):
    sessions = ExecSessions()
    try:
        sessions.start("s1", "att-1", ["sh", "-c", "printf abcdef; sleep 0.5"], task)
        session = sessions.get("s1")
        first = session.poll(0, WAIT_S)
        again = session.poll(0, WAIT_S)  # the answer to the first was lost
        assert b"".join(d for _, d in again.chunks).startswith(
            b"".join(d for _, d in first.chunks))
        later = session.poll(3, WAIT_S)  # acknowledged up to byte 3
        assert b"".join(d for _, d in later.chunks).startswith(b"def")
        with pytest.raises(InvalidRequestError, match="cursor 0 is before"):
            session.poll(0, 0)
    finally:
        sessions.close()


def test_output_nobody_reads_makes_the_command_wait(task):
    sessions = ExecSessions()
    try:
        sessions.start("s1", "att-1", [PYTHON, "-c", "import sys\nfor _ in range(12): "
                                       "sys.stdout.buffer.write(b'x' * (1 << 20))"], task)
        session = sessions.get("s1")
        session.poll(0, 2.0)  # let it write until it blocks
        held = session.poll(0, 0)
        assert held.exit_code is None and held.cursor <= MAX_BUFFER + (1 << 20)
        got, code = _drain(session)
        assert code == 0 and len(got) == 12 << 20
    finally:
        sessions.close()


def test_sessions_are_bounded_and_idle_or_orphaned_ones_are_killed(task, monkeypatch):
    monkeypatch.setattr(exec_sessions, "MAX_SESSIONS", 2)
    clock = FakeClock()
    sessions = ExecSessions(clock)
    try:
        sessions.start("a", "att-1", ["sleep", "600"], task)
        sessions.start("b", "att-2", ["sleep", "600"], task)
        with pytest.raises(OverloadedError, match="2 exec sessions"):
            sessions.start("c", "att-1", ["true"], task)
        pids = {name: sessions.get(name)._popen.pid for name in "ab"}
        assert sessions.sweep(lambda attempt: attempt == "att-1") == ["b"]  # att-2 ended
        clock.advance(exec_sessions.IDLE_S + 1)
        assert sessions.sweep(lambda attempt: True) == ["a"]  # nobody polled for a minute
        assert not any(is_alive(pid) for pid in pids.values())
        with pytest.raises(NotFoundError, match="no exec session a"):
            sessions.get("a")
    finally:
        sessions.close()


def test_a_missing_program_is_refused_naming_it(task):
    sessions = ExecSessions()
    try:
        with pytest.raises(Exception, match="command not found: no-such-program"):
            sessions.start("s", "att-1", ["no-such-program"], task)
        with pytest.raises(InvalidRequestError, match="argv"):
            sessions.start("t", "att-1", [], task)
    finally:
        sessions.close()


def test_named_ports_are_distinct_between_live_attempts_and_freed_at_the_end():
    book = PortBook()
    first = book.assign("att-1", ("http", "tb"))
    second = book.assign("att-2", ("http",))
    assert len({*first.values(), *second.values()}) == 3
    assert book.assign("att-1", ("http", "tb")) == first  # a start sent again
    book.release("att-1")
    assert port_env(second) == {"IRIS_PORT_HTTP": str(second["http"])}
