"""Workers joining, reporting and leaving, on the controller's turn: checked whole, admitted at a
bounded rate, fenced by attempt id, lost commands repaired. Part of ControllerService
(service.py).
"""

from __future__ import annotations

import logging
import random
import re
from typing import Any

from iris.base.errors import (
    InvalidRequestError,
    IrisError,
    OverloadedError,
)
from iris.base.ids import new_id
from iris.base.resources import Resources
from iris.controller import stops
from iris.controller.jobs import events as ev
from iris.controller.jobs import views
from iris.controller.repair import repairs
from iris.controller.turns import now_mono, now_wall, turn
from iris.controller.workers import report_interval_s
from iris.wire import control, schema

_log = logging.getLogger(__name__)
# New registrations admitted per second (and the burst): a registration costs ~1 ms here, so
# this keeps a re-registration storm from 10,000 hosts under half the controller's time.
REGISTRATIONS_PER_S = 500
_REGION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_report(worker_id: Any, updates: Any, stats: Any = None,
                 running: Any = None, usage: Any = ()) -> control.WorkerReport:
    """A worker's report, checked whole (InvalidRequestError names the bad field). Runs on
    the node's loop thread for batched reports (actor.py), off the controller's turn."""
    return control.decode(control.WorkerReport, {
        "worker_id": worker_id, "updates": updates, "stats": stats, "running": running,
        "usage": usage})


class WorkerRequests:
    @turn
    def register_worker(self, worker_id: Any, address: Any, attributes: Any, running: Any,
                        updates: Any = ()) -> list[dict]:
        """(Re)register. `updates` are what the worker has not had acknowledged: they are
        applied before the reconcile, so an attempt that finished while the controller was
        away counts as finished, not as lost. Checked whole before anything changes."""
        msg = control.decode(control.WorkerRegistration, {
            "worker_id": worker_id, "address": address, "attributes": attributes,
            "running": running, "updates": updates})
        self._check_region(msg.attributes.get("region", "local"), msg.worker_id)
        self._admit(msg.worker_id, msg.address)
        self.workers.register(msg.worker_id, msg.address, msg.attributes,
                              now_mono(self))
        self._touch_hosts((msg.worker_id,))
        self._regions_seen.add(msg.attributes.get("region", "local"))
        self._registrations += 1
        self._unclaimed.discard(msg.worker_id)
        self._placement_due = True
        _log.info("worker %s registered at %s running %d attempts: %s", msg.worker_id,
                  msg.address, len(msg.running), ", ".join(msg.running))
        self.usage.observe(msg.worker_id, msg.updates, (), self.state)  # usage.py
        events = [self._update_event(msg.worker_id, u) for u in msg.updates]
        still = set(msg.running)  # what it no longer runs is not stopping any more
        for attempt_id in [a for a in self.stopping.get(msg.worker_id, {}) if a not in still]:
            self._stopped(attempt_id)
        events.append(ev.Reconcile(new_id("ev-"), msg.worker_id, msg.running))
        self._run_many([e for e in events if e is not None], schedule=True)
        return views.desired_attempts(self.state, msg.worker_id)

    def report(self, worker_id: Any, updates: Any, stats: Any = None,
               running: Any = None, usage: Any = ()) -> dict:
        """Attempt updates from a worker (also its heartbeat). Unknown worker: re-register.
        `stats`: the worker's own figures for /metrics, e.g. {"log_shipping":
        {"max_flush_lag_s": x, "dropped_lines": n}}; kept as last reported. `running`: the
        attempts it runs now, to repair lost start and stop commands (repair.py)."""
        [answer] = self.reports([check_report(worker_id, updates, stats, running, usage)])
        if isinstance(answer, Exception):
            raise answer
        return answer

    @turn
    def reports(self, msgs: list[control.WorkerReport]) -> list:
        """Many workers' reports (already checked: check_report) in one turn: one
        transaction and at most one scheduling pass for all their updates. A report that
        changes nothing costs a last-heard update. One answer per report, in order; if
        applying the updates fails, each report that carried some gets that error (its
        worker sends them again) and the rest are answered as usual."""
        now = now_mono(self)
        interval = self.report_interval()
        answers: list = []
        events, changed, check = [], [], []
        for msg in msgs:
            if not self.workers.heard(msg.worker_id, now, interval):
                answers.append({"acked": [], "reregister": True, "interval_s": interval})
                continue
            if msg.stats is not None:
                self.worker_stats[msg.worker_id] = msg.stats
            self.usage.observe(msg.worker_id, msg.updates, msg.usage, self.state)  # usage.py
            if msg.updates:
                changed.append(len(answers))
                events += [self._update_event(msg.worker_id, u) for u in msg.updates]
            if msg.running is not None:
                check.append(msg)
            answers.append({"acked": [u.attempt_id for u in msg.updates],
                            "reregister": False, "interval_s": interval})
        if events:
            try:
                self._run_many([e for e in events if e is not None], schedule=True)
            except IrisError as exc:
                for i in changed:
                    answers[i] = exc
        self._save_usage()  # readings no transaction above took (usage.py)
        for msg in check:  # after the updates: an attempt that just exited needs no repair
            if msg.running or self.state.by_worker.get(msg.worker_id) \
                    or self.stopping.get(msg.worker_id):  # else nothing to compare
                self._repair(msg.worker_id, list(msg.running))
        return answers

    def _save_usage(self) -> None:
        try:
            self.store.put_usage(self.usage.take_rows())
        except IrisError as exc:  # usage is observation: a failing disk halts elsewhere
            _log.error("attempt usage not stored: %s", exc)

    def report_interval(self) -> float:
        """Seconds between reports this controller asks of its workers now."""
        return report_interval_s(len(self.workers.workers), self.workers.behind(now_mono(self)))

    @turn
    def worker_gone(self, worker_id: Any, address: Any, why: str) -> None:
        """A worker stopped (goodbye) or died and its watchdog stopped its attempts: lost now,
        its work requeued at once. Only the registration at `address` is meant: a worker
        that already came back elsewhere under the same id is left alone."""
        worker_id = schema.text(worker_id, "worker_id", max_len=256)
        address = schema.text(address, "address", max_len=512)
        info = self.workers.workers.get(worker_id)
        if info is None or info.address != address:
            return
        del self.workers.workers[worker_id]
        self._touch_hosts((worker_id,))
        self._forget_stops(worker_id)
        self.draining.pop(worker_id, None)
        self._placement_due = True
        self._run_many([ev.WorkerLost(new_id("ev-"), worker_id, why)], schedule=True)

    def _admit(self, worker_id: str, address: str) -> None:
        """Registrations are admitted at a bounded rate (a token bucket of
        REGISTRATIONS_PER_S); past it the worker is told when to come back. A mass
        re-registration (a network heal, a controller restart) then spreads out instead of
        starving the loop that answers heartbeats: the overload must not feed itself."""
        known = self.workers.workers.get(worker_id)
        if known is not None and known.address == address:
            return  # a refresh costs little
        now = now_mono(self)
        self._admission = min(REGISTRATIONS_PER_S, self._admission
                              + (now - self._admitted_at) * REGISTRATIONS_PER_S)
        self._admitted_at = now
        if self._admission < 1.0:
            # Each refused worker gets its own later slot, 1/REGISTRATIONS_PER_S after the
            # last one handed out: 10,000 refused at once come back over 20 s, at the rate
            # they can be admitted. (A retry within ~1 s for all of them, as before, brought
            # 10,000 refusals a second, each a turn of the controller: it fell behind.)
            self._admit_slot = max(now, self._admit_slot) + 1.0 / REGISTRATIONS_PER_S
            wait = (self._admit_slot - now) * (1.0 + 0.1 * random.random())
            raise OverloadedError(f"too many registrations at once: retry in {wait:.1f} s",
                                  retry_after_s=wait)
        self._admission -= 1.0

    def _check_region(self, region: str, worker_id: str) -> None:
        """A region name must be well formed, and a new one must fit under max_regions."""
        if not _REGION_NAME.fullmatch(region):
            raise InvalidRequestError(f"attributes.region: {region[:80]!r} is not a region name "
                                      "(letters, digits, '.', '_' and '-', at most 64)",
                                      "attributes.region")
        known = self._regions_seen
        if region not in known and len(known) >= self.config.max_regions:
            raise InvalidRequestError(
                f"attributes.region: {region!r} would be region {len(known) + 1}; this "
                f"controller serves at most {self.config.max_regions} (max_regions)",
                "attributes.region")

    def _repair(self, worker_id: str, running: list[str]) -> None:
        """Send again what a lost call never delivered (see repair.py)."""
        worker = self.workers.workers[worker_id]
        fix = repairs(self.state, worker_id, running, self.stopping.get(worker_id, {}),
                      self.stops.sent, now_wall(self), now_mono(self))
        for attempt_id in fix.stopped:
            self._stopped(attempt_id)
        for attempt_id in fix.start_again:
            _log.warning("worker %s never started %s: sending the start again", worker_id,
                         attempt_id)
            attempt = self.state.attempts[attempt_id]
            spec = self.state.jobs[attempt.job_id].spec
            self._queue_start(ev.StartAttempt(worker_id, attempt_id, attempt.job_id,
                                              attempt.task_index, spec.num_tasks,
                                              spec.gang_size))
        orphans = set(fix.orphans)  # then stopped like any other, until it is gone
        for attempt_id in fix.stop_again + fix.orphans:
            _log.warning("worker %s still runs %s: sending the stop again", worker_id,
                         attempt_id)
            self._queue_stop(worker, attempt_id, self.config.stop_grace_s,
                             "stopped again: the first stop was lost, or nobody wants it",
                             hold=Resources() if attempt_id in orphans else None)


    def _update_event(self, worker_id: str, update: control.AttemptUpdate) -> ev.Event | None:
        """The kernel event for a worker's update; None for an attempt that is not this
        worker's (fenced: a stale or foreign attempt can never report for a task)."""
        attempt = self.state.attempts.get(update.attempt_id)
        if attempt is not None and attempt.worker_id != worker_id:
            _log.warning("worker %s reported %s on attempt %s of worker %s: ignored",
                         worker_id, update.status, update.attempt_id, attempt.worker_id)
            return None
        if update.status in ("exited", "preempted"):
            self._stopped(update.attempt_id)
        eid = new_id("ev-")
        if update.status == "building":
            return ev.AttemptBuilding(eid, update.attempt_id)
        if update.status == "running":
            return ev.AttemptRunning(eid, update.attempt_id)
        if update.status == "preempted":  # fenced: spends the preemption budget
            return ev.Preempted(eid, update.attempt_id, update.error or "preempted")
        code = update.exit_code if update.exit_code is not None else 1
        return ev.AttemptExited(eid, update.attempt_id, code, update.error, update.result)

    def _forget_stops(self, worker_id: str) -> None:
        """A worker is gone, and with it whatever it was stopping."""
        self._touch_hosts((worker_id,))
        if worker_id in self.stops.by_worker:
            self._save_stops(workers_gone=[worker_id])
            self._placement_due = True  # tasks waiting on those attempts may go now
        stops.handle(self.stops, stops.WorkerGone(worker_id), now_mono(self))

    def _stopped(self, attempt_id: str) -> None:
        freed = stops.handle(self.stops, stops.Stopped(attempt_id), now_mono(self))
        self._touch_hosts(f.worker_id for f in freed)
        if freed:
            self._save_stops(gone=[attempt_id])
            self._placement_due = True  # its resources are free again
