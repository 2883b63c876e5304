"""The stop book: attempts told to stop whose exit is not reported yet, in memory (stops.py) and
in the store, so that after a restart a requeued task still waits for its old attempt to exit.
A component of ControllerService (service.py) that owns these fields; `now` is passed in.
"""

from __future__ import annotations

import logging
from typing import Any

from iris.base.errors import StorageError
from iris.base.resources import Resources
from iris.controller import stops
from iris.controller.jobs.store import JobStore

_log = logging.getLogger(__name__)


class StopBook:
    def __init__(self, store: JobStore, now: float):
        self._store = store
        self._state = stops.StopState()
        for attempt_id, worker_id, hold, grace_s in store.load_stops():
            # Sent again after its grace + 5 s unless the worker reports it gone first.
            stops.handle(self._state, stops.StopSent(worker_id, attempt_id, grace_s,
                                                     Resources.from_dict(hold)), now)

    @property
    def by_worker(self) -> dict[str, dict[str, Resources]]:
        """worker -> attempt -> resources of attempts told to stop and not gone yet."""
        return self._state.by_worker

    @property
    def sent(self) -> dict:
        """attempt -> (when the stop was sent, its grace): what repair.py resends."""
        return self._state.sent

    def stop_sent(self, worker_id: str, attempt_id: str, grace_s: float,
                  hold: Resources | None, now: float, stored: bool = False) -> None:
        """A stop went out; with `hold`, the attempt keeps those resources until it exits.
        `stored`: committed already, with the turn that decided it (service.py `_stops`)."""
        stops.handle(self._state, stops.StopSent(worker_id, attempt_id, grace_s, hold), now)
        if hold is not None and not stored:
            self._save(held=[stop_row(worker_id, attempt_id, grace_s, hold)])

    def stopped(self, attempt_id: str, now: float) -> list[str]:
        """The attempt exited: the workers whose resources it freed."""
        freed = stops.handle(self._state, stops.Stopped(attempt_id), now)
        if freed:
            self._save(gone=[attempt_id])
        return [f.worker_id for f in freed]

    def worker_gone(self, worker_id: str, now: float) -> bool:
        """A worker is gone, and with it whatever it was stopping: True if it was stopping
        anything (tasks waiting on those attempts may go now)."""
        had = worker_id in self._state.by_worker
        if had:
            self._save(workers_gone=[worker_id])
        stops.handle(self._state, stops.WorkerGone(worker_id), now)
        return had

    def _save(self, **change: Any) -> None:
        try:
            self._store.save_stops(**change)
        except StorageError as exc:  # the next commit halts a failing disk; this is a hint
            _log.error("%s", exc)


def stop_row(worker_id: str, attempt_id: str, grace_s: float,
             hold: Resources) -> tuple[str, str, dict, float]:
    """A stop in flight as the store keeps it (JobStore.save_stops / apply's `stops`)."""
    return (attempt_id, worker_id, hold.to_dict(), grace_s)
