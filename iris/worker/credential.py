"""A worker's own credential, kept in its work directory (0600) across restarts of its process.

Not the issuing (controller/credentials.py). A worker joins with the cluster token and gets
its credential (it speaks as itself with it) and the controller's command token for it (the
only token its start/stop/drain and inspector methods accept). Both are written here so
that a restarted worker process, its watchdog (`worker_crashed`) and its preemption notice
speak as this worker without joining again; the file names the worker and the controller,
and is ignored for any other. A refused credential stays until a join replaces it: the
worker shows it at that join (`proof`), so a restarted controller, which keeps only
hashes of credentials, gives its id to it and to no stranger.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

FILE = "credential"
# A join refused for good (an operator barred this id; or the token is wrong) is tried
# again after 30 s, then twice as long each time up to 10 min: a barred host asks the
# controller ~6 times an hour, not every heartbeat, and one let back in (its line removed,
# the controller restarted) is back within 10 min.
BARRED_RETRY_S, BARRED_RETRY_MAX_S = 30.0, 600.0


@dataclass(frozen=True)
class Credential:
    worker_id: str
    controller: str  # the controller's address that issued it
    credential: bytes  # presented on this worker's calls ("worker" role, naming it)
    command_token: bytes  # what the controller presents on its commands here


def from_answer(answer: dict, controller: str) -> Credential:
    """The controller's answer to `join`, checked."""
    try:
        cred = Credential(str(answer["worker_id"]), controller, bytes(answer["credential"]),
                          bytes(answer["command_token"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the controller's join answer is malformed: {exc}") from exc
    if not cred.credential or not cred.command_token:
        raise ValueError("the controller's join answer holds an empty credential")
    return cred


def write(root: Path, cred: Credential) -> None:
    path = Path(root) / FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"worker_id": cred.worker_id, "controller": cred.controller,
                   "credential": cred.credential.hex(),
                   "command_token": cred.command_token.hex()}, f)
    os.replace(tmp, path)


def read(root: Path, worker_id: str | None = None, controller: str | None = None
         ) -> Credential | None:
    """The credential kept in `root`, if it is this worker's for this controller."""
    try:
        raw = json.loads((Path(root) / FILE).read_text())
        cred = Credential(raw["worker_id"], raw["controller"], bytes.fromhex(raw["credential"]),
                          bytes.fromhex(raw["command_token"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if (worker_id is not None and cred.worker_id != worker_id) or \
            (controller is not None and cred.controller != controller):
        return None
    return cred


@dataclass
class Rejoin:
    """What a worker without a credential brings to its next join, and when it may ask:
    the credential it held (a restarted controller, which keeps only hashes, gives the id
    to its holder alone), and after joins refused for good, a wait (barred_backoff)."""

    held: bytes | None = None  # the credential this worker held, if any
    refusals: int = 0  # joins refused for good in a row
    after: float = 0.0  # monotonic s: no join before

    @classmethod
    def start(cls, root: Path, worker_id: str, cred: Credential | None) -> Rejoin:
        """At start: none needed while `cred` (this controller's) is held; else the one
        kept for another address (a local cluster restarted on its state dir, new port)."""
        kept = read(root, worker_id) if cred is None else None
        return cls(kept.credential if kept is not None else None)

    def proof(self) -> tuple[bytes, ...]:
        """The join's extra arguments: the credential held, or none."""
        return () if self.held is None else (self.held,)

    def barred(self, now: float) -> float:
        """A join refused for good at `now`: the seconds until the next may be made."""
        self.refusals += 1
        wait_s = barred_backoff(self.refusals)
        self.after = now + wait_s
        return wait_s


def barred_backoff(refusals: int) -> float:
    """Seconds to wait before joining again after `refusals` joins refused for good."""
    return min(BARRED_RETRY_MAX_S, BARRED_RETRY_S * 2 ** min(refusals - 1, 16))
