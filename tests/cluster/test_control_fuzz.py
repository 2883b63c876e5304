"""Property: well-formed but wrong control-plane calls change nothing.

Hypothesis sends a real controller (own process node, real sockets) calls that are valid
IRIS/1 messages with wrong contents: wrong types, missing and extra fields, unknown ids,
out-of-range numbers, through the method names of docs/protocol.md, as a worker holding the
cluster token would (the strongest non-operator peer). After each call: the caller got a
clear Iris error, the store's rows and the live listings are exactly as before. At the end a
job still runs. The number of cases tried and the state changes seen are printed.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import iris
from iris.actors import tokens
from iris.actors.keys import CONTROLLER_KEY
from iris.base.errors import IrisError
from tests.cluster.controller_state import controller_state

pytestmark = pytest.mark.slow

# 300 cases in the main suite (each two state reads and a call on a real controller: ~10 ms);
# the soak tier (tests/README.md) tries 2000 more, with a search of its own.
CASES = 300
SOAK_CASES = 2000
_seen = {"cases": 0, "changed": 0}

junk = st.one_of(
    st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 63 - 1),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.binary(max_size=20), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
not_str = junk.filter(lambda v: not isinstance(v, str))
unknown_id = st.text(min_size=1, max_size=12).map(lambda s: f"nobody-{s}")


def _update(status=st.sampled_from(["building", "running", "exited"])):
    return st.fixed_dictionaries({"attempt_id": st.one_of(unknown_id, not_str),
                                  "status": st.one_of(status, junk)},
                                 optional={"exit_code": junk, "result": junk, "error": junk,
                                           "extra": junk})


# Each entry: (method, strategy of an argument tuple that must be refused or change nothing).
CALLS = [
    ("register_worker", st.tuples(not_str, st.text(max_size=9), st.just({}), st.just([]))),
    ("register_worker", st.tuples(unknown_id, junk.filter(lambda v: not isinstance(v, str)),
                                  st.just({}), st.just([]))),
    ("register_worker", st.tuples(unknown_id, st.just("tcp://127.0.0.1:9"),
                                  st.dictionaries(st.text(max_size=4), not_str, min_size=1),
                                  st.just([]))),
    ("register_worker", st.tuples(unknown_id, st.just("tcp://127.0.0.1:9"), st.just({}),
                                  st.lists(not_str, min_size=1, max_size=3))),
    ("register_worker", st.tuples(unknown_id, st.just("tcp://127.0.0.1:9"), st.just({}),
                                  st.just([]), st.lists(_update(), min_size=1, max_size=2)
                                  .filter(lambda us: any(not isinstance(u["attempt_id"], str)
                                                         or u["status"] not in
                                                         ("building", "running", "exited")
                                                         or "extra" in u for u in us)))),
    ("register_worker", st.tuples(unknown_id)),  # missing arguments
    ("report", st.tuples(unknown_id, st.lists(_update(), max_size=2))),  # unknown worker
    ("report", st.tuples(not_str, st.lists(_update(), max_size=2))),
    ("report", st.tuples(unknown_id, junk.filter(lambda v: not isinstance(v, list)))),
    ("submit", junk.map(lambda v: (v,))),
    ("submit", st.fixed_dictionaries({"name": not_str}).map(lambda d: (d,))),
    ("submit", st.fixed_dictionaries({"entrypoint": junk}).map(lambda d: (d,))),
    ("submit", st.fixed_dictionaries({
        "entrypoint": st.just({"kind": "command", "argv": ["true"]}),
        "resources": st.fixed_dictionaries({"cpu": st.one_of(
            st.floats(allow_nan=True).filter(lambda x: math.isnan(x) or x < 0 or x > 1e6),
            st.text(max_size=3))})}).map(lambda d: (d,))),
    ("submit", st.fixed_dictionaries({
        "entrypoint": st.just({"kind": "command", "argv": ["true"]}),
        "replicas": st.one_of(st.integers(max_value=0), st.integers(min_value=10 ** 7),
                              not_str.filter(lambda v: not isinstance(v, int)))})
        .map(lambda d: (d,))),
    ("submit", st.fixed_dictionaries({
        "entrypoint": st.just({"kind": "command", "argv": ["true"]}),
        "constraints": st.dictionaries(st.text(min_size=1, max_size=4),
                                       st.fixed_dictionaries({"bogus": junk}), min_size=1)})
        .map(lambda d: (d,))),
    ("kill", st.tuples(st.one_of(unknown_id, not_str))),
    ("status", st.tuples(st.one_of(unknown_id, not_str))),
    ("results", st.tuples(st.one_of(unknown_id, not_str))),
    ("drain_hosts", st.tuples(junk)),
    ("hosts_gone", st.tuples(junk)),
    ("get_bundle", st.tuples(st.one_of(unknown_id, not_str))),
    ("preemption_notice", st.tuples(st.one_of(unknown_id, not_str), junk, not_str, junk)),
    ("preemption_notice", st.tuples(unknown_id, st.just("tcp://127.0.0.1:9"), st.text(),
                                    st.floats().filter(lambda x: not 0 <= x <= 3600))),
]
call = st.sampled_from(range(len(CALLS))).flatmap(
    lambda i: st.tuples(st.just(CALLS[i][0]), CALLS[i][1]))


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    with iris.local_cluster(workers=1, state_dir=root) as cluster, \
            iris.connect(cluster.address) as client:
        token = tokens.read(root / "controller" / tokens.CLUSTER_TOKEN_FILE)
        yield cluster, client.node, token, root / "controller" / "jobs.sqlite3"
        print(f"\ncontrol-plane fuzz: {_seen['cases']} cases tried, "
              f"{_seen['changed']} state changes")


@settings(max_examples=CASES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(call)
def test_wrong_control_plane_calls_change_nothing(controller, call):
    _changes_nothing(controller, call)


@pytest.mark.soak
@settings(max_examples=SOAK_CASES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(call)
def test_wrong_control_plane_calls_change_nothing_soak(controller, call):
    _changes_nothing(controller, call)


def _changes_nothing(controller, call) -> None:
    cluster, node, token, db_path = controller
    method, args = call
    before = controller_state(node, cluster.address, db_path)
    fut = node.call(cluster.address, CONTROLLER_KEY, method, args, timeout_s=30, auth=token)
    try:
        answer = fut.result(60)
    except IrisError as exc:  # the expected outcome: a clear, typed refusal
        assert str(exc), f"{method}{args!r}: an empty error"
    else:  # only an unknown worker's report may be answered, and it changes nothing
        assert method == "report" and answer["acked"] == [] and answer["reregister"], (
            method, args, answer)  # (and the interval to report at: docs/protocol.md)
    after = controller_state(node, cluster.address, db_path)
    _seen["cases"] += 1
    _seen["changed"] += after != before
    assert after == before, f"{method}{args!r} changed the controller's state"


def test_a_job_still_runs_after_the_fuzz(controller):
    cluster, *_ = controller
    from iris.actors.current import current_context

    reset = current_context.set(cluster)
    try:
        assert iris.submit(["sh", "-c", "echo ok"]).wait(timeout=120)["state"] == "succeeded"
    finally:
        current_context.reset(reset)
