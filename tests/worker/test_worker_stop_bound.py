"""A worker process's stop is bounded (iris/worker/main.py, _STOP_BOUND_S): whatever hangs
past every step's own timeout, it exits 1 with its threads' stacks in its log."""

import subprocess
import sys


def test_a_stop_that_hangs_ends_the_process_with_its_stacks_in_the_log():
    # The bound is the real mechanism with a 1 s bound; the hang is a step that never returns.
    code = ("import threading\n"
            "from iris.worker.main import StopEvent, request_stop\n"
            "stop = StopEvent(exit_after_s=1.0)\n"
            "request_stop(stop, 'SIGTERM')\n"
            "def step_that_never_returns():\n"
            "    threading.Event().wait()\n"
            "step_that_never_returns()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Timeout (0:00:01)!" in done.stderr
    assert "step_that_never_returns" in done.stderr  # the stack shows where it hung

