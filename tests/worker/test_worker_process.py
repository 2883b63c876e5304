"""AttemptProcess on real processes: output, exit codes, stop semantics, no orphans."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from iris.worker.outcome import OutcomeKind
from iris.worker.process import AttemptStartError
from iris.worker.records import AttemptRecord, is_alive

PYTHON = sys.executable
ROOT = str(Path(__file__).resolve().parents[2])
WAIT_S = 60.0  # generous: six agents share two cores

PREEMPTIBLE_TASK = textwrap.dedent("""
    import subprocess, sys, time
    from iris.worker.task_runtime import on_preempt
    on_preempt(lambda: print("checkpoint saved", flush=True))
    # a grandchild that ignores SIGTERM: only the group SIGKILL can end it
    subprocess.Popen([sys.executable, "-c",
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('grandchild', os.getpid(), flush=True); time.sleep(600)"])
    print("ready", flush=True)
    time.sleep(600)
""")


def test_attempt_output_lines_reach_callback_with_stream_names(attempts, lines):
    proc = attempts([PYTHON, "-c", "import sys; print('out1'); print('out2');"
                     "print('oops', file=sys.stderr)"], lines)
    outcome = proc.wait(WAIT_S)
    assert outcome is not None and outcome.kind is OutcomeKind.SUCCEEDED
    assert lines.text("stdout") == ["out1", "out2"]
    assert lines.text("stderr") == ["oops"]


def test_attempt_runs_in_own_session_and_cwd(attempts, lines, tmp_path):
    proc = attempts([PYTHON, "-c", "import os; print(os.getsid(0), os.getpgid(0), os.getcwd())"],
                    lines)
    assert proc.wait(WAIT_S).ok
    sid, pgid, cwd = lines.text()[0].split()
    assert int(sid) == int(pgid) == proc.pid
    assert cwd == str(proc.spec.cwd)


def test_attempt_nonzero_exit_is_failed_with_code(attempts):
    outcome = attempts([PYTHON, "-c", "raise SystemExit(3)"]).wait(WAIT_S)
    assert outcome.kind is OutcomeKind.FAILED and outcome.exit_code == 3


def test_attempt_killed_by_sigkill_maps_to_137(attempts):
    outcome = attempts(["/bin/sh", "-c", "kill -9 $$"]).wait(WAIT_S)
    assert outcome.kind is OutcomeKind.KILLED_BY_SIGNAL
    assert outcome.exit_code == 137 and outcome.signal == 9
    assert "out-of-memory" in outcome.detail


def test_attempt_stop_runs_hook_then_kills_group_no_orphans(attempts, lines):
    proc = attempts([PYTHON, "-c", PREEMPTIBLE_TASK], lines)
    lines.wait_for(lambda t: t == "ready")
    grandchild = int(lines.wait_for(lambda t: t.startswith("grandchild")).split()[1])
    outcome = proc.stop(grace_s=WAIT_S)
    assert "checkpoint saved" in lines.text()
    assert outcome.kind is OutcomeKind.STOPPED and outcome.exit_code == 143
    assert not is_alive(grandchild)
    assert not is_alive(proc.pid)


def test_attempt_ignoring_sigterm_is_killed_after_grace(attempts, lines):
    proc = attempts([PYTHON, "-c", "import signal, time; "
                     "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True);"
                     "time.sleep(600)"], lines)
    lines.wait_for(lambda t: t == "ready")
    outcome = proc.stop(grace_s=0.2)
    assert outcome.kind is OutcomeKind.STOPPED and outcome.signal == 9


def test_attempt_leader_exit_kills_leftover_background_process(attempts, lines):
    proc = attempts(["/bin/sh", "-c", "sleep 600 & echo bg $!"], lines)
    assert proc.wait(WAIT_S).ok
    background = int(lines.wait_for(lambda t: t.startswith("bg")).split()[1])
    assert not is_alive(background)


def test_attempt_finished_leaves_no_record_or_fifos(attempts):
    proc = attempts([PYTHON, "-c", "pass"])
    assert proc.wait(WAIT_S).ok
    assert AttemptRecord.read(proc.spec.attempt_dir) is None
    assert list(proc.spec.attempt_dir.iterdir()) == []


def test_attempt_missing_program_raises_start_error(attempts):
    with pytest.raises(AttemptStartError, match="no-such-program"):
        attempts(["/nonexistent/no-such-program"])


def test_attempt_stop_negative_grace_is_refused(attempts):
    proc = attempts([PYTHON, "-c", "pass"])
    with pytest.raises(ValueError, match="grace_s"):
        proc.stop(grace_s=-1)
    assert proc.wait(WAIT_S).ok


def test_attempt_cgroup_kills_process_that_left_the_session(attempts, lines, require_cgroups):
    escape = ("import os, subprocess, sys;"
              "p = subprocess.Popen(['setsid', 'sleep', '600']);"
              "print('escaped', p.pid, flush=True)")
    proc = attempts([PYTHON, "-c", escape], lines, cgroups=require_cgroups)
    assert proc.wait(WAIT_S).ok
    escaped = int(lines.wait_for(lambda t: t.startswith("escaped")).split()[1])
    assert not is_alive(escaped)


def test_attempt_over_memory_limit_is_oom_killed(attempts, lines, require_cgroups):
    hog = "x = bytearray(256 << 20); x[::4096] = b'1' * len(x[::4096]); print('survived')"
    proc = attempts([PYTHON, "-c", hog], lines, memory_limit_bytes=64 << 20,
                    cgroups=require_cgroups)
    assert proc.memory_limit_enforced
    outcome = proc.wait(WAIT_S)
    assert outcome.kind is OutcomeKind.OOM_KILLED, outcome
    assert "survived" not in lines.text()
    assert not require_cgroups.parent.joinpath(proc.record.cgroup).exists()


def test_attempt_under_memory_limit_succeeds(attempts, require_cgroups):
    proc = attempts([PYTHON, "-c", "x = bytearray(8 << 20)"], memory_limit_bytes=256 << 20,
                    cgroups=require_cgroups)
    assert proc.wait(WAIT_S).ok


def test_attempt_output_partial_and_huge_lines_delivered_whole(attempts, lines):
    script = ("import sys; sys.stdout.write('x' * (3 << 20) + '\\n');"
              "sys.stdout.write('tail without newline')")
    assert attempts([PYTHON, "-c", script], lines).wait(WAIT_S).ok
    chunks = [line for s, line in lines.items if s == "stdout"]
    assert b"".join(chunks) == b"x" * (3 << 20) + b"\ntail without newline"
    assert chunks[-1] == b"tail without newline"
    assert max(len(c) for c in chunks) <= (1 << 20) + 1


# Each line waits until the worker has read the pipe it went to (FIONREAD == 0) before the
# next is written, so the order they were written in is a fact the reader can see, on any
# load; the old reader (a thread per pipe) could still hand them on swapped.
INTERLEAVED_TASK = textwrap.dedent("""
    import fcntl, struct, sys, termios
    def unread(fd):
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\\0" * 4))[0]
    for i in range(20):
        for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
            print(f"{'out' if fd == 1 else 'err'} {i}", file=stream, flush=True)
            while unread(fd):
                pass
""")


def test_attempt_stdout_and_stderr_reach_callback_in_the_order_written(attempts, lines):
    proc = attempts([PYTHON, "-c", INTERLEAVED_TASK], lines)
    assert proc.wait(WAIT_S).ok
    got = [(stream, line.decode().rstrip("\n")) for stream, line in lines.items]
    want = [(s, f"{'out' if s == 'stdout' else 'err'} {i}")
            for i in range(20) for s in ("stdout", "stderr")]
    assert got == want


def test_python_command_that_tags_its_output_keeps_back_to_back_lines_in_order(attempts,
                                                                              lines):
    script = ("import sys\nfrom iris.worker.task_runtime import tag_output\n"
              "assert tag_output()\n"
              "for i in range(500):\n    print('out', i)\n    print('err', i, file=sys.stderr)\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ROOT}
    assert attempts([PYTHON, "-c", script], lines, env=env).wait(WAIT_S).ok, lines.items[-3:]
    got = [(stream, line.decode().rstrip("\n")) for stream, line in lines.items]
    assert got == [(s, f"{'out' if s == 'stdout' else 'err'} {i}")
                   for i in range(500) for s in ("stdout", "stderr")]
