"""The day-trace simulator behind bench.daytrace: trace (format, generated day), work
(jobs and the checkpoint rule), hosts, cluster (one scheduling domain through the real
kernels), world (the day on a fake clock), figures (summary, upper bound, plot)."""

__all__: list[str] = []
