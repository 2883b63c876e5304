"""The budget book: every budget set, and each user's usage counted from the attempts. Set /
get / list, the demotions the scheduler applies, and the priority cap at submit. A component of
ControllerService (service.py) owning these fields; the rules are in budgets.py. The job
kernel's state and `now` are passed in.
"""

from __future__ import annotations

from iris.base.errors import InvalidRequestError, NotFoundError
from iris.controller import budgets as bud
from iris.controller.jobs.model import ACTIVE_ATTEMPT
from iris.controller.jobs.spec import JobSpec
from iris.controller.jobs.state import KernelState
from iris.controller.jobs.store import JobStore
from iris.controller.scheduler_view import attempt_resources
from iris.controller.scheduling.model import per_host_demand

# Usage walks every attempt the controller keeps (100,000 took ~60 ms): recounted at most
# this often, so over-budget demotion lags spending by up to this much, which against
# budgets of hundreds of accelerator-hours is nothing.
USAGE_REFRESH_S = 10.0


class BudgetBook:
    def __init__(self, store: JobStore, retention_s: float):
        self._store = store
        self._retention_s = retention_s
        self.budgets: dict[str, bud.Budget] = {
            s: bud.Budget.from_dict(r) for s, r in store.budget_records().items()}
        self._usage: dict[float, dict[str, float]] = {}
        self._usage_at = float("-inf")

    def put(self, raw: dict) -> dict:
        """Set (or with `clear`, remove) a user's or group's budget; operators only. The
        caller places anew: demotions may have changed."""
        if not isinstance(raw, dict):
            raise InvalidRequestError(f"budget: expected a mapping, got {raw!r}", "budget")
        raw = dict(raw)
        clear = raw.pop("clear", False)
        if clear is True:
            subject = bud.parse_subject(raw.get("subject"))
            if subject not in self.budgets:
                raise NotFoundError(f"no budget for {subject}")
            self._store.put_budget(subject, None)
            del self.budgets[subject]
        else:
            budget = bud.parse_budget(raw, self._retention_s)
            self._store.put_budget(budget.subject, budget.to_dict())
            self.budgets[budget.subject] = budget
            subject = budget.subject
        self._usage_at = float("-inf")  # count anew
        return {"subject": subject, "cleared": clear is True}

    def get(self, subject: str, state: KernelState, wall: float, mono: float) -> dict:
        subject = bud.parse_subject(subject)
        budget = self.budgets.get(subject)
        if budget is None:
            raise NotFoundError(f"no budget for {subject} (iris user budget list shows all)")
        self._refresh_usage(state, wall, mono)
        return self._budget_row(budget)

    def table(self, state: KernelState, wall: float, mono: float) -> dict:
        """Every budget, and every user's usage over the default window (the dashboard's
        table): {"budgets": [...], "usage": [...]}."""
        self._refresh_usage(state, wall, mono)
        over = self.over_budget(state, wall, mono)
        used = self._usage.get(bud.DEFAULT_WINDOW_S, {})
        users = sorted(set(used) | {s for s in self.budgets if not s.startswith("group:")})
        rows = []
        for user in users:
            mine = self.budgets.get(user)
            rows.append({"user": user, "used_hours": round(used.get(user, 0.0), 6),
                         "window_days": bud.DEFAULT_WINDOW_S / bud.DAY_S,
                         "budget_hours": mine.hours if mine else None,
                         "groups": [g.subject for g in bud.groups_of(self.budgets, user)],
                         "over_budget": over.get(user)})
        return {"budgets": [self._budget_row(b) for _, b in sorted(self.budgets.items())],
                "usage": rows}

    def _budget_row(self, budget: bud.Budget) -> dict:
        used = self._usage.get(budget.window_s, {})
        who = budget.members if budget.is_group else (budget.subject,)
        return {**budget.to_dict(), "window_days": budget.window_s / bud.DAY_S,
                "used_hours": round(sum(used.get(u, 0.0) for u in who), 6)}

    def over_budget(self, state: KernelState, wall: float, mono: float) -> dict[str, str]:
        """user -> why they are demoted to batch (for the scheduler's pass)."""
        if not any(b.hours is not None for b in self.budgets.values()):
            return {}
        self._refresh_usage(state, wall, mono)
        return bud.over_budget(self.budgets, self._usage)

    def check_priority_cap(self, spec: JobSpec) -> None:
        bud.check_priority(self.budgets, spec.user, spec.priority)

    def _refresh_usage(self, state: KernelState, wall: float, mono: float) -> None:
        if mono - self._usage_at < USAGE_REFRESH_S:
            return
        self._usage_at = mono
        windows = {b.window_s for b in self.budgets.values()} | {bud.DEFAULT_WINDOW_S}
        runs = list(_runs(state))
        self._usage = {w: bud.usage(runs, wall, w) for w in windows}


def _runs(state: KernelState):
    for attempt in state.attempts.values():
        if attempt.started_at is None:
            continue
        spec = state.jobs[attempt.job_id].spec
        chips = per_host_demand(attempt_resources(spec, attempt.accelerator)).chips
        if not chips:
            continue
        ended = attempt.finished_at
        if ended is None and attempt.state not in ACTIVE_ATTEMPT:
            ended = attempt.started_at  # ended without a time: count nothing unknown
        yield bud.Run(spec.user, chips, attempt.started_at, ended)
