"""Logs of a job the cluster never ran are an error naming it, through the API and the CLI
alike (they were an empty list: a typo read as a job that printed nothing); a job the
controller no longer knows but whose logs the store kept (pruned: here, a controller with a
fresh state over the same log store) still gives them. Real clusters, real processes."""

from __future__ import annotations

import importlib
import json

import pytest

import iris
from iris.base.errors import NotFoundError
from iris.client.job_handle import JobHandle
from iris.logstore.config import LogStoreConfig

pytestmark = pytest.mark.slow
cli_main = importlib.import_module("iris.cli.main")  # the module; iris.cli.main is the function


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli_main.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_logs_of_a_job_that_never_existed_is_an_error_naming_it(tmp_path, capsys):
    with iris.local_cluster(workers=0, state_dir=tmp_path) as ctx:
        with pytest.raises(NotFoundError, match="/nobody/nosuch-1"):
            JobHandle("/nobody/nosuch-1", ctx).logs()  # at the call, not at the first line
        capsys.readouterr()
        as_status = _cli(capsys, "--address", ctx.address, "job", "status", "/nobody/nosuch-1",
                         "--json")
        as_logs = _cli(capsys, "--address", ctx.address, "job", "logs", "/nobody/nosuch-1",
                       "--json")
        follow = _cli(capsys, "--address", ctx.address, "job", "logs", "-f",
                      "/nobody/nosuch-1")
    assert as_status[0] != 0 and as_logs[0] == as_status[0] and follow[0] == as_status[0]
    said = json.loads(as_logs[1])
    assert "/nobody/nosuch-1" in said["error"] and set(said) == set(json.loads(as_status[1]))
    assert "/nobody/nosuch-1" in as_logs[2] and "/nobody/nosuch-1" in follow[2]


def test_logs_of_a_job_the_controller_forgot_are_still_read_from_the_store(tmp_path, capsys):
    store = LogStoreConfig(kind="local", root=str(tmp_path / "logs"))
    with iris.local_cluster(workers=1, state_dir=tmp_path / "before", log_store=store):
        job = iris.submit(["echo", "kept words"])
        job.wait(timeout=120)
        job_id = job.job_id
    with iris.local_cluster(workers=0, state_dir=tmp_path / "after", log_store=store) as ctx:
        with pytest.raises(NotFoundError):
            JobHandle(job_id, ctx).status()  # this controller never heard of it
        lines = [ln.text for ln in JobHandle(job_id, ctx).logs(follow=True)]
        capsys.readouterr()
        code, out, err = _cli(capsys, "--address", ctx.address, "job", "logs", job_id)
    assert lines == ["kept words"]
    assert code == 0 and "kept words" in out, err
