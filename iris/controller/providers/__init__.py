"""Providers: what creates, deletes and lists slices (GCP TPU, Slurm, Kubernetes, local,
simulated); `factory.make_provider` picks one for a region of a cluster config."""

__all__ = ["base", "factory", "gcp_tpu", "kubernetes", "local", "simulated", "slurm"]
