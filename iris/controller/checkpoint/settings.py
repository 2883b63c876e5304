"""Where checkpoints go and how often: read from a cluster config's `storage:` section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from iris.controller.checkpoint.policy import PolicyConfig

if TYPE_CHECKING:  # google-cloud-storage is imported only by controllers that checkpoint
    from iris.controller.checkpoint.bucket import CheckpointBucket


@dataclass(frozen=True)
class CheckpointSettings:
    bucket: str  # GCS bucket name, no gs://
    prefix: str  # checkpoints go under PREFIX/controller-state/
    policy: PolicyConfig = PolicyConfig()
    client: Any = None  # a google-cloud-storage client; None: storage.Client() (environment)
    # The ownership.Lease `iris controller serve` claimed on this prefix before serving; the
    # checkpoint thread renews it. None: no fencing (a controller hosted by a test).
    lease: Any = None

    def open(self) -> CheckpointBucket:
        from iris.controller.checkpoint.bucket import CheckpointBucket

        return CheckpointBucket(self.bucket, self.prefix, self.client)


def from_storage(storage: Any) -> CheckpointSettings | None:
    """From a config.StorageConfig; None when it names no snapshot bucket."""
    if storage is None or not storage.snapshot_bucket:
        return None
    return CheckpointSettings(storage.snapshot_bucket, storage.snapshot_prefix, PolicyConfig(
        interval_s=storage.snapshot_interval_s, after_changes=storage.snapshot_after_changes,
        min_gap_s=storage.snapshot_min_gap_s, keep=storage.snapshot_keep,
        keep_days=storage.snapshot_keep_days))
