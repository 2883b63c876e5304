"""Controller state that outlives its machine: checkpoints of the job store in GCS.

Import the modules themselves (settings.CheckpointSettings, ...): this package imports none,
so the checkpoint packing child (pack.py) loads the standard library and nothing else."""

__all__: list[str] = []
