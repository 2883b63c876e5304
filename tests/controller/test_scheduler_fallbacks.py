"""Kernel tests of accelerator fallbacks and budget demotion in one scheduling pass."""

from __future__ import annotations

import pytest

from iris.base.errors import InvalidRequestError
from iris.base.resources import Resources
from iris.controller.scheduling.model import Band, Demand, HostView, RunningAttempt, TaskDemand
from iris.controller.scheduling.reasons import ReasonCode
from iris.controller.scheduling.scheduler import SchedulerConfig, schedule

GB = 10**9
FALLBACK_1HOST = Resources(cpu=1, tpu="v6e-4,v5litepod-4")
FALLBACK_4HOST = Resources(cpu=1, tpu=["v6e-16", "v5litepod-16"])


def tpu_host(hid, accel, slice_id=None, region="r1", running=()):
    return HostView(hid, region, f"{region}-a", Demand(8, 64 * GB, 4), slice_id=slice_id or hid,
                    accelerator=accel, accelerator_variant=accel.rsplit("-", 1)[0],
                    running=tuple(running))


def tpu_slice(sid, accel, region="r1", running=None):
    running = running or {}
    return [tpu_host(f"{sid}-h{j}", accel, sid, region, running.get(j, ())) for j in range(4)]


def task(tid, res=FALLBACK_1HOST, job="j1", user="alice", band=Band.INTERACTIVE, gang=None,
         size=1):
    return TaskDemand(tid, job, user, band, res, (), gang, size, 0.0)


def gang(job, res=FALLBACK_4HOST, band=Band.INTERACTIVE):
    return [task(f"{job}-t{i}", res, job, band=band, gang=f"{job}-g", size=4) for i in range(4)]


def busy(aid, band=Band.BATCH):
    return RunningAttempt(aid, f"{aid}-task", "old", "bob", band, Demand(1, 0, 4))


# ---- the request ------------------------------------------------------------------------

def test_fallbacks_parse_from_comma_text_or_list_preferred_first():
    assert Resources(tpu="v6e-4, v5litepod-4").tpu_alternatives == ("v6e-4", "v5litepod-4")
    assert Resources(tpu=["v6e-4", "v5litepod-4"]).tpu == "v6e-4"
    r = Resources(tpu="v6e-4,v5litepod-4")
    assert Resources.from_dict(r.to_dict()) == r


def test_fallbacks_with_different_host_counts_refused_naming_the_field():
    with pytest.raises(InvalidRequestError) as err:
        Resources(tpu="v6e-4,v5litepod-16")
    assert err.value.field == "tpu" and "same number of hosts" in str(err.value)
    with pytest.raises(InvalidRequestError, match="unknown accelerator type 'v9-4'"):
        Resources(tpu=["v6e-4", "v9-4"])


# ---- single-host tasks --------------------------------------------------------------------

def test_fallback_taken_when_preferred_type_absent():
    plan = schedule([tpu_host("old", "v5litepod-4")], [task("t0")])
    assert [(a.host_id, a.accelerator) for a in plan.assignments] == [("old", "v5litepod-4")]


def test_preferred_type_taken_when_both_have_room():
    hosts = [tpu_host("old", "v5litepod-4"), tpu_host("new", "v6e-4")]
    plan = schedule(hosts, [task("t0")])
    assert [(a.host_id, a.accelerator) for a in plan.assignments] == [("new", "v6e-4")]


def test_fallback_with_room_beats_evicting_on_preferred():
    hosts = [tpu_host("new", "v6e-4", running=[busy("a1")]), tpu_host("old", "v5litepod-4")]
    plan = schedule(hosts, [task("t0", band=Band.PRODUCTION)])
    assert [a.host_id for a in plan.assignments] == ["old"] and not plan.preemptions


def test_no_alternative_fits_reason_names_each_alternative():
    hosts = [tpu_host("old", "v5litepod-4", running=[busy("a1", Band.PRODUCTION)])]
    plan = schedule(hosts, [task("t0"), task("t1")])
    reason = plan.reasons["t0"]
    assert reason.code is ReasonCode.NO_CAPACITY
    assert "v6e-4: no v6e worker in any region" in reason.message
    assert "v5litepod-4: no v5litepod worker has room" in reason.message
    assert [a["tpu"] for a in reason.details["alternatives"]] == ["v6e-4", "v5litepod-4"]
    assert plan.reasons["t1"] is reason


# ---- gangs ------------------------------------------------------------------------------

def test_gang_falls_back_to_a_whole_slice_of_the_second_type():
    plan = schedule(tpu_slice("s1", "v5litepod-16"), gang("g"))
    (request,) = plan.gang_requests
    assert request.shape.accelerator == "v5litepod-16" and request.shape.whole_slices == 1


def test_gang_prefers_first_type_and_evicts_only_when_no_alternative_is_free():
    busy_v6 = tpu_slice("s6", "v6e-16", running={0: [busy("a1")]})
    plan = schedule(busy_v6 + tpu_slice("s5", "v5litepod-16"), gang("g", band=Band.PRODUCTION))
    assert [r.shape.accelerator for r in plan.gang_requests] == ["v5litepod-16"]
    assert not plan.preemptions
    plan = schedule(busy_v6, gang("g", band=Band.PRODUCTION))
    assert [p.attempt_id for p in plan.preemptions] == ["a1"]
    assert plan.reasons["g-t0"].code is ReasonCode.PREEMPTING


def test_gang_with_no_fitting_alternative_lists_both():
    plan = schedule([], gang("g"))
    reason = plan.reasons["g-t0"]
    assert "v6e-16: no complete v6e-16 slice" in reason.message
    assert "v5litepod-16: no complete v5litepod-16 slice" in reason.message


# ---- budgets ----------------------------------------------------------------------------

def test_over_budget_user_pending_work_runs_as_batch_and_is_told():
    note = "alice is over budget (812 of 800 accelerator-hours in 7 days)"
    config = SchedulerConfig(demoted={"alice": note})
    plan = schedule([tpu_host("h", "v6e-4", running=[busy("x", Band.BATCH)])],
                    [task("a0", Resources(tpu="v6e-4"), "ja", "alice", Band.PRODUCTION)],
                    config=config)
    assert not plan.preemptions  # as batch it may not evict batch work
    assert plan.reasons["a0"].message.startswith(note + ": scheduled as batch; ")
    assert plan.reasons["a0"].details["band"] == "batch"


def test_user_within_budget_keeps_band_and_evicts():
    plan = schedule([tpu_host("h", "v6e-4", running=[busy("x", Band.BATCH)])],
                    [task("a0", Resources(tpu="v6e-4"), "ja", "alice", Band.PRODUCTION)],
                    config=SchedulerConfig(demoted={"carol": "carol is over budget"}))
    assert [p.attempt_id for p in plan.preemptions] == ["x"]
