"""Fixtures the controller's checkpoint tests share: a real fake-gcs-server (one per test
module) and a fresh bucket prefix per test, reached through the real client."""

from __future__ import annotations

import pytest

from iris.controller.checkpoint.bucket import CheckpointBucket
from tests.logstore.conftest import FakeGcs, _server


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    yield from _server(tmp_path_factory)


@pytest.fixture
def bucket(gcs: FakeGcs) -> CheckpointBucket:
    return CheckpointBucket(gcs.new_bucket(), "iris/state", client=gcs.client())
