"""Submission validation (each bad field named) and what a task is told (its environment)."""

from __future__ import annotations

import pytest

from iris.base.errors import InvalidRequestError, UnschedulableError
from iris.base.resources import Resources
from iris.controller.jobs.env import gang_leader, task_environment
from iris.controller.jobs.spec import JobSpec, validate_submit
from tests.controller.test_job_support import spec

_GOOD = {"name": "train", "user": "alice",
         "entrypoint": {"kind": "command", "argv": ["python", "train.py"]}}


@pytest.mark.parametrize(("change", "field"), [
    ({"replicas": 0}, "replicas"),
    ({"replicas": "2"}, "replicas"),
    ({"priority": "urgent"}, "priority"),
    ({"env": {"A": 1}}, "env"),
    ({"env": {"A=B": "x"}}, "env"),
    ({"env": ["A"]}, "env"),
    ({"name": "bad name!"}, "name"),
    ({"name": "/bob/train"}, "name"),
    ({"name": ""}, "name"),
    ({"user": None}, "user"),
    ({"entrypoint": {"kind": "command", "argv": []}}, "entrypoint"),
    ({"entrypoint": {"kind": "callable", "payload": "not bytes"}}, "entrypoint"),
    ({"entrypoint": {"kind": "shell"}}, "entrypoint"),
    ({"resources": {"tpu": "v9-8"}}, "tpu"),
    ({"resources": {"gpu": "Z80"}}, "gpu"),
    ({"resources": {"memory": "lots"}}, "memory"),
    ({"resources": {"cpus": 4}}, "resources.cpus"),
    ({"pip": "numpy"}, "pip"),
    ({"max_retries_failure": -1}, "max_retries_failure"),
    ({"max_task_failures": True}, "max_task_failures"),
    ({"timeout_s": 0}, "timeout_s"),
    ({"scheduling_timeout_s": "1h"}, "scheduling_timeout_s"),
    ({"request_id": ""}, "request_id"),
    ({"parent": "/alice/unknown"}, "parent"),
    ({"replica": 2}, "replica"),
    ({"constraints": {"zones": {"us-a", "us-b"}}}, "constraints"),
    ({"constraints": {"x": float("nan")}}, "constraints"),
])
def test_validate_submit_bad_field_refused_naming_it(change, field):
    with pytest.raises(InvalidRequestError) as err:
        validate_submit({**_GOOD, **change})
    # the field, or a part of it (entrypoint.kind, env['A']): the schema names the part
    assert err.value.field == field or err.value.field.startswith((f"{field}.", f"{field}["))
    assert field.split(".")[-1] in str(err.value)


def test_validate_subjob_with_other_user_refused():
    parent = validate_submit(_GOOD)
    with pytest.raises(InvalidRequestError) as err:
        validate_submit({**_GOOD, "name": "c", "user": "mallory", "parent": parent.name},
                        parent=parent)
    assert err.value.field == "user"


def test_validate_submit_defaults_are_sane():
    s = validate_submit(_GOOD)
    assert s.name == "/alice/train" and s.replicas == 1 and s.num_tasks == 1
    assert s.priority == "interactive"
    assert (s.max_retries_failure, s.max_retries_preemption, s.max_task_failures) == (0, 100, 0)
    assert s.timeout_s is None and s.scheduling_timeout_s is None


def test_validate_submit_larger_than_any_scale_group_refused():
    def fits(res: Resources) -> str | None:
        if res.tpu and res.tpu_slice.chips > 64:
            return f"no scale group offers {res.tpu} (largest: v5litepod-64)"
        return None

    with pytest.raises(UnschedulableError) as err:
        validate_submit({**_GOOD, "resources": {"tpu": "v5litepod-128"}}, fits=fits)
    assert err.value.field == "resources" and "v5litepod-64" in str(err.value)
    ok = validate_submit({**_GOOD, "resources": {"tpu": "v5litepod-16"}}, fits=fits)
    assert ok.num_tasks == 4


def test_jobspec_round_trips_through_dict_with_payload():
    s = spec("f", entrypoint={"kind": "callable", "payload": b"\x80pickle"},
             resources=Resources(cpu=2, memory="16GB", gpu="H100", count=8).to_dict(),
             env={"X": "1"}, pip=["numpy"], constraints={"region": "us-central1"},
             request_id="r1", timeout_s=30)
    assert JobSpec.from_dict(s.to_dict(), s.entrypoint.payload) == s


def test_task_environment_single_host_has_iris_vars_and_user_env():
    s = spec("train", replicas=3, env={"LR": "0.1", "IRIS_JOB_ID": "spoofed"})
    env = task_environment(s, 2, "att-7", controller_address="tcp://10.0.0.1:5000")
    assert env == {"LR": "0.1", "IRIS_ADDRESS": "tcp://10.0.0.1:5000",
                   "IRIS_JOB_ID": "/alice/train", "IRIS_TASK_INDEX": "2",
                   "IRIS_NUM_TASKS": "3", "IRIS_ATTEMPT_ID": "att-7"}


def test_task_environment_gang_gets_jax_coordinator_per_gang():
    s = spec("tpu", resources={"tpu": "v5litepod-16"}, replicas=2)
    env = task_environment(s, 6, "att-1", controller_address="tcp://c:1",
                           coordinator_address="10.0.0.4:8476")
    assert gang_leader(s, 6) == 4
    assert (env["JAX_NUM_PROCESSES"], env["JAX_PROCESS_ID"]) == ("4", "2")
    assert env["JAX_COORDINATOR_ADDRESS"] == "10.0.0.4:8476"
    assert env["IRIS_NUM_TASKS"] == "8"
    with pytest.raises(ValueError, match="coordinator"):
        task_environment(s, 0, "att-1", controller_address="tcp://c:1")
