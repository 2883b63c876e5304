"""Controller state that outlives its machine: checkpoints of the job store in GCS."""

from iris.controller.checkpoint.settings import CheckpointSettings, from_storage

__all__ = ["CheckpointSettings", "from_storage"]
