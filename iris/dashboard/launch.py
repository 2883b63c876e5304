"""Starting the dashboard for the command line: defaults, the token from the environment, and
a fallback, reported, when the default port is taken. Not the server (server.py)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from iris.actors import Node
from iris.dashboard.server import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DashboardHandle,
    PortInUseError,
    start_dashboard,
)

TOKEN_ENV = "IRIS_DASHBOARD_TOKEN"
"""The token comes from the environment, not a flag: flags show in `ps` to every local user."""


def launch(node: Node, address: str, state_dir: str | Path | None = None, *,
           host: str = DEFAULT_HOST, port: int | None = None,
           scale_groups: list[dict] | None = None,
           environ: Mapping[str, str] = os.environ) -> DashboardHandle:
    """Start the dashboard as `iris controller serve` / `iris cluster start --local` do.

    `port` None: DEFAULT_PORT, or a free port if another process holds it (two local
    clusters on one laptop should both start); the handle's `note` then says so, and the
    CLI prints it next to the address. An explicit port that is taken is an error.
    """
    token = environ.get(TOKEN_ENV) or None
    if port is not None:
        return start_dashboard(node, address, state_dir, host=host, port=port, token=token,
                               scale_groups=scale_groups)
    try:
        return start_dashboard(node, address, state_dir, host=host, port=DEFAULT_PORT,
                               token=token, scale_groups=scale_groups)
    except PortInUseError:
        moved = start_dashboard(node, address, state_dir, host=host, port=0, token=token,
                                scale_groups=scale_groups)
        return dataclasses.replace(moved, note=(
            f"port {DEFAULT_PORT} is taken by another process, so the dashboard is on "
            f"{moved.port}; choose one with --dashboard-port"))
