"""Kernel tests of the policy rules around the scheduler: budgets (usage, demotion, the cap),
fallback and existing-capacity-only demand for the autoscaler, colocation of job trees."""

from __future__ import annotations

import pytest

from iris.base.errors import InvalidRequestError, UnschedulableError
from iris.controller import budgets as bud
from iris.controller import colocate
from iris.controller.config import ScaleGroupConfig
from iris.controller.jobs.spec import validate_submit
from iris.controller.regions.demand import held_back, hold_existing, route
from iris.controller.scheduling.constraints import Op
from tests.controller.test_job_support import spec

H = 3600.0
WEEK = 7 * 24 * H


# ---- budgets --------------------------------------------------------------------------

def test_usage_counts_chips_times_run_time_inside_the_window_only():
    now = 10 * 24 * H
    runs = [bud.Run("alice", 4, now - 2 * H, now - H),         # 4 chip-hours
            bud.Run("alice", 8, now - 30 * H, None),            # running: 240
            bud.Run("alice", 4, now - WEEK - 2 * H, now - WEEK + H),  # 1 h inside: 4
            bud.Run("bob", 4, now - 20 * 24 * H, now - 9 * 24 * H)]  # all outside
    assert bud.usage(runs, now, WEEK) == {"alice": pytest.approx(248.0)}


def test_over_budget_names_user_spend_and_window():
    budgets = {"alice": bud.Budget("alice", hours=800.0)}
    over = bud.over_budget(budgets, {WEEK: {"alice": 812.2, "bob": 5000}})
    assert over == {"alice": "alice is over budget (812 of 800 accelerator-hours in 7 days)"}
    assert bud.over_budget(budgets, {WEEK: {"alice": 799.0}}) == {}


def test_group_over_budget_demotes_every_member():
    budgets = {"group:ml": bud.Budget("group:ml", hours=100.0, members=("alice", "bob"))}
    over = bud.over_budget(budgets, {WEEK: {"alice": 60.0, "bob": 50.0, "carol": 900.0}})
    assert sorted(over) == ["alice", "bob"]
    assert over["bob"].startswith("bob's group:ml is over budget (110 of 100")


def test_priority_cap_is_the_most_restrictive_of_user_and_groups():
    budgets = {"alice": bud.Budget("alice", max_priority="interactive"),
               "group:ml": bud.Budget("group:ml", max_priority="batch", members=("alice",))}
    with pytest.raises(InvalidRequestError, match="at most batch") as err:
        bud.check_priority(budgets, "alice", "interactive")
    assert err.value.field == "priority"
    bud.check_priority(budgets, "alice", "batch")
    bud.check_priority(budgets, "carol", "production")


@pytest.mark.parametrize("raw, field", [
    ({"subject": "alice", "hours": -1}, "hours"),
    ({"subject": "alice", "window_s": 30 * 24 * H}, "window_s"),
    ({"subject": "alice", "max_priority": "urgent"}, "max_priority"),
    ({"subject": "alice", "members": ["bob"]}, "members"),
    ({"subject": "../x"}, "subject"),
    ({"subject": "alice", "color": 1}, "color"),
])
def test_bad_budget_refused_naming_the_field(raw, field):
    with pytest.raises(InvalidRequestError) as err:
        bud.parse_budget(raw, max_window_s=WEEK)
    assert err.value.field == field


# ---- autoscaler demand ------------------------------------------------------------------

def _group(name, variant, region="us-east"):
    return ScaleGroupConfig(name, region, "tpu", variant, 1, 4, (f"{region}-a",), max_slices=4)


def test_demand_asks_for_the_preferred_alternative_when_a_group_can_grow_it():
    groups = {"us-east": [_group("v6e", "v6e-4"), _group("v5e", "v5litepod-4")]}
    job = spec("f", resources={"tpu": "v6e-4,v5litepod-4"})
    assert route([(job, 1)], groups, {}) == {"us-east": {"v6e": 1}}


def test_demand_falls_to_the_next_alternative_only_when_the_preferred_cannot_grow():
    groups = {"us-east": [_group("v6e", "v6e-4"), _group("v5e", "v5litepod-4")]}
    job = spec("f", resources={"tpu": "v6e-4,v5litepod-4"})
    blocked = {"us-east": {"v6e": "group v6e: zone us-east-a stocked out"}}
    assert route([(job, 1)], groups, blocked) == {"us-east": {"v5e": 1}}
    assert held_back(job, groups, blocked) == {}


def test_existing_capacity_only_job_is_never_demand_and_says_it_waits():
    groups = {"us-east": [_group("v6e", "v6e-4")]}
    job = spec("e", resources={"tpu": "v6e-4"}, existing_capacity_only=True)
    assert route([(job, 1)], groups, {}) == {}
    reason = hold_existing({"code": "NO_CAPACITY", "message": "no v6e worker in any region"})
    assert reason["code"] == "EXISTING_CAPACITY_ONLY"
    assert "waits for existing capacity" in reason["message"]


def test_fallback_job_accepted_if_any_alternative_fits_the_catalogue():
    def fits(res):
        return None if res.tpu == "v5litepod-4" else f"no scale group offers {res.tpu}"
    raw = {"name": "f", "user": "alice", "entrypoint": {"kind": "command", "argv": ["x"]},
           "resources": {"tpu": "v6e-4,v5litepod-4"}}
    assert validate_submit(raw, fits=fits).resources.tpu_alternatives == ("v6e-4",
                                                                          "v5litepod-4")
    with pytest.raises(UnschedulableError, match="v6e-4: no scale group offers v6e-4; "
                                                 "v5litepod-4: nope"):
        validate_submit(raw, fits=lambda r: "nope" if r.tpu == "v5litepod-4" else
                        f"no scale group offers {r.tpu}")


# ---- colocation ---------------------------------------------------------------------------

def test_sub_job_colocated_with_parent_by_default_and_root_job_must_name_one():
    parent = spec("rl")
    child = spec("coord", parent_spec=parent, colocate="zone")
    assert child.colocate == {"scope": "zone", "job": "/alice/rl"}
    with pytest.raises(InvalidRequestError) as err:
        spec("lonely", colocate="zone")
    assert err.value.field == "colocate_with"
    follower = spec("coord", colocate_with="train", colocate="region")
    assert follower.colocate == {"scope": "region", "job": "/alice/train"}
    with pytest.raises(InvalidRequestError, match="'zone' or 'region'"):
        spec("x", colocate_with="train", colocate="rack")


def test_colocated_job_waits_until_its_job_is_placed_then_is_pinned_to_its_zones():
    rule = {"scope": "zone", "job": "/alice/train"}
    waiting = colocate.resolve(rule, set())
    assert waiting["code"] == colocate.WAITING_CODE
    assert "waiting for /alice/train to be placed" in waiting["message"]
    gone = colocate.resolve(rule, set(), ended=True)
    assert "/alice/train has ended" in gone["message"]
    pin = colocate.resolve(rule, {"us-east-a"})
    assert (pin.key, pin.op, pin.values) == ("zone", Op.IN, frozenset({"us-east-a"}))
