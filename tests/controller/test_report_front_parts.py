"""The report fronts' pure parts (controller/report_fronts.py): the setting checked, a front's
batch shaped or refused, answers split per batch, workers pointed at their front."""

from __future__ import annotations

import zlib

import pytest

from iris.base.errors import BadArgumentsError, ConfigError, InvalidRequestError
from iris.controller import report_fronts as rf
from iris.wire import control


def test_the_setting_is_a_small_whole_number():
    assert rf.check_fronts(0) == 0 and rf.check_fronts(2) == 2
    for bad in (-1, rf.MAX_FRONTS + 1, 1.5, "2", True):
        with pytest.raises(ConfigError, match="report_fronts"):
            rf.check_fronts(bad)


def test_a_batch_is_shaped_into_reports_or_refused():
    items = [["w-1", [], {"k": 1}, ["a"], []], ("w-2", (), None, None, ())]
    reports = rf.front_batch(0, items)
    assert [r.worker_id for r in reports] == ["w-1", "w-2"]
    assert all(type(r) is control.WorkerReport for r in reports)
    with pytest.raises(InvalidRequestError, match="items"):
        rf.front_batch(0, "not a list")
    with pytest.raises((TypeError, BadArgumentsError)):
        rf.front_batch(0, [["w-1"] * 9])


def test_answers_go_back_one_list_per_batch_in_order():
    batches = [[1, 2], [], [3]]
    assert rf.split_answers(batches, ["a", "b", "c"]) == [["a", "b"], [], ["c"]]


class _Fronts:
    def __init__(self, addresses):
        self._addresses = addresses

    address_for = rf.ReportFronts.address_for


def test_a_direct_answer_points_its_worker_at_its_front_or_here():
    fronts = _Fronts(["tcp://f0", None])
    ids = [f"w-{i}" for i in range(20)]
    msgs = [control.WorkerReport(w, ()) for w in ids]
    answers = [{"acked": []} for _ in ids[:-1]] + [RuntimeError("failed")]
    out = rf.point_at_fronts(fronts, msgs, answers)
    for w, answer in zip(ids[:-1], out, strict=False):
        want = "tcp://f0" if zlib.crc32(w.encode()) % 2 == 0 else ""  # front 1 is not up
        assert answer["reports_to"] == want
    assert isinstance(out[-1], RuntimeError)  # an error stays an error
