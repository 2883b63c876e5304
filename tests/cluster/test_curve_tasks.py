"""On a cluster with CURVE on (off loopback, bench/_netns.py: the worker on a host of its
own), a task reaches the cluster itself: `iris.submit` and `iris.list_actors` from inside a
task dial the controller with the keys its worker holds. Before, a task's environment had no
keys and every such call failed the CURVE handshake."""

from __future__ import annotations

import sys

import pytest

import iris
from bench import _netns

pytestmark = pytest.mark.slow

# A command (the namespace has no route to a package index for a job venv) whose Python
# reaches the cluster from inside the task: a sub-job, and the registry's names.
INSIDE = """
import iris
with iris.connect():
    child = iris.submit(["true"], name="child")
    print("child", child.wait(timeout=120)["state"], "names", type(iris.list_actors()).__name__)
"""


def test_a_task_on_a_curve_cluster_submits_and_lists_through_it(tmp_path, monkeypatch):
    why_not = _netns.available()
    if why_not:
        pytest.skip(f"{why_not} (scripts/test.sh runs as root and installs iproute2)")
    with _netns.cluster(tmp_path) as net:
        monkeypatch.setenv("IRIS_KEYS_DIR", str(net.keys))
        with iris.connect(net.address):
            job = iris.submit([sys.executable, "-c", INSIDE], max_retries_failure=0)
            state = job.wait(timeout=180)["state"]
            out = "\n".join(line.text for line in job.logs())
            assert state == "succeeded", out
            assert "child succeeded names list" in out
