"""Providers: what creates, deletes and lists slices (GCP TPU, simulated; local comes later)."""

__all__ = ["base", "gcp_tpu", "simulated"]
