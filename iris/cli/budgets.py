"""`iris user budget set|get|list`: budgets and usage through the client API; printing only."""

from __future__ import annotations

import argparse
import json

from iris.base.errors import InvalidRequestError
from iris.cli.jobs import print_rows
from iris.client import budgets

_BUDGET_COLUMNS = ["subject", "hours", "window_days", "max_priority", "members", "used_hours"]
_USAGE_COLUMNS = ["user", "used_hours", "budget_hours", "groups", "over_budget"]


def budget(args: argparse.Namespace) -> int:
    if args.budget_action == "set":
        members = [m.strip() for m in (args.members or "").split(",") if m.strip()]
        given = [flag for flag, value in (("--hours", args.hours), ("--members", args.members),
                                          ("--max-priority", args.max_priority))
                 if value is not None]
        if args.clear and given:  # else they would be dropped without a word
            raise InvalidRequestError(f"--clear removes the budget: it takes no {given[0]}",
                                      given[0])
        answer = budgets.set_budget(args.subject, hours=args.hours,
                                    window_days=args.window_days,
                                    max_priority=args.max_priority, members=members,
                                    clear=args.clear, admin_token_file=args.admin_token_file)
        if args.json:
            print(json.dumps(answer))
        else:
            print(f"budget of {answer['subject']} {'removed' if answer['cleared'] else 'set'}")
        return 0
    if args.budget_action == "get":
        row = budgets.get_budget(args.subject)
        if args.json:
            print(json.dumps(row))
        else:
            print_rows([_shown(row)], _BUDGET_COLUMNS, False)
        return 0
    listing = budgets.list_budgets()
    if args.json:
        print(json.dumps(listing))
        return 0
    print_rows([_shown(r) for r in listing["budgets"]], _BUDGET_COLUMNS, False)
    print()
    print_rows([{**r, "groups": ",".join(r["groups"])} for r in listing["usage"]],
               _USAGE_COLUMNS, False)
    return 0


def _shown(row: dict) -> dict:
    return {**row, "members": ",".join(row.get("members", ())),
            "hours": "unlimited" if row.get("hours") is None else f"{row['hours']:g}"}
