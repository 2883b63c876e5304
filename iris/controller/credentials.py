"""Worker credentials: one per worker, so that a worker speaks only as itself; and the
command tokens with which the controller alone commands each worker.

Not the check (actors/hosting.py refuses a call whose role the method does not name, or
whose credential names another worker than the call does). A worker joins with the
cluster token (`Controller.join`) and gets two secrets of its own:
- its credential: 32 random bytes, granted the "worker" role at the controller's node,
  naming the worker's id: its register, report, goodbye, crash and notice calls must name
  that id. Revoked when the worker leaves (goodbye, an operator's drain ends in one; its
  watchdog's crash call), when it is lost, and by `iris worker revoke`; a revoked worker is
  refused at its very next call, and may join again unless an operator revoked it (banned:
  `STATE_DIR/revoked_workers`, one id a line; delete the line to let it back).
- its command token: 32 random bytes, new at each join, presented by the controller on the
  commands it sends that worker (start_attempt, stop_attempt, drain, its inspector); the
  worker grants it the "controller" role (and revokes the one before). Not derived from
  the id: a host that joins under an id while its credential is free (the moment after a
  controller restart, a lost worker) gets a token that the real worker, joining again,
  never accepts. No other worker holds it.
An id gets a new credential only while no live worker holds one (heard from in the last
LIVE_S): another host holding the cluster token cannot take over a live worker's identity.
Credentials are kept in memory only: after a controller restart every worker's calls are
refused once, and it joins again (as it registers again anyway); until it has, the
controller holds no command token for it (and no registration to command).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iris.actors import tokens
from iris.base.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
)

# A worker heard from (or given its credential) this recently is live: its id is not
# issued again (as a second registration under a live id is refused: workers.py).
LIVE_S = 5.0
# A credential never used to register lasts this long (a registration held back by
# admission control comes back within ~20 s at 10,000 hosts).
JOIN_GRACE_S = 60.0
BANNED_FILE = tokens.REVOKED_WORKERS_FILE
MAX_ID_LEN = 256  # as control.py bounds a worker id on the wire
# Credentials held at once: the fleet (10,000 hosts in bench.fleet) and its joins in flight,
# with room. A host holding the cluster token joining under ever new ids meets this bound
# (refused for load) until the sweep reclaims the ids it never registered (JOIN_GRACE_S).
MAX_HELD = 50_000

Grant = Callable[[bytes, str, str], None]
Revoke = Callable[[bytes], None]


def controller_token(secret: bytes) -> bytes:
    """The controller's own token: the "controller" role at its node (a Region served in
    another process would be given it); never handed to a worker."""
    return hmac.new(secret, b"iris-controller", hashlib.sha256).digest()


class Credentials:
    """Who holds which credential; grants and revokes them at the controller's node."""

    def __init__(self, state_dir: Path, grant: Grant, revoke: Revoke,
                 max_held: int = MAX_HELD):
        self._max_held = max_held
        self._grant, self._revoke = grant, revoke
        # worker id -> (credential, command token, issued)
        self._held: dict[str, tuple[bytes, bytes, float]] = {}
        self._banned_file = Path(state_dir) / BANNED_FILE
        self.banned = _read_banned(self._banned_file)

    def __len__(self) -> int:
        return len(self._held)

    def command_token(self, worker_id: str) -> bytes | None:
        """What the controller presents on its commands to `worker_id`; None while it holds
        no credential (the worker refuses the command; it joins again anyway)."""
        held = self._held.get(worker_id)
        return held[1] if held is not None else None

    def issue(self, worker_id: str, now: float, heard_s_ago: float | None,
              address: str = "") -> dict:
        """A new credential for `worker_id` (its old one revoked): refused for a banned id
        and for one a live worker holds. `heard_s_ago`, `address`: the registered worker's
        silence and address, if one is registered."""
        check_id(worker_id)
        if worker_id in self.banned:
            raise PermissionDeniedError(
                f"worker {worker_id!r} was revoked by an operator (iris worker revoke): it "
                f"may not join again (remove it from {self._banned_file} to let it back)")
        held = self._held.get(worker_id)
        if held is not None and ((heard_s_ago is not None and heard_s_ago < LIVE_S)
                                 or now - held[2] < LIVE_S):
            where = f" at {address}" if address else ""
            raise ConflictError(
                f"worker id {worker_id} is live{where}; a second worker cannot join under "
                f"it (do two workers share one --work-dir? a restarted worker joins once "
                f"the old one is silent for {LIVE_S:g} s)")
        if worker_id not in self._held and len(self._held) >= self._max_held:
            raise OverloadedError(
                f"{self._max_held} worker credentials are held (ids joined and not yet "
                f"registered are reclaimed {JOIN_GRACE_S:g} s after joining): retry later",
                retry_after_s=10.0)
        self.revoke(worker_id)
        credential, command = secrets.token_bytes(32), secrets.token_bytes(32)
        self._held[worker_id] = (credential, command, now)
        self._grant(credential, tokens.WORKER, worker_id)
        return {"worker_id": worker_id, "credential": credential, "command_token": command}

    def join(self, worker_id: str, info: Any, now: float) -> dict:
        """A host joining under `worker_id` (`info`: the worker registered under it, if
        any): `issue`, refused while that worker is live."""
        check_id(worker_id)
        if info is None:
            return self.issue(worker_id, now, None)
        return self.issue(worker_id, now, now - info.last_heard, info.address)

    def ended(self, worker_id: str, address: str, info: Any) -> None:
        """The worker process at `address` ended: its credential ends with it, unless the
        worker already registered again elsewhere (`info`: as registered now; a restarted
        process on the same work dir, whose credential file the old one's watchdog reads)."""
        if info is None or info.address == address:
            self.revoke(worker_id)

    def revoke_by_operator(self, worker_id: str, registered: bool) -> None:
        """`iris worker revoke`: revoked and banned; NotFoundError for an id neither
        registered nor holding a credential."""
        check_id(worker_id)
        held = worker_id in self.banned or self.revoke(worker_id)
        if not registered and not held:
            raise NotFoundError(f"worker_id: no worker {worker_id!r} is registered "
                                "(iris worker list names them)")
        self.ban(worker_id)

    def revoke(self, worker_id: str) -> bool:
        """Its credential holds no role from now on; True if it held one."""
        held = self._held.pop(worker_id, None)
        if held is not None:
            self._revoke(held[0])
        return held is not None

    def ban(self, worker_id: str) -> None:
        """Revoked for good: the id may not join again (kept across restarts)."""
        check_id(worker_id)
        self.revoke(worker_id)
        if worker_id not in self.banned:
            self.banned.add(worker_id)
            with open(self._banned_file, "a") as f:
                f.write(worker_id + "\n")

    def sweep(self, registered: dict, now: float) -> list[str]:
        """Revoke the credentials of workers that are not registered (lost, gone) and were
        issued more than JOIN_GRACE_S ago; the ids revoked."""
        stale = [w for w, (_, _, at) in self._held.items()
                 if w not in registered and now - at > JOIN_GRACE_S]
        for worker_id in stale:
            self.revoke(worker_id)
        return stale


def check_id(worker_id: object) -> str:
    """A worker id is printable text without spaces, at most MAX_ID_LEN characters: it is
    an actor's key, a log word and one line of the banned file (an id holding a newline
    would bar two ids there after a restart)."""
    if not isinstance(worker_id, str) or not 0 < len(worker_id) <= MAX_ID_LEN or \
            not worker_id.isprintable() or any(c.isspace() for c in worker_id):
        raise InvalidRequestError(
            f"worker_id: {str(worker_id)[:80]!r} is not a worker id (1-{MAX_ID_LEN} printable "
            "characters, no spaces)", "worker_id")
    return worker_id


def _read_banned(path: Path) -> set[str]:
    try:
        return {line.strip() for line in path.read_text().splitlines() if line.strip()}
    except FileNotFoundError:
        return set()


def grant_roles(grant: Callable[[bytes, str], None], state_dir: Path) -> None:
    """Roles at the controller's node (docs/protocol.md): a host joins with the cluster
    token and then speaks with its own credential; operators hold the admin token; the
    controller's secret is its own. All live in the state directory across restarts."""
    state_dir = Path(state_dir)
    grant(tokens.load_or_create(state_dir / tokens.CLUSTER_TOKEN_FILE), tokens.MEMBER)
    grant(tokens.load_or_create(state_dir / tokens.ADMIN_TOKEN_FILE), tokens.ADMIN)
    grant(controller_token(load_secret(state_dir)), tokens.CONTROLLER)


def load_secret(state_dir: Path) -> bytes:
    """The controller's secret (made 0600 on first use)."""
    return tokens.load_or_create(Path(state_dir) / tokens.CONTROLLER_SECRET_FILE)


__all__ = ["Credentials", "check_id", "controller_token", "grant_roles", "load_secret"]
