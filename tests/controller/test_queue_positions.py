"""A waiting job's place in line (scheduling/queue.py), the text that says it (reasons.in_line),
and the controller's annotation of pending reasons (queue_view.py). Pure: no sockets."""

from __future__ import annotations

from iris.controller import queue_view
from iris.controller.scheduling import queue, reasons
from iris.controller.scheduling.model import Band, Demand, HostView, RunningAttempt
from tests.controller.test_job_support import Harness, spec

TOTAL = Demand(100.0, 0, 256)


def waiting(job, user="alice", band=Band.BATCH, accel="v5litepod-16", chips=16, at=0.0):
    return queue.Waiting(job, user, band, accel, Demand(4.0, 0, chips), at, f"{chips} chips")


def test_one_users_jobs_wait_oldest_first():
    spots = queue.positions([waiting("/a/c", at=3), waiting("/a/a", at=1),
                             waiting("/a/b", at=2)], {}, TOTAL)
    assert [spots[j].position for j in ("/a/a", "/a/b", "/a/c")] == [1, 2, 3]
    assert [w.job_id for w in spots["/a/c"].ahead] == ["/a/a", "/a/b"]


def test_fair_share_puts_the_user_running_less_first():
    usage = {(Band.BATCH, "alice"): Demand(0.0, 0, 128)}  # alice already runs half the chips
    spots = queue.positions([waiting("/alice/old", at=0), waiting("/bob/new", "bob", at=50)],
                            usage, TOTAL)
    assert spots["/bob/new"].position == 1
    assert spots["/alice/old"].position == 2


def test_users_alternate_as_each_is_charged_for_the_job_it_was_served():
    jobs = [waiting(f"/alice/{i}", at=i) for i in range(2)] + [
        waiting(f"/bob/{i}", "bob", at=10 + i) for i in range(2)]
    spots = queue.positions(jobs, {}, TOTAL)
    line = sorted(spots, key=lambda j: spots[j].position)
    assert line == ["/alice/0", "/bob/0", "/alice/1", "/bob/1"]


def test_lines_are_per_band_and_accelerator():
    spots = queue.positions([
        waiting("/a/x", at=0), waiting("/a/y", accel="v5litepod-64", chips=64, at=1),
        waiting("/a/z", band=Band.PRODUCTION, at=2), waiting("/a/w", at=3)], {}, TOTAL)
    assert (spots["/a/x"].position, spots["/a/w"].position) == (1, 2)
    assert spots["/a/y"].position == 1 and spots["/a/y"].accelerator == "v5litepod-64"
    assert spots["/a/z"].position == 1 and spots["/a/z"].band is Band.PRODUCTION


def test_reason_text_leads_with_the_place_in_line_and_whats_ahead():
    base = {"code": "NO_CAPACITY", "message": "no v5litepod-16 worker has room",
            "details": {"accelerator": "v5litepod-16"}}
    got = reasons.in_line(base, 3, "batch", "v5litepod-16",
                          [("/alice/train", "64 chips"), ("/bob/eval", "16 chips")])
    assert got["message"] == ("3rd in batch for v5litepod-16; ahead: /alice/train (64 chips), "
                              "/bob/eval (16 chips): no v5litepod-16 worker has room")
    assert got["details"]["queue"] == {
        "position": 3, "band": "batch", "accelerator": "v5litepod-16", "ahead_count": 2,
        "ahead": [{"job_id": "/alice/train", "asks": "64 chips"},
                  {"job_id": "/bob/eval", "asks": "16 chips"}]}
    assert got["details"]["accelerator"] == "v5litepod-16" and base["details"].keys() == {
        "accelerator"}  # the input is not changed


def test_reason_text_names_three_ahead_then_counts_the_rest():
    ahead = [(f"/u/j{i}", "4 cpu") for i in range(5)]
    got = reasons.in_line({"code": "NO_CAPACITY", "message": "m"}, 6, "interactive", "cpu",
                          ahead)
    assert got["message"].startswith("6th in interactive for cpu; ahead: /u/j0 (4 cpu), "
                                      "/u/j1 (4 cpu), /u/j2 (4 cpu) and 2 more: m")
    first = reasons.in_line({"code": "NO_CAPACITY", "message": "m"}, 1, "batch", "cpu", [])
    assert first["message"] == "1st in batch for cpu; nothing ahead: m"


def test_ordinals():
    assert [reasons.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st",
        "111th"]


def test_controller_annotates_only_reasons_that_wait_for_room():
    h = Harness()
    first = h.submit(spec("first", resources={"cpu": 2}, priority="batch"))
    h.advance(1)
    second = h.submit(spec("second", resources={"cpu": 2}, priority="batch"))
    h.advance(1)
    quota = h.submit(spec("third", resources={"cpu": 2}, priority="batch"))
    hosts = [HostView("w1", "local", "local", Demand(2.0, 0, 0), running=(RunningAttempt(
        "a0", "/bob/hog[0]", "/bob/hog", "bob", Band.BATCH, Demand(2.0, 0, 0)),))]
    pending = {first: {"code": "NO_CAPACITY", "message": "full", "details": {}},
               second: {"code": "SCALING_UP", "message": "growing", "details": {}},
               quota: {"code": "OVER_QUOTA", "message": "quota", "details": {}}}
    got = queue_view.annotate(pending, h.state, hosts)
    assert got[first]["message"] == "1st in batch for cpu; nothing ahead: full"
    assert got[second]["message"] == (f"2nd in batch for cpu; ahead: {first} (2 cpu): "
                                      "growing")
    assert got[quota] == pending[quota]
    assert pending[first]["message"] == "full"  # the input is not changed
