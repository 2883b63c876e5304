"""`iris.on_preempt` callbacks run on SIGTERM even when the main thread cannot run Python's
handler (iris/worker/task_runtime.py, `_watch_wakeup_fd`)."""

import os
import signal
import subprocess
import sys

from iris.worker.task_runtime import PREEMPT_EXIT_CODE
from tests.conftest import main_thread_asleep


def test_callbacks_run_when_the_sigterm_lands_on_another_thread(tmp_path, wait_until):
    """The kernel may hand the task's SIGTERM to any of its threads (it passes over a main
    thread with a signal pending); Python runs the handler only on the main thread, which
    here sleeps on a lock (as in a long C call: an XLA step). Before, the callbacks never
    ran and the task was killed at the grace's end without its checkpoint."""
    marker = tmp_path / "saved"
    code = ("import threading\n"
            "from iris.worker.task_runtime import on_preempt\n"
            f"on_preempt(lambda: open({str(marker)!r}, 'w').write('saved'))\n"
            "other = threading.Thread(target=threading.Event().wait, daemon=True)\n"
            "other.start()\n"
            "print(other.native_id, flush=True)\n"
            "threading.Event().wait()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        other = int(proc.stdout.readline())
        wait_until(lambda: main_thread_asleep(proc.pid), what="the main thread asleep")
        os.kill(other, signal.SIGTERM)  # kill(2) of a thread's id: that thread takes it
        assert proc.wait(60) == PREEMPT_EXIT_CODE
        assert marker.read_text() == "saved"
    finally:
        proc.kill()
        proc.wait()


def test_a_wakeup_fd_the_task_set_itself_is_left_alone():
    """An asyncio loop with signal handlers owns the wakeup fd: registering a callback then
    keeps it (the handler on the main thread still fires the callbacks)."""
    code = ("import os, signal\n"
            "from iris.worker.task_runtime import on_preempt\n"
            "r, w = os.pipe2(os.O_NONBLOCK)\n"
            "signal.set_wakeup_fd(w)\n"
            "on_preempt(lambda: None)\n"
            "print(signal.set_wakeup_fd(-1) == w)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "True", done.stderr
