"""Requests about jobs and live state, on the controller's turn: submit, kill, status, listings,
the snapshot. Part of ControllerService (service.py), which holds the state they read.
"""

from __future__ import annotations

import logging

from iris.base.errors import (
    InvalidRequestError,
    NotFoundError,
)
from iris.base.ids import new_id
from iris.controller import live_figures, scheduler_view
from iris.controller.jobs import events as ev
from iris.controller.jobs import views
from iris.controller.jobs.spec import validate_submit
from iris.controller.regions.capacity import fits_checker, offers_from_workers
from iris.controller.scheduling.dry_run import dry_run
from iris.controller.turns import now_mono, now_wall, turn

_log = logging.getLogger(__name__)


class JobRequests:
    @turn
    def submit(self, raw: dict, schedule: bool = True) -> dict:
        """Accept a job; with `schedule`, place it in the same turn and transaction."""
        if isinstance(raw, dict) and raw.get("bundle") and not self.bundles.has(raw["bundle"]):
            raise InvalidRequestError(f"bundle: {str(raw['bundle'])[:12]} was never uploaded "
                                      "(put_bundle first)", "bundle")
        parent = self._parent_spec(raw)
        spec = validate_submit(raw, parent=parent, fits=self._catalogue())
        self.check_priority_cap(spec)  # the operator's cap on this user's band
        if spec.colocate and spec.colocate["job"] not in self.state.jobs:
            raise InvalidRequestError(f"colocate_with: no job named {spec.colocate['job']!r}",
                                      "colocate_with")
        # The submit and its placement commit in one transaction: one fsync per job.
        effects = self._run_many([ev.Submit(new_id("ev-"), spec)], schedule=schedule)
        accepted = next(e for e in effects if isinstance(e, ev.Accepted))
        return {"job_id": accepted.job_id, "duplicate": accepted.duplicate}

    @turn
    def schedule_now(self) -> None:
        """A scheduling pass, if anything changed since the last one."""
        self._run_many([], schedule=True)

    def _catalogue(self):
        """What a request must fit at admission (submit and dry run): the config's scale
        groups plus the workers registered now, so a job that fits a hand-started worker is
        never refused, whatever the groups say (issue 27). Without a config, the registered
        workers alone bound what can ever run (a request no host can hold is refused at
        submit, not left pending): None with no workers yet, or when more may join
        (accept_unfit)."""
        if self.config.offers is None and (self.config.accept_unfit or not self.workers.workers):
            return None
        key = (len(self.workers.workers), self._registrations)
        if self._live_fits[0] != key:
            self._live_fits = (key, fits_checker((*(self.config.offers or ()),
                                                  *offers_from_workers(
                                                      self.workers.workers.values()))))
        return self._live_fits[1]

    @turn
    def dry_run(self, raw: dict) -> dict:
        """Would this submission fit now, and where (the real scheduler; changes nothing)."""
        spec = validate_submit(raw, parent=self._parent_spec(raw), fits=self._catalogue())
        hosts = scheduler_view.host_views(self.state, self.workers.workers.values(),
                                          self.stopping)
        return dry_run(hosts, scheduler_view.task_demands(spec, now_wall(self)))

    @turn
    def kill(self, job_id: str, reason: str = "killed by user") -> dict:
        self._run(ev.Kill(new_id("ev-"), job_id, reason))
        return views.job_view(self.state, job_id, tasks=False)

    def status(self, job_id: str) -> dict:
        view = views.job_view(self.state, job_id)
        if job_id in self.pending_reasons:
            view["pending_reason"] = self.pending_reasons[job_id]
        return view

    def list_jobs(self, prefix: str | None = None, include_finished: bool = True) -> list[dict]:
        rows = views.list_jobs(self.state, prefix=prefix, include_finished=include_finished)
        for row in rows:
            if row["job_id"] in self.pending_reasons:
                row["pending_reason"] = self.pending_reasons[row["job_id"]]
        return rows

    def results(self, job_id: str) -> dict[int, bytes]:
        if job_id not in self.state.jobs:
            raise NotFoundError(f"no job {job_id}")
        return self.store.results(job_id)

    @turn
    def list_workers(self) -> list[dict]:
        now = now_mono(self)
        rows = []
        for info in self.workers.workers.values():
            row = info.as_dict(now, self.workers.stalled)
            row["attempts"] = sorted(self.state.by_worker.get(info.worker_id, ()))
            rows.append(row)
        return sorted(rows, key=lambda r: r["worker_id"])

    @turn
    def snapshot(self) -> dict:
        """Plain data for dashboards and metrics, built on the controller's thread."""
        counts: dict[str, int] = {}
        for job in self.state.jobs.values():
            counts[job.state.value] = counts.get(job.state.value, 0) + 1
        return {
            "at": now_wall(self), "workers": self.list_workers(),
            "pending_reasons": dict(self.pending_reasons), "jobs_by_state": counts,
            "summary": self.state.summary(), "pending_tasks": len(self.state.pending),
            "log_shipping": self._log_shipping(),
            "scheduling_passes": self.pass_seconds.as_dict(),
            "gangs": {"reserving": len(self.gangs.reserving), "placed": len(self.gangs.placed)},
            "capacity": [rep["capacity"] for _, rep in sorted(self.region_reports.items())
                         if "capacity" in rep],
            "unmet": {r: dict(g) for r, g in self.unmet.items()},
            "figures": live_figures.summary(self.figures, now_wall(self)),
        }

    def _log_shipping(self) -> dict:
        """Worst shipping lag and total dropped lines over the live workers' last reports."""
        live = [s.get("log_shipping") for w, s in self.worker_stats.items()
                if w in self.workers.workers and isinstance(s.get("log_shipping"), dict)]
        if not live:
            return {}
        return {"max_flush_lag_s": max(float(s.get("max_flush_lag_s", 0.0)) for s in live),
                "dropped_lines": sum(int(s.get("dropped_lines", 0)) for s in live)}

    def job_state(self, job_id: str) -> str | None:
        job = self.state.jobs.get(job_id)
        return job.state.value if job else None
