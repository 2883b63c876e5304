"""Choosing and installing a checkpoint when a controller starts. Not taking them (runner.py).

`stage(state_dir, bucket, choice, now)` runs before the controller claims its checkpoint
prefix and opens its store; `commit()` (once the prefix is claimed) returns the line `iris
controller serve` prints first (`prepare` does both):

    choice None (default)  restore the newest checkpoint if the state dir has no job store
                           yet (a new VM); keep the local store if it has one (it is newer)
    "latest"               restore the newest checkpoint, even over a local store
    NAME                   restore that one (a rollback when it is not the newest)
    "none"                 start from whatever is local, empty if nothing (--no-restore)

Nothing is replaced until the chosen archive is downloaded and checked whole (size, sha256,
SQLite's integrity check, schema version) in a scratch directory; a bad one raises
StorageError and leaves the state dir as it was. A local store that a restore replaces is
moved aside to `replaced-<name>/`, never deleted.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from iris.actors import tokens
from iris.base.errors import NotFoundError, StorageError
from iris.controller.checkpoint import policy
from iris.controller.checkpoint.archive import MEMBERS, unpack
from iris.controller.checkpoint.bucket import CheckpointBucket
from iris.controller.jobs.store import JobStore
from iris.wire.states import DB_NAME

_SIDE_FILES = ("-wal", "-shm")  # a WAL database is these plus the main file


def prepare(state_dir: Path, bucket: CheckpointBucket, choice: str | None, now: float) -> str:
    """`stage`, then `commit`: the line to print first."""
    return stage(state_dir, bucket, choice, now).commit()


@dataclass
class Staged:
    """A restore decided and, if it installs a checkpoint, downloaded and checked whole in a
    scratch directory: `commit` puts it in place and returns the line to print; `discard`
    leaves the state dir as it was (the caller could not claim the prefix)."""

    line: str
    fetched: _Fetched | None = None

    def commit(self) -> str:
        if self.fetched is not None:
            self.fetched.put_in_place()
            self.fetched = None
        return self.line

    def discard(self) -> None:
        if self.fetched is not None:
            shutil.rmtree(self.fetched.scratch, ignore_errors=True)
            self.fetched = None


def stage(state_dir: Path, bucket: CheckpointBucket, choice: str | None, now: float) -> Staged:
    """Every refusal (no such checkpoint, a corrupt, truncated or newer-schema one) raises
    here, before anything outside the scratch directory changes."""
    state_dir = Path(state_dir)
    has_local = (state_dir / DB_NAME).exists()
    if choice == "none":
        return Staged(f"controller not restoring (--no-restore): "
                      f"{'using the job store in ' + str(state_dir) if has_local else 'starting empty'}"
                      f"; checkpoints go to {bucket.where}")
    if choice is None and has_local:
        return Staged(f"controller using the job store in {state_dir} (newer than any "
                      f"checkpoint; --restore NAME rolls back); checkpoints go to "
                      f"{bucket.where}")
    listed = [m for m in bucket.list() if "error" not in m]
    if choice is None and not listed:
        return Staged(f"controller starting empty: no checkpoint in {bucket.where} yet (a new "
                      "cluster); checkpoints go there")
    name = _pick(listed, choice, bucket.where)
    fetched = _fetch(state_dir, bucket, name, now)
    manifest = fetched.manifest
    taken = datetime.fromtimestamp(manifest["taken_at"], UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    newest = _newest(listed) if listed else name
    rollback = "" if name == newest else f"; a ROLLBACK: {newest} is newer"
    return Staged(f"controller restored checkpoint {name} from {bucket.where} (taken {taken}, "
                  f"{max(now - manifest['taken_at'], 0):.0f} s ago; {manifest['jobs']} jobs"
                  f"{rollback}); work acknowledged after it was not in it: clients holding "
                  "such jobs resubmit them by request id", fetched)


def _pick(listed: list[dict], choice: str | None, where: str) -> str:
    if choice in (None, "latest"):
        if not listed:
            raise NotFoundError(f"no checkpoint in {where}: nothing to restore (check "
                                "storage.snapshot_bucket and snapshot_prefix, or start with "
                                "--no-restore)")
        return _newest(listed)
    try:
        policy.time_of(choice)
    except ValueError as exc:
        raise StorageError(f"--restore: {exc}") from exc
    if choice not in {m["name"] for m in listed}:
        names = ", ".join(m["name"] for m in listed[-5:]) or "none"
        raise NotFoundError(f"no checkpoint {choice} in {where} (newest: {names})")
    return choice


def _newest(listed: list[dict]) -> str:
    """The newest checkpoint of the newest owner (ownership.py): a controller fenced while
    uploading may land one with a later time than its successor's first; it is not newer."""
    return max(listed, key=lambda m: (m.get("epoch", 0), m["name"]))["name"]


def install(state_dir: Path, bucket: CheckpointBucket, name: str, now: float) -> dict:
    """Download, check, and put checkpoint `name` where the controller reads its state."""
    fetched = _fetch(Path(state_dir), bucket, name, now)
    fetched.put_in_place()
    return fetched.manifest


@dataclass
class _Fetched:
    """Checkpoint `name`, downloaded and checked in `scratch`, not yet in place."""

    state_dir: Path
    scratch: Path
    name: str
    manifest: dict
    db: Path

    def put_in_place(self) -> None:
        try:
            bundles = self.scratch / "bundles"
            if bundles.is_dir():
                (self.state_dir / "bundles").mkdir(parents=True, exist_ok=True)
                for path in sorted(bundles.iterdir()):
                    os.replace(path, self.state_dir / "bundles" / path.name)
            _move_aside(self.state_dir, self.name)
            unpacked = self.db.parent
            for member in MEMBERS:
                if (unpacked / member).exists():
                    os.replace(unpacked / member, self.state_dir / member)
            for suffix in _SIDE_FILES:  # closed cleanly: normally gone; if not, they go too
                if self.db.with_name(DB_NAME + suffix).exists():
                    os.replace(self.db.with_name(DB_NAME + suffix),
                               self.state_dir / (DB_NAME + suffix))
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _fetch(state_dir: Path, bucket: CheckpointBucket, name: str, now: float) -> _Fetched:
    state_dir.mkdir(parents=True, exist_ok=True)
    scratch = state_dir / f".restore-{name}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    try:
        archive = scratch / "state.tar.gz"
        manifest = bucket.get(name, archive)
        unpacked = scratch / "unpacked"
        unpacked.mkdir()
        db = unpack(archive, manifest, unpacked)
        with JobStore(unpacked) as store:  # migrates an older schema, here, not in place
            store.record_lineage("restored", {"checkpoint": name, "from": bucket.where,
                                              "taken_at": manifest["taken_at"],
                                              "seq": manifest["seq"]}, now)
        _fetch_bundles(bucket, scratch / "bundles", state_dir / "bundles")
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return _Fetched(state_dir, scratch, name, manifest, db)


def _fetch_bundles(bucket: CheckpointBucket, scratch: Path, bundles: Path) -> None:
    """The workspace bundles jobs refer to that this disk lacks, into scratch (moved into
    place with the rest, so a failed download leaves no half file where the controller
    serves bundles from)."""
    missing = sorted(d for d in bucket.bundle_digests() if not (bundles / f"{d}.tar.gz").exists())
    if not missing:
        return
    scratch.mkdir()
    for digest in missing:
        bucket.get_bundle(digest, scratch / f"{digest}.tar.gz")


def _move_aside(state_dir: Path, name: str) -> None:
    """The local store (and tokens) a restore replaces go to replaced-<name>/, whole."""
    present = [f for f in (DB_NAME, *(DB_NAME + s for s in _SIDE_FILES),
                           tokens.CLUSTER_TOKEN_FILE, tokens.ADMIN_TOKEN_FILE,
                           tokens.CONTROLLER_SECRET_FILE, tokens.REVOKED_WORKERS_FILE,
                           tokens.WORKER_CREDENTIALS_FILE)
               if (state_dir / f).exists()]
    if not present:
        return
    aside = state_dir / f"replaced-{name}"
    n = 1
    while aside.exists():
        aside, n = state_dir / f"replaced-{name}-{n}", n + 1
    aside.mkdir()
    for f in present:
        os.replace(state_dir / f, aside / f)
