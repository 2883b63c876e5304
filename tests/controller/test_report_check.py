"""check_report's direct check of an idle host's heartbeat gives what the generic decode
gives: the same message, or the same error naming the same field."""

from __future__ import annotations

import random

from iris.base.errors import InvalidRequestError
from iris.controller.report_check import check_report
from iris.wire import control

_NAMES = ("worker_id", "updates", "stats", "running", "usage")
_VALUES = [
    None, 0, 1, -1, 1.5, float("nan"), True, "", "w", "x" * 256, "x" * 257, b"b", [], (), {},
    [""], ["a"], ["a" * 256], ["a" * 257], ["a"] * 4096, ["a"] * 4097, [1], ("a", "b"),
    {"a": 1}, {1: 2}, {"k" * 1024: 1}, {"k" * 1025: 1}, {str(i): i for i in range(64)},
    {str(i): i for i in range(65)}, [{"attempt_id": "a", "status": "running"}],
    [{"attempt_id": "a", "at": 1.0, "cpu_s": 0.1, "rss_bytes": 1}],
    {"log_shipping": {"max_flush_lag_s": 0.1, "dropped_lines": 0}},
]


def _generic(*args) -> control.WorkerReport:
    raw = {"stats": None, "running": None, "usage": ()} | dict(zip(_NAMES, args, strict=False))
    return control.decode(control.WorkerReport, raw)


def _outcome(fn, args: list) -> tuple:
    try:
        return "ok", fn(*args)
    except InvalidRequestError as exc:
        return "refused", str(exc), exc.field


def test_the_heartbeat_check_agrees_with_the_generic_decode_on_good_and_bad_reports():
    rng = random.Random(32)
    accepted = refused = 0
    for _ in range(3000):
        args = ["sim-00001", [], {"log_shipping": {}}, [], ()][:rng.choice((2, 3, 4, 5))]
        for i in range(len(args)):
            if rng.random() < 0.4:
                args[i] = rng.choice(_VALUES)
        mine, theirs = _outcome(check_report, args), _outcome(_generic, args)
        assert mine == theirs, args
        accepted += mine[0] == "ok"
        refused += mine[0] == "refused"
    assert accepted > 300 and refused > 300  # both ways were taken


def test_a_heartbeat_keeps_its_figures_and_attempts():
    stats = {"log_shipping": {"max_flush_lag_s": 0.2, "dropped_lines": 3}}
    msg = check_report("w1", [], stats, ["a1", "a2"])
    assert msg == control.WorkerReport("w1", (), stats, ("a1", "a2"), ())
    assert msg.stats is stats  # as the generic decode: the map itself, not a copy


def test_report_front_process_imports_no_job_model():
    """A report front (its own process, report_front.py) checks reports with report_check.py
    and loads none of the controller's job model, scheduler or store (issue 33)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    probe = ("import sys, json, iris.controller.report_front\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('iris.controller'))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, env={**os.environ,
                                            "PYTHONPATH": str(Path(__file__).parents[2])})
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) <= {
        "iris.controller", "iris.controller.credential_log", "iris.controller.credentials",
        "iris.controller.report_check", "iris.controller.report_front"}
