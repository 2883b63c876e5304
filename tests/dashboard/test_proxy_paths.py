"""Reading /proxy/JOB/TASK/PORT/... (pure): a job id percent-encoded as one segment or as
plain segments, digits in job names, and paths that name no port."""

from __future__ import annotations

import pytest

from iris.base.errors import NotFoundError
from iris.dashboard.proxy import Where, parse


def test_an_encoded_job_id_is_one_segment():
    assert parse("/proxy/%2Falice%2Ftrain/0/http/a/b?x=1") == \
        Where("/alice/train", 0, "http", "/a/b")


def test_plain_segments_end_at_the_first_task_index_followed_by_a_port_name():
    assert parse("/proxy/alice/sweep/7/3/tb/") == Where("/alice/sweep/7", 3, "tb", "/")
    assert parse("/proxy/alice/train/0/http") == Where("/alice/train", 0, "http", "/")


@pytest.mark.parametrize("path", ["/proxy/alice", "/proxy/alice/train/http/",
                                  "/proxy/%2Falice%2Ftrain/x/http/", "/proxy/%2Fa"])
def test_a_path_that_names_no_task_and_port_is_not_found(path):
    with pytest.raises(NotFoundError, match="proxy path"):
        parse(path)
