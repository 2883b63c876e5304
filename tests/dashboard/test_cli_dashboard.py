"""`iris cluster start --local` serves the dashboard and prints its URL."""

from __future__ import annotations

from tests.dashboard.conftest import http, wait_until


def _start(child_process, *extra: str):
    argv = ", ".join(repr(a) for a in ["cluster", "start", "--local", "--workers", "1", *extra])
    server = child_process("import sys; from iris.cli import main; "
                           f"print('READY', flush=True); sys.exit(main([{argv}]))")
    server.wait_ready()
    lines = [server.proc.stdout.readline() for _ in range(3)]
    assert lines[0].startswith("cluster running at tcp://127.0.0.1:"), lines
    assert lines[2].strip().startswith("dashboard: http://127.0.0.1:"), lines
    return server, lines[2].split()[1]


def test_cluster_start_prints_a_dashboard_url_that_shows_its_worker(child_process):
    server, url = _start(child_process, "--dashboard-port", "0")

    def one_worker():
        status, body = http(url + "api/workers")
        return status == 200 and len(body["groups"]) == 1 and body["groups"][0]["workers"]

    (worker,) = wait_until(one_worker, "the local worker on the dashboard")
    assert worker["health"] == "healthy"
    assert http(url)[0] == 200
    server.stop()  # its workers first, then the controller


def test_cluster_start_on_a_non_loopback_dashboard_host_without_token_refuses(child_process):
    argv = ["cluster", "start", "--local", "--workers", "0", "--dashboard-port", "0",
            "--dashboard-host", "0.0.0.0"]
    server = child_process("import os, sys; os.environ.pop('IRIS_DASHBOARD_TOKEN', None); "
                           f"from iris.cli import main; sys.exit(main({argv!r}))")
    assert server.proc.wait(timeout=120) == 2
    assert "not loopback: pass a token" in server.proc.stderr.read()
