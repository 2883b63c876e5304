"""Layer 5: the web dashboard and /metrics, served by the controller process over HTTP."""

from iris.dashboard.launch import TOKEN_ENV, launch
from iris.dashboard.server import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DashboardHandle,
    PortInUseError,
    start_dashboard,
)

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "TOKEN_ENV", "DashboardHandle", "PortInUseError",
           "launch", "start_dashboard"]
