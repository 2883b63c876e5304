"""The checkpoint thread: takes checkpoints off the controller's turn. Not the policy (policy.py).

The controller never waits for a checkpoint. This thread wakes every POLL_S (or when
asked), reads the store's newest change with its own read-only connection, asks
`policy.decide`, and when one is due has a niced child process copy the database (SQLite
backup API: a read transaction, which in WAL mode holds no lock a writer needs) and
compress it (archive.pack_in_child), then uploads and prunes. The controller's thread shares
neither a lock nor the GIL with the heavy part; bench/checkpoint.py measures what is left.

Waiters: `request()` returns a ticket; `on_done(result, ticket)` is called after each
attempt with the newest ticket it covers (a checkpoint that *starts* after a request
holds every commit acknowledged before it). A durable submit is a request plus a wait.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from iris.base.clock import Clock
from iris.base.errors import IrisError
from iris.controller.checkpoint import policy
from iris.controller.checkpoint.archive import pack_in_child
from iris.controller.checkpoint.bucket import CheckpointBucket
from iris.controller.checkpoint.ownership import Lease
from iris.wire.states import DB_NAME

_log = logging.getLogger(__name__)

# Half a second between looks at the store: the burst trigger reacts within it, and one
# `SELECT MAX(seq)` on the primary key costs microseconds.
POLL_S = 0.5
# Patience per GCS request for the last checkpoint of a controller that is stopping.
FINAL_RETRY_S = 15.0
SCRATCH = "checkpoint-scratch"  # under the state dir: same disk, so no cross-device copy


class Checkpointer:
    """One per controller. `on_done(result, ticket)`: result is the manifest plus timings,
    or {"error": text}; called on this thread."""

    def __init__(self, state_dir: Path, bucket: CheckpointBucket, config: policy.PolicyConfig,
                 clock: Clock, on_done: Callable[[dict, int], None],
                 lease: Lease | None = None,
                 on_fenced: Callable[[str], None] | None = None):
        self._state_dir = Path(state_dir)
        self.bucket = bucket
        self.config = config
        self._clock = clock
        self._on_done = on_done
        self._lock = threading.Lock()
        self._policy = policy.PolicyState()
        self._tickets = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="iris-checkpoints", daemon=True)
        self._bundles_up: set[str] | None = None  # digests in GCS; listed on first use
        self.last: dict | None = None  # newest good checkpoint (manifest + timings)
        self.last_error: str | None = None
        # The prefix's ownership (ownership.py), claimed by `iris controller serve`; renewed
        # here. None (a Checkpointer used alone, in tests): no fencing.
        self._lease = lease
        if lease is not None:
            lease.keep_renewing(on_fenced)

    def start(self) -> Checkpointer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread; then, if anything changed since the newest checkpoint and GCS
        was answering, take a last one: a controller stopped on purpose (a VM moved by its
        operator) loses nothing. Then free the prefix for the next controller."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=180.0)  # an upload in flight finishes or times out
        with self._lock:
            state = self._policy
        if not (self.fenced or state.in_flight or state.failed_at is not None) \
                and self._changed_since(state.taken_seq):
            # At most FINAL_RETRY_S per GCS request: a controller stopping while GCS is down
            # exits within a minute or so instead of retrying each step for two.
            self.bucket = self.bucket.hurried(FINAL_RETRY_S)
            self.take("final")
        if self._lease is not None:
            self._lease.release(self._clock.wall())

    @property
    def fenced(self) -> str | None:
        return self._lease.fenced if self._lease is not None else None

    def _changed_since(self, taken_seq: int) -> bool:
        reader = _open_reader(self._state_dir / DB_NAME)
        try:
            return _newest_seq(reader) > taken_seq
        finally:
            reader.close()

    def request(self) -> int:
        """Ask for a checkpoint now; the ticket that `on_done` will cover."""
        with self._lock:
            self._tickets += 1
            self._policy = replace(self._policy, requested=True)
            ticket = self._tickets
        self._wake.set()
        return ticket

    def status(self) -> dict:
        owner = asdict(self._lease.owner) if self._lease is not None else None
        return {"where": self.bucket.where, "last": self.last, "last_error": self.last_error,
                "owner": owner, "fenced": self.fenced,
                "interval_s": self.config.interval_s,
                "after_changes": self.config.after_changes}

    # ------------------------------------------------------------ the thread

    def _run(self) -> None:
        reader = None
        try:
            while not self._stop.is_set():
                self._wake.wait(POLL_S)
                self._wake.clear()
                if self._stop.is_set():
                    break
                if self.fenced:
                    break  # another controller owns the prefix now: not a byte more
                try:
                    reader = reader or _open_reader(self._state_dir / DB_NAME)
                    self._maybe_take(_newest_seq(reader))
                except sqlite3.Error as exc:  # busy or briefly unreadable: look again soon
                    _log.warning("checkpoint thread cannot read the job store: %s", exc)
        finally:
            if reader is not None:
                reader.close()

    def _maybe_take(self, seq: int) -> None:
        now = self._clock.monotonic()
        with self._lock:
            why = policy.decide(self._policy, self.config, seq, now)
            if why is None:
                return
            self._policy = policy.started(self._policy)
            ticket = self._tickets
        result = self.take(why)
        with self._lock:
            self._policy = policy.finished(self._policy, result.get("seq"), now,
                                           self._clock.monotonic())
        self._on_done(result, ticket)

    def take(self, why: str) -> dict:
        """Take one checkpoint now, on the calling thread; never raises."""
        clock = self._clock
        name = policy.name_for(clock.wall())
        scratch = self._state_dir / SCRATCH / name
        t0 = clock.monotonic()
        try:
            scratch.mkdir(parents=True)
            archive = scratch / "state.tar.gz"
            manifest = pack_in_child(self._state_dir / DB_NAME, self._state_dir, archive, name,
                            clock.wall())
            t1 = clock.monotonic()
            self._ship_bundles()  # first: no checkpoint in GCS names a bundle not there
            if self._lease is not None:  # still the owner? (FencedError: nothing written)
                self._lease.renew(clock.wall())
                manifest["epoch"] = self._lease.owner.epoch  # a restore prefers the highest
            self.bucket.put(archive, manifest)
            t2 = clock.monotonic()
        except (IrisError, OSError, sqlite3.Error, ValueError) as exc:
            self.last_error = f"checkpoint {name} failed: {exc}"
            _log.warning("%s (%s); retrying in %.0f s", self.last_error, why,
                         self.config.retry_s)
            return {"error": self.last_error}
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        result = {**manifest, "why": why, "pack_s": round(t1 - t0, 3),
                  "upload_s": round(t2 - t1, 3), "where": self.bucket.where}
        self.last, self.last_error = result, None
        _log.info("checkpoint %s (%s): %d jobs, %d bytes, %.2f s pack + %.2f s upload", name,
                  why, manifest["jobs"], manifest["bytes"], t1 - t0, t2 - t1)
        self._prune()
        return result

    def _ship_bundles(self) -> None:
        """Workspace bundles (state_dir/bundles, written before any job naming them was
        accepted) not yet in GCS. Each is uploaded once."""
        local = self._state_dir / "bundles"
        if not local.is_dir():
            return
        if self._bundles_up is None:
            self._bundles_up = self.bucket.bundle_digests()
        for path in sorted(local.glob("*.tar.gz")):
            digest = path.name.split(".")[0]
            if digest not in self._bundles_up:
                self.bucket.put_bundle(path)
                self._bundles_up.add(digest)

    def _prune(self) -> None:
        try:
            listed = self.bucket.list()
            generations = {m["name"]: m["generation"] for m in listed}
            for name in policy.to_prune(list(generations), self.config):
                self.bucket.delete(name, generations[name])
        except IrisError as exc:  # the next checkpoint prunes again
            _log.warning("pruning old checkpoints failed: %s", exc)


def _open_reader(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True)


def _newest_seq(reader: sqlite3.Connection) -> int:
    return reader.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]
