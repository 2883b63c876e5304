"""Layer 5: the web dashboard and /metrics, served by the controller process over HTTP."""

from iris.dashboard.server import DEFAULT_HOST, DEFAULT_PORT, DashboardHandle, start_dashboard

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "DashboardHandle", "start_dashboard"]
