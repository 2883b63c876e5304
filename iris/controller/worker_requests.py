"""Workers joining, reporting and leaving, on the controller's turn: checked whole, admitted at a
bounded rate (worker_desk.py), fenced by attempt id, lost commands repaired. Requests that
ControllerService (service.py) runs in its turn: each takes the service and goes through its
components' interfaces and its one path of change (`run_many`).
"""

from __future__ import annotations

import logging
from typing import Any

from iris.base.errors import IrisError
from iris.base.ids import new_id
from iris.base.resources import Resources
from iris.controller.jobs import events as ev
from iris.controller.jobs import views
from iris.controller.repair import repairs
from iris.controller.turns import now_mono, now_wall
from iris.wire import control, schema

_log = logging.getLogger(__name__)


def register_worker(svc: Any, worker_id: Any, address: Any, attributes: Any, running: Any,
                    updates: Any = ()) -> list[dict]:
    """(Re)register. `updates` are what the worker has not had acknowledged: they are
    applied before the reconcile, so an attempt that finished while the controller was
    away counts as finished, not as lost. Checked whole before anything changes."""
    msg = control.decode(control.WorkerRegistration, {
        "worker_id": worker_id, "address": address, "attributes": attributes,
        "running": running, "updates": updates})
    svc.desk.check_region(msg.attributes.get("region", "local"))
    svc.desk.admit(msg.worker_id, msg.address, now_mono(svc))
    svc.desk.register(msg, now_mono(svc))
    svc.pushes.touch((msg.worker_id,))
    svc.replan()
    _log.info("worker %s registered at %s running %d attempts: %s", msg.worker_id,
              msg.address, len(msg.running), ", ".join(msg.running))
    svc.usage.observe(msg.worker_id, msg.updates, (), svc.state)  # usage.py
    events = [_update_event(svc, msg.worker_id, u) for u in msg.updates]
    still = set(msg.running)  # what it no longer runs is not stopping any more
    for attempt_id in [a for a in svc.stopping.get(msg.worker_id, {}) if a not in still]:
        svc.stopped(attempt_id)
    events.append(ev.Reconcile(new_id("ev-"), msg.worker_id, msg.running))
    svc.run_many([e for e in events if e is not None], schedule=True)
    return views.desired_attempts(svc.state, msg.worker_id)


def reports(svc: Any, msgs: list[control.WorkerReport]) -> list:
    """Many workers' reports (already checked: check_report) in one turn: one
    transaction and at most one scheduling pass for all their updates. A report that
    changes nothing costs a last-heard update. One answer per report, in order; if
    applying the updates fails, each report that carried some gets that error (its
    worker sends them again) and the rest are answered as usual."""
    now = now_mono(svc)
    interval = svc.desk.report_interval(now)
    heard, note_stats = svc.desk.workers.heard, svc.desk.note_stats
    # The answer to a report that carried no updates (most of them): the same every time
    # within a turn, so encoded once and copied.
    plain = _answer(control.ReportAnswer(interval_s=interval))
    answers: list = []
    events, changed, check = [], [], []
    for msg in msgs:
        if not heard(msg.worker_id, now, interval):
            answers.append(_answer(control.ReportAnswer(reregister=True,
                                                               interval_s=interval)))
            continue
        if msg.stats is not None:
            note_stats(msg.worker_id, msg.stats)
        if msg.updates or msg.usage:
            svc.usage.observe(msg.worker_id, msg.updates, msg.usage, svc.state)  # usage.py
        if msg.running is not None:
            check.append(msg)
        if not msg.updates:
            answers.append({**plain, "acked": []})  # nothing shared between answers
            continue
        changed.append(len(answers))
        events += [_update_event(svc, msg.worker_id, u) for u in msg.updates]
        answers.append(_answer(control.ReportAnswer(
            acked=tuple(u.attempt_id for u in msg.updates), interval_s=interval)))
    if events:
        try:
            svc.run_many([e for e in events if e is not None], schedule=True)
        except IrisError as exc:
            for i in changed:
                answers[i] = exc
    _save_usage(svc)  # readings no transaction above took (usage.py)
    for msg in check:  # after the updates: an attempt that just exited needs no repair
        if msg.running or svc.state.by_worker.get(msg.worker_id) \
                or svc.stopping.get(msg.worker_id):  # else nothing to compare
            _repair(svc, msg.worker_id, list(msg.running))
    return answers


def _save_usage(svc: Any) -> None:
    try:
        svc.store.put_usage(svc.usage.take_rows())
    except IrisError as exc:  # usage is observation: a failing disk halts elsewhere
        _log.error("attempt usage not stored: %s", exc)


def worker_gone(svc: Any, worker_id: Any, address: Any, why: str) -> None:
    """A worker stopped (goodbye) or died and its watchdog stopped its attempts: lost now,
    its work requeued at once. Only the registration at `address` is meant: a worker
    that already came back elsewhere under the same id is left alone."""
    worker_id = schema.text(worker_id, "worker_id", max_len=256)
    address = schema.text(address, "address", max_len=512)
    info = svc.desk.workers.workers.get(worker_id)
    if info is None or info.address != address:
        return
    svc.desk.forget(worker_id)
    svc.forget_stops(worker_id)
    svc.pushes.undrain((worker_id,))
    svc.replan()
    svc.run_many([ev.WorkerLost(new_id("ev-"), worker_id, why)], schedule=True)


def _repair(svc: Any, worker_id: str, running: list[str]) -> None:
    """Send again what a lost call never delivered (see repair.py)."""
    worker = svc.desk.workers.workers[worker_id]
    fix = repairs(svc.state, worker_id, running, svc.stopping.get(worker_id, {}),
                  svc.stop_book.sent, now_wall(svc), now_mono(svc))
    for attempt_id in fix.stopped:
        svc.stopped(attempt_id)
    for attempt_id in fix.start_again:
        _log.warning("worker %s never started %s: sending the start again", worker_id,
                     attempt_id)
        attempt = svc.state.attempts[attempt_id]
        spec = svc.state.jobs[attempt.job_id].spec
        svc.queue_start(ev.StartAttempt(worker_id, attempt_id, attempt.job_id,
                                        attempt.task_index, spec.num_tasks, spec.gang_size))
    orphans = set(fix.orphans)  # then stopped like any other, until it is gone
    for attempt_id in fix.stop_again + fix.orphans:
        _log.warning("worker %s still runs %s: sending the stop again", worker_id,
                     attempt_id)
        svc.queue_stop(worker, attempt_id, svc.config.stop_grace_s,
                       "stopped again: the first stop was lost, or nobody wants it",
                       hold=Resources() if attempt_id in orphans else None)


def _update_event(svc: Any, worker_id: str, update: control.AttemptUpdate) -> ev.Event | None:
    """The kernel event for a worker's update; None for an attempt that is not this
    worker's (fenced: a stale or foreign attempt can never report for a task)."""
    attempt = svc.state.attempts.get(update.attempt_id)
    if attempt is not None and attempt.worker_id != worker_id:
        _log.warning("worker %s reported %s on attempt %s of worker %s: ignored",
                     worker_id, update.status, update.attempt_id, attempt.worker_id)
        return None
    if update.status in ("exited", "preempted"):
        svc.stopped(update.attempt_id)
    eid = new_id("ev-")
    if update.status == "building":
        return ev.AttemptBuilding(eid, update.attempt_id)
    if update.status == "running":
        return ev.AttemptRunning(eid, update.attempt_id)
    if update.status == "preempted":  # fenced: spends the preemption budget
        return ev.Preempted(eid, update.attempt_id, update.error or "preempted")
    code = update.exit_code if update.exit_code is not None else 1
    return ev.AttemptExited(eid, update.attempt_id, code, update.error, update.result)


def _answer(answer: control.ReportAnswer) -> dict:
    """A report's answer as sent: `reports_to` only where a controller with report fronts
    sets it, since a worker from before that field refuses an answer naming it (unknown
    field) and must keep working against this controller (same protocol version)."""
    plain = control.encode(answer)
    if plain.get("reports_to") is None:
        del plain["reports_to"]
    return plain

