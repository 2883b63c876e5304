"""`iris controller serve` serves the dashboard and prints its URL (after its address line).

Needs the `on_start` hook of run_controller (iris/controller/main.py, the lead's file) and the
CLI lines that use it: /tmp/dashboard-controller-serve.patch. Skipped until the hook exists.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from iris.controller.main import run_controller
from tests.dashboard.conftest import http

pytestmark = pytest.mark.skipif(
    "on_start" not in inspect.signature(run_controller).parameters,
    reason="run_controller has no on_start hook yet, so `iris controller serve` cannot start "
    "the dashboard (patch in the dashboard report)")


def test_controller_serve_prints_a_dashboard_url_that_answers(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "iris", "controller", "serve",
                             "--state-dir", str(tmp_path / "state"), "--dashboard-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("controller serving at"), first
        line = proc.stdout.readline()
        assert line.strip().startswith("dashboard: http://127.0.0.1:"), line
        url = line.split()[1]
        status, body = http(url + "api/jobs")
        assert status == 200 and body["total"] == 0
        status, text = http(url + "metrics")
        assert status == 200 and "iris_jobs" in text
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0


_PROBE = """
import socket, sys, time
from iris.actors import Node, NodeConfig
from iris.dashboard import start_dashboard
node = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
dash = start_dashboard(node, node.address, sys.argv[1], port=0)
print("at start", "aiohttp" in sys.modules, flush=True)
with socket.create_connection((dash.host, dash.port), timeout=30):
    deadline = time.monotonic() + 60
    while "aiohttp.web" not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.05)
print("after a connection", "aiohttp.web" in sys.modules, flush=True)
dash.stop()
node.stop()
"""


def test_dashboard_imports_aiohttp_at_its_first_connection_not_at_start(tmp_path):
    """A controller no one browses never pays aiohttp's import (issue 33); the port is
    bound from the start, and the first connection brings the routes up."""
    done = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path)], capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["at start False", "after a connection True"], \
        done.stdout


_STOPS = """
import gc, socket, sys, urllib.request
from iris.actors import Node, NodeConfig
from iris.dashboard import start_dashboard
node = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
for _ in range(3):  # nobody browses: stopped while waiting for a first connection
    start_dashboard(node, node.address, sys.argv[1], port=0).stop()
    gc.collect()  # where asyncio reports a task's exception nobody retrieved
dash = start_dashboard(node, node.address, sys.argv[1], port=0)
with socket.create_connection((dash.host, dash.port), timeout=30) as s:  # first: not HTTP
    s.sendall(b"\\x16\\x03\\x01 not http\\r\\n\\r\\n")
    print(s.recv(100).split(b"\\r\\n")[0].decode(), flush=True)
with urllib.request.urlopen(dash.url, timeout=60) as r:
    print(r.status, flush=True)
dash.stop()
gc.collect()
node.stop()
"""


def test_dashboard_stopped_unbrowsed_or_after_a_malformed_first_request_logs_no_error(
        tmp_path):
    """A controller's dashboard nobody opened stops quietly (it logged asyncio's "Task
    exception was never retrieved ... Invalid file descriptor" at every stop); a first
    request that is not HTTP gets a 400 and the next one its page."""
    done = subprocess.run([sys.executable, "-c", _STOPS, str(tmp_path)], capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["HTTP/1.0 400 Bad Request", "200"], done.stdout
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr, \
        done.stderr


_NO_AIOHTTP = """
import logging, socket, sys
logging.basicConfig(level=logging.ERROR)
sys.modules["aiohttp"] = None  # an install without it: its import fails at first connection
from iris.actors import Node, NodeConfig
from iris.dashboard import start_dashboard
node = Node(NodeConfig(bind="tcp://127.0.0.1:0")).start()
dash = start_dashboard(node, node.address, sys.argv[1], port=0)
with socket.create_connection((dash.host, dash.port), timeout=60) as s:
    s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
    try:
        print("answered", s.recv(100) != b"", flush=True)
    except ConnectionResetError:
        print("answered False", flush=True)
dash.stop()
node.stop()
"""


def test_dashboard_that_cannot_load_its_pages_says_so_and_refuses_browsers(tmp_path):
    done = subprocess.run([sys.executable, "-c", _NO_AIOHTTP, str(tmp_path)],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:1] == ["answered False"], done.stdout
    assert "dashboard: cannot serve its pages (ModuleNotFoundError" in done.stderr, done.stderr
