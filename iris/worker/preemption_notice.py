"""The cloud's preemption notice on GCE: watch the metadata server, tell the controller at once.

Not the stopping of attempts (the controller sends the stops, with the time left as grace)
nor the callbacks (task_runtime runs them, reading the notice file written here). GCE
announces the end of a VM on its metadata server: `instance/preempted` turns TRUE 30 s
before a preemptible or spot VM is stopped, and `instance/maintenance-event` turns
TERMINATE_ON_HOST_MAINTENANCE 60 s before a host event that stops it (MIGRATE_... is a live
migration: nothing to do). Without the notice the controller learns of the loss only after
its heartbeat timeout, and the tasks lose what they had not checkpointed.

One thread per key does the metadata server's hanging GET (`?wait_for_change=true`, with
the last ETag), as Google's own agents do, so the notice arrives within one round trip.
On notice: the notice (reason, deadline) is written into every attempt directory (the
attempt's `iris.on_preempt` callbacks read it: see task_runtime.py), then the controller is
told (`preemption_notice`, worker role), which requeues this worker's work on the
preemption budget and stops the attempts with the time left as their grace.

The metadata address is `$GCE_METADATA_HOST` (host[:port]), as in google-auth, else
169.254.169.254. Mode "auto" watches on a GCE machine (its DMI product name says so), when
$GCE_METADATA_HOST is set, or when a probe of the server is answered as GCE answers; "gce"
always; "off" never.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from iris.base.clock import SYSTEM_CLOCK, Clock
from iris.base.errors import ConfigError, IrisError

_log = logging.getLogger(__name__)
MODES = ("auto", "gce", "off")
ENV_METADATA_HOST = "GCE_METADATA_HOST"
_DEFAULT_HOST = "169.254.169.254"
_DMI_PRODUCT = Path("/sys/class/dmi/id/product_name")
NOTICE_FILE = "preemption_notice.json"  # in each attempt directory; task_runtime reads it
# Time between the notice and the power-off, from GCE's documentation: 30 s for a
# preemptible/spot stop, 60 s for a host maintenance event that terminates the VM.
PREEMPTED_NOTICE_S = 30.0
MAINTENANCE_NOTICE_S = 60.0
# A hanging GET returns after this long without a change (the server's timeout_sec); a
# minute keeps the idle cost to one request per key per minute.
HANG_S = 60.0
# Mode auto off GCE hardware: the metadata server is link-local and answers in < 10 ms when
# it exists; 1 s bounds the probe where 169.254.169.254 is a black hole.
_PROBE_S = 1.0
# After a failed GET: wait, doubling up to the cap (a metadata server restarting).
_RETRY_INITIAL_S, _RETRY_MAX_S = 1.0, 30.0


@dataclass(frozen=True)
class Notice:
    """The cloud will take this machine: why, and by when (wall-clock seconds)."""

    reason: str  # "GCE instance/preempted=TRUE"
    deadline: float  # wall clock (Unix seconds) by which the VM is gone

    def time_left(self, now: float) -> float:
        return max(0.0, self.deadline - now)


def notice_from(key: str, value: str, now: float) -> Notice | None:
    """Pure: the notice a metadata value means, or None ("FALSE", "NONE", a migration)."""
    value = value.strip()
    if key == "preempted" and value.upper() == "TRUE":
        return Notice(f"GCE instance/preempted={value}", now + PREEMPTED_NOTICE_S)
    if key == "maintenance-event" and value.startswith("TERMINATE"):
        return Notice(f"GCE instance/maintenance-event={value}", now + MAINTENANCE_NOTICE_S)
    return None


def metadata_url() -> str:
    host = os.environ.get(ENV_METADATA_HOST) or _DEFAULT_HOST
    return f"http://{host}/computeMetadata/v1"


def on_gce() -> bool:
    """What mode "auto" asks: a metadata server is named, or this is a GCE machine."""
    if os.environ.get(ENV_METADATA_HOST):
        return True
    try:
        return "Google" in _DMI_PRODUCT.read_text()
    except OSError:
        return False


def _listening(base_url: str) -> bool:
    """Something accepts connections where the metadata server would be."""
    where = urllib.parse.urlsplit(base_url)
    try:
        socket.create_connection((where.hostname, where.port or 80), timeout=_PROBE_S).close()
    except OSError:
        return False
    return True


class NoticeWatcher:
    """Hanging GETs on instance/preempted and instance/maintenance-event; `on_notice` is
    called once, on a watcher thread, with the first notice either key gives."""

    KEYS = ("preempted", "maintenance-event")

    def __init__(self, on_notice: Callable[[Notice], None], *, base_url: str | None = None,
                 clock: Clock = SYSTEM_CLOCK, hang_s: float = HANG_S):
        self._on_notice = on_notice
        self._base = (base_url or metadata_url()).rstrip("/")
        self._clock = clock
        self._hang_s = hang_s
        self._stop = threading.Event()
        self._fired = threading.Lock()
        self.notice: Notice | None = None
        self._threads = [threading.Thread(target=self._watch, args=(key,), daemon=True,
                                          name=f"preemption-notice-{key}")
                         for key in self.KEYS]

    def start(self) -> NoticeWatcher:
        for thread in self._threads:
            thread.start()
        return self

    def start_if_answering(self) -> None:
        """Watch only if a metadata server answers as GCE's does (mode auto, off GCE's own
        hardware: a container on a GCE VM sees no DMI name but does reach the server)."""
        if not _listening(self._base):
            return  # nothing there (most hosts): no HTTP client loaded for nothing
        import urllib.request  # here: ~40 ms of CPU that a worker off GCE does not pay

        request = urllib.request.Request(f"{self._base}/instance/id",
                                         headers={"Metadata-Flavor": "Google"})
        try:
            with urllib.request.urlopen(request, timeout=_PROBE_S) as reply:
                answered = reply.headers.get("Metadata-Flavor") == "Google"
        except OSError:  # urllib's URLError is one
            answered = False
        if answered and not self._stop.is_set():
            _log.info("watching %s for preemption notices", self._base)
            self.start()

    def stop(self) -> None:
        """Stop watching; a GET in flight ends by itself within hang_s (daemon threads)."""
        self._stop.set()

    def _watch(self, key: str) -> None:
        etag, retry = None, _RETRY_INITIAL_S
        while not self._stop.is_set():
            try:
                value, etag = self._get(key, etag)
            except OSError as exc:  # urllib's URLError is one
                _log.info("metadata %s: %s (again in %.0f s)", key, exc, retry)
                self._stop.wait(retry)
                retry = min(retry * 2, _RETRY_MAX_S)
                continue
            retry = _RETRY_INITIAL_S
            notice = notice_from(key, value, self._clock.wall())
            if notice is not None and not self._stop.is_set():
                self._fire(notice)
                return

    def _get(self, key: str, etag: str | None) -> tuple[str, str | None]:
        """The key's value and ETag; the first GET answers at once (a notice given before
        this worker started still counts), later ones hang until the value changes."""
        import urllib.request

        url = f"{self._base}/instance/{key}"
        if etag is not None:
            url += f"?wait_for_change=true&timeout_sec={int(self._hang_s)}&last_etag={etag}"
        request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(request, timeout=self._hang_s + 10) as reply:
            return reply.read().decode("utf-8", "replace"), reply.headers.get("ETag") or ""

    def _fire(self, notice: Notice) -> None:
        if not self._fired.acquire(blocking=False):
            return  # the other key noticed first: one notice per machine
        self.notice = notice
        self._stop.set()
        _log.warning("preemption notice: %s, %.0f s left", notice.reason,
                     notice.time_left(self._clock.wall()))
        self._on_notice(notice)


def write_notice_files(attempts_root: Path, notice: Notice) -> list[Path]:
    """Put the notice in every attempt directory, before any of them is told to stop.

    The first notice stays: a later one is the stop the first caused (Slurm's SIGTERM also
    reaches the worker, whose own "worker stopping" notice follows within milliseconds), and
    a task that reads its notice after both must still be told the cause."""
    written = []
    if not attempts_root.is_dir():
        return written
    data = json.dumps(asdict(notice))
    for attempt_dir in sorted(p for p in attempts_root.iterdir() if p.is_dir()):
        path = attempt_dir / NOTICE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(data)
        try:
            os.link(tmp, path)  # whole or absent (the task may read it at any moment); once
        except FileExistsError:
            continue
        finally:
            tmp.unlink()
        written.append(path)
    return written


def read_notice(attempt_dir: str | Path) -> Notice | None:
    """The notice written into an attempt directory, or None (a plain stop)."""
    try:
        data = json.loads((Path(attempt_dir) / NOTICE_FILE).read_text())
        return Notice(reason=str(data["reason"]), deadline=float(data["deadline"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class NoticeResponder:
    """What a worker does on notice: the notice files, then the controller, at once."""

    def __init__(self, node: Any, controller: str, controller_key: str, worker_id: str,
                 root: Path, token: bytes | None, clock: Clock = SYSTEM_CLOCK):
        self._node, self._controller, self._key = node, controller, controller_key
        self._worker_id, self._root, self._token, self._clock = worker_id, root, token, clock

    def __call__(self, notice: Notice, timeout_s: float = 10.0) -> bool:
        """True once the controller has the notice (it then stops the attempts itself)."""
        write_notice_files(self._root / "attempts", notice)
        # As this worker: its own credential (credential.py); the cluster token only buys one.
        from iris.worker import credential  # here: tasks import this module (read_notice) bare

        held = credential.read(self._root, self._worker_id, self._controller)
        token = held.credential if held is not None else (self._token or self._discover_token())
        try:
            answer = self._node.call(
                self._controller, self._key, "preemption_notice",
                (self._worker_id, self._node.address, notice.reason,
                 notice.time_left(self._clock.wall())),
                timeout_s=timeout_s, auth=token).result()
        except IrisError as exc:  # the heartbeat timeout will requeue the work instead
            _log.error("notice (%s) not delivered to the controller: %s", notice.reason, exc)
            return False
        _log.warning("controller requeued %d attempts on the notice (%s)",
                     len(answer["requeued"]), notice.reason)
        return True

    def _discover_token(self) -> bytes | None:
        """As the Worker does on the controller's own host: from the state dir it names."""
        from iris.actors import tokens  # here: tasks import this module (read_notice) bare

        try:
            state_dir = self._node.call(self._controller, self._key, "state_dir",
                                        timeout_s=5.0).result()
            return tokens.read(Path(state_dir) / tokens.CLUSTER_TOKEN_FILE)
        except (IrisError, TypeError) as exc:
            _log.warning("no cluster token for the preemption notice: %s", exc)
            return None


def start_watching(mode: str, responder: Callable[[Notice], None]) -> NoticeWatcher | None:
    """The watcher `mode` asks for (see the module docstring), started; None when off."""
    if mode not in MODES:
        raise ConfigError(f"--preemption-notice: must be one of {', '.join(MODES)}, "
                          f"got {mode!r}")
    if mode == "off":
        return None
    watcher = NoticeWatcher(responder)
    if mode == "auto" and not on_gce():  # ask the server, off the worker's start-up path
        threading.Thread(target=watcher.start_if_answering, daemon=True,
                         name="preemption-notice-probe").start()
        return watcher
    _log.info("watching %s for preemption notices", metadata_url())
    return watcher.start()


__all__ = ["MODES", "NOTICE_FILE", "Notice", "NoticeWatcher", "metadata_url", "notice_from",
           "NoticeResponder", "on_gce", "read_notice", "start_watching", "write_notice_files"]
