"""A gang's start commands built from parts shared by its tasks (controller/launch.py) equal
each one built alone, and every task still gets its own variables over the job's `env`."""

from __future__ import annotations

from iris.controller.jobs import events as ev
from iris.controller.launch import launch, namespace
from iris.controller.workers import WorkerInfo
from iris.logstore.config import LogStoreConfig
from tests.controller.test_job_support import Harness, spec


def _workers(n: int) -> dict[str, WorkerInfo]:
    return {f"w{i}": WorkerInfo(f"w{i}", f"tcp://10.0.{i // 4}.{i % 4}:9000", "r1", {},
                                8.0, 2**33, 4, 0.0, 0.0) for i in range(n)}


def _starts(h: Harness, job: str, n: int) -> list[ev.StartAttempt]:
    effects = h.send(ev.Assign(h.eid(), tuple(ev.Placement(job, i, f"w{i}", f"a{i}")
                                              for i in range(n))))
    return [e for e in effects if isinstance(e, ev.StartAttempt)]


def test_a_two_slice_gangs_starts_from_shared_parts_equal_each_built_alone():
    h = Harness()
    job = h.submit(spec("ms", resources={"tpu": "v5litepod-16", "count": 2},
                        env={"LR": "0.1", "IRIS_JOB_ID": "spoofed", "JAX_PROCESS_ID": "7",
                             "TPU_WORKER_ID": "9"}))
    starts = _starts(h, job, 8)
    workers, logs = _workers(8), LogStoreConfig(root="/tmp/logs")
    shared: dict = {}
    together = [launch(h.state, workers, s, "tcp://c:1", logs, 0, shared) for s in starts]
    alone = [launch(h.state, workers, s, "tcp://c:1", logs) for s in starts]
    assert len(together) == 8 and together == alone
    assert len({id(m.env) for m in together}) == 8  # each task's own dict
    for i, msg in enumerate(together):
        env = msg.env
        assert (env["IRIS_JOB_ID"], env["IRIS_TASK_INDEX"], env["IRIS_ATTEMPT_ID"]) == \
            (job, str(i), f"a{i}")
        assert (env["JAX_PROCESS_ID"], env["TPU_WORKER_ID"]) == (str(i), str(i % 4))
        assert env["MEGASCALE_SLICE_ID"] == str(i // 4) and env["LR"] == "0.1"
        assert env["TPU_WORKER_HOSTNAMES"] == ",".join(f"10.0.{i // 4}.{k}" for k in range(4))
        assert env["JAX_COORDINATOR_ADDRESS"].startswith("10.0.0.0:")
        assert env["IRIS_NAMESPACE"] == namespace(job)
        assert env["IRIS_ACCELERATOR"] == "v5litepod-16"


def test_tasks_of_a_job_without_gangs_share_parts_but_not_their_own_variables():
    h = Harness()
    job = h.submit(spec("plain", replicas=3, env={"IRIS_TASK_INDEX": "spoofed"}))
    starts = _starts(h, job, 3)
    workers, logs = _workers(3), LogStoreConfig(root="/tmp/logs")
    shared: dict = {}
    together = [launch(h.state, workers, s, "tcp://c:1", logs, 5, shared) for s in starts]
    assert together == [launch(h.state, workers, s, "tcp://c:1", logs, 5) for s in starts]
    assert [m.env["IRIS_TASK_INDEX"] for m in together] == ["0", "1", "2"]
    assert not any(k.startswith("JAX_") for k in together[0].env)
