"""Iris: actors and jobs on preemptible accelerator fleets, over ZeroMQ."""
