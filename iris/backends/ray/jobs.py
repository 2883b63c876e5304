"""A job on the Ray backend: its tasks' ObjectRefs (or its actors), shaped like JobHandle.

Not the submission (backend.py). States follow Iris: running until every task ends;
succeeded, failed (a task raised: `result()` re-raises its own exception), killed
(`kill()` cancels the tasks, force: their worker processes are killed; for an actor job
the actors are killed), failed on `timeout`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from iris.backends.ray import runtime
from iris.base.errors import JobFailedError


class RayJob:
    def __init__(self, job_id: str, refs: list, timeout: float | None, group: Any,
                 actors: list | None = None):
        import ray

        self._ray = ray
        self.job_id = job_id
        self._refs = refs
        self._actors = actors or []
        self._group = group
        self._ended_as: str | None = None
        self._error = ""
        self._lock = threading.Lock()
        self._timer = None
        if timeout is not None:
            self._timer = threading.Timer(timeout, self._end, ("failed",
                                                               f"timed out after {timeout} s"))
            self._timer.daemon = True
            self._timer.start()

    def __repr__(self) -> str:
        return f"RayJob({self.job_id!r})"

    def _task_state(self, ref: Any) -> str:
        ready, _ = self._ray.wait([ref], timeout=0)
        if not ready:
            return "running"
        try:
            self._ray.get(ref, timeout=0)
            return "succeeded"
        except Exception:
            return "failed"

    def status(self) -> dict:
        tasks = [{"index": i, "state": self._task_state(r), "attempts": 1, "failures": 0,
                  "preemptions": 0, "error": ""} for i, r in enumerate(self._refs)]
        states = {t["state"] for t in tasks}
        if self._ended_as:
            state = self._ended_as
        elif not self._refs:
            state = "running"  # an actor job runs until killed
        elif "failed" in states:
            state = "failed"
        elif states == {"succeeded"}:
            state = "succeeded"
        else:
            state = "running"
        return {"job_id": self.job_id, "name": self.job_id, "state": state,
                "num_tasks": max(len(self._refs), len(self._actors)), "error": self._error,
                "tasks": tasks}

    def tasks(self) -> list[dict]:
        return self.status()["tasks"]

    def done(self) -> bool:
        return self.status()["state"] != "running"

    def wait(self, timeout: float | None = None) -> dict:
        if self._refs and not self._ended_as:
            self._ray.wait(self._refs, num_returns=len(self._refs), timeout=timeout)
        return self.status()

    def _end(self, state: str, error: str) -> None:
        with self._lock:
            if self._ended_as or (self._refs and self.status()["state"] != "running"):
                return
            self._ended_as, self._error = state, error
        for ref in self._refs:
            self._ray.cancel(ref, force=True)
        for handle in self._actors:
            self._ray.kill(handle)
        if self._group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._group)

    def kill(self) -> dict:
        self._end("killed", "killed by the user")
        return self.status()

    def result(self, timeout: float | None = None) -> Any:
        ready, _ = self._ray.wait(self._refs, num_returns=len(self._refs), timeout=timeout)
        if len(ready) < len(self._refs) and not self._ended_as:
            raise TimeoutError(f"job {self.job_id} did not end within {timeout} s (it is "
                               "still running)")
        if self._ended_as:
            raise JobFailedError(f"job {self.job_id} ended {self._ended_as}: {self._error}",
                                 self.status())
        values = []
        for i, ref in enumerate(self._refs):
            try:
                values.append(self._ray.get(ref))
            except Exception as exc:
                raise runtime.translate(exc, f"task {i} of {self.job_id}") from None
        if self._timer is not None:
            self._timer.cancel()
        return values[0] if len(values) == 1 else values

    def logs(self, follow: bool = False, **_: Any) -> Iterator[str]:
        """Ray sends its tasks' output to the driver's stdout; nothing is kept here."""
        return iter(())
