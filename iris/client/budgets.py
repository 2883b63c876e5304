"""Budgets from the client side: set (operators, with the admin token), get, list. Not the rules
(controller/budgets.py).

Setting a budget is an admin method: the caller presents the controller's admin token, read
from `admin_token_file` (the controller writes it to STATE_DIR/admin.token), or from
$IRIS_ADMIN_TOKEN_FILE, or as hex in $IRIS_ADMIN_TOKEN. Reading budgets and usage is open to
every client: users should see what they have spent.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iris.actors import current, tokens
from iris.base.errors import ConfigError, InvalidRequestError
from iris.client.retry import call_controller

ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE_ENV = "IRIS_ADMIN_TOKEN", "IRIS_ADMIN_TOKEN_FILE"


def admin_token(path: str | os.PathLike | None = None,
                purpose: str = "setting a budget") -> bytes:
    """The operator's admin token: from `path`, $IRIS_ADMIN_TOKEN_FILE or $IRIS_ADMIN_TOKEN."""
    path = path or os.environ.get(ADMIN_TOKEN_FILE_ENV)
    if path:
        return tokens.read(Path(path))
    raw = os.environ.get(ADMIN_TOKEN_ENV)
    if raw:
        try:
            return bytes.fromhex(raw)
        except ValueError as exc:
            raise ConfigError(f"${ADMIN_TOKEN_ENV} is not a hex token") from exc
    raise ConfigError(f"{purpose} is for operators: give the controller's admin token "
                      "(--admin-token-file STATE_DIR/admin.token, or $IRIS_ADMIN_TOKEN_FILE)")


def set_budget(subject: str, *, hours: float | None = None, window_days: float = 7.0,
               max_priority: str | None = None, members: Sequence[str] = (),
               clear: bool = False, admin_token_file: str | os.PathLike | None = None) -> dict:
    """Set `subject`'s budget ("alice", or "group:ml" with `members`): `hours` accelerator-hours
    per `window_days`, and `max_priority` the highest band it may submit at. `clear` removes it.
    """
    if isinstance(members, str | bytes):  # a name is not a list of one-letter members
        raise InvalidRequestError(f"members: expected a list of user names, e.g. "
                                  f"[{members!r}], got the string {members!r}", "members")
    raw: dict[str, Any] = {"subject": subject}
    if clear:
        raw["clear"] = True
    else:
        raw.update(hours=hours, window_s=_days(window_days) * 86_400.0,
                   max_priority=max_priority, members=list(members))
    return _call("budget_set", raw, auth=admin_token(admin_token_file))


def get_budget(subject: str) -> dict:
    return _call("budget_get", subject)


def list_budgets() -> dict:
    """{"budgets": [...], "usage": [per user: used_hours over 7 days, budget, over_budget]}."""
    return _call("budget_list")


def _days(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequestError(f"window_days: expected a number of days, got {value!r}",
                                  "window_days")
    return float(value)


def _call(method: str, *args: Any, auth: bytes | None = None) -> Any:
    ctx = current()
    return call_controller(ctx.node, ctx.address, method, args, auth=auth)
