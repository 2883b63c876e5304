"""Stopping a thread of the in-process backend: TaskKilled raised inside it, asynchronously.

Not a kill: CPython checks for the exception between bytecodes, so a Python loop stops at
once, while a blocking call (a long sleep, a socket read) returns first.
"""

from __future__ import annotations

import ctypes
import threading


class TaskKilled(BaseException):
    """Raised inside an in-process task or actor thread whose job was killed or ended."""


def interrupt(thread: threading.Thread) -> None:
    if thread.is_alive() and thread is not threading.current_thread() and thread.ident:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                   ctypes.py_object(TaskKilled))
