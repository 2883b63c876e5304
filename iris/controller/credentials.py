"""Worker credentials: one per worker, so that a worker speaks only as itself; and the
command tokens with which the controller alone commands each worker.

Not the check (actors/admission.py refuses a call whose role the method does not name, or
whose credential names another worker than the call does). A worker joins with the
cluster token (`Controller.join`) and gets two secrets of its own:
- its credential: 32 random bytes, granted the "worker" role at the controller's node,
  naming the worker's id: its register, report, goodbye, crash and notice calls must name
  that id. Revoked when the worker leaves (goodbye, an operator's drain ends in one; its
  watchdog's crash call), when it is lost, and by `iris worker revoke`; a revoked worker is
  refused at its very next call, told its credential was revoked (the node keeps the last
  MAX_HELD revoked ones under the "revoked" role, which no method names), and may join
  again unless an operator revoked it (barred: `STATE_DIR/revoked_workers`, one id a line;
  delete the line and restart the controller to let it back).
- its command token: 32 random bytes, new at each join, presented by the controller on the
  commands it sends that worker (start_attempt, stop_attempt, drain, its inspector); the
  worker grants it the "controller" role (and revokes the one before). Not derived from
  the id: a host that joins under an id while its credential is free (a lost worker) gets
  a token that the real worker, joining again, never accepts. No other worker holds it.
An id held by a registered worker gets a new credential only with that credential as
proof, until the worker is lost (silent for worker_dead_after_s, its credential revoked):
another host holding the cluster token cannot take over a worker's identity, live or
merely silent (a 6 s blip let any host join under the id and revoke the worker). An id
joined and not registered is issued again once LIVE_S old (a join whose answer was lost).
Which credential owns which id survives a controller restart (credential_log.py keeps the
sha256 of each, never the credential): the restarted controller knows no credential
itself, so every worker's calls are refused once and it joins again, proving it held its
id's credential (`proof`); until then, or until JOIN_GRACE_S after the restart (then the
sweep frees ids no worker claimed: lost), a join under that id with the cluster token
alone is refused. Command tokens are not kept: a worker has one again once it has joined.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from iris.actors import tokens
from iris.actors.holders import Holder
from iris.base.errors import (
    ConflictError,
    InvalidRequestError,
    OverloadedError,
    PermissionDeniedError,
)
from iris.controller.credential_log import CredentialLog, verifier

# A worker heard from (or given its credential) this recently is live: its id is not
# issued again (as a second registration under a live id is refused: workers.py).
LIVE_S = 5.0
# A credential never used to register lasts this long (a registration held back by
# admission control comes back within ~20 s at 10,000 hosts).
JOIN_GRACE_S = 60.0
BANNED_FILE = tokens.REVOKED_WORKERS_FILE
_SECRET_LEN = 32  # bytes of a credential and of a command token
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


def attempt_proof(secret: bytes, job: str, task: int, attempt: str) -> str:
    """What proves a task attempt to the registry ($IRIS_ATTEMPT_PROOF, holders.py): an
    HMAC of its job, task and attempt, so a process holding one attempt's proof cannot
    claim another's names, nor another job's."""
    message = f"iris-attempt\n{job}\n{task}\n{attempt}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def proof_verifier(secret: bytes | Callable[[], bytes]) -> Callable[[Holder, str | None], bool]:
    """The registry's check of a holder's proof (holders.Verify). `secret` may be a function
    giving it, called at the first check: the controller checks its config before it writes
    anything to its state directory, the secret included."""
    known: list[bytes] = [secret] if isinstance(secret, bytes) else []

    def verify(holder: Holder, proof: str | None) -> bool:
        if not known:
            known.append(secret())
        return proof is not None and hmac.compare_digest(
            attempt_proof(known[0], holder.job, holder.task, holder.attempt).encode(),
            proof.encode())
    return verify


class _Held(NamedTuple):
    credential: bytes | None  # None: issued before a restart (only its sha256 is known)
    command: bytes | None  # the command token; None likewise
    issued: float  # monotonic s; for one restored, when this controller started


class Credentials:
    """Who holds which credential; grants and revokes them at the controller's node, and
    keeps which credential owns which id in the state directory (credential_log.py)."""

    def __init__(self, state_dir: Path, grant: Grant, revoke: Revoke,
                 max_held: int = MAX_HELD, now: float = 0.0):
        self._max_held = max_held
        self._grant, self._revoke = grant, revoke
        self._banned_file = Path(state_dir) / BANNED_FILE
        self.banned = _read_banned(self._banned_file)
        self._log = CredentialLog(state_dir)
        for worker_id in self.banned & set(self._log.held):  # a ban cut short by a crash
            self._log.revoked(worker_id)
        self._held = {w: _Held(None, None, now) for w in self._log.held}
        self._revoked: dict[bytes, None] = {}  # oldest first: the node names them revoked

    def __len__(self) -> int:
        return len(self._held)

    def command_token(self, worker_id: str) -> bytes | None:
        """What the controller presents on its commands to `worker_id`; None while it holds
        no credential (the worker refuses the command; it joins again anyway)."""
        held = self._held.get(worker_id)
        return held.command if held is not None else None

    def issue(self, worker_id: str, now: float, heard_s_ago: float | None,
              address: str = "", proof: bytes | None = None) -> dict:
        """A new credential for `worker_id` (its old one revoked): refused for a barred id,
        for one a registered worker holds (until it is lost) and for one held since before
        a restart, unless `proof` is that credential. `heard_s_ago`, `address`: the
        registered worker's silence and address, if one is registered."""
        check_id(worker_id)
        if proof is not None and (type(proof) is not bytes or len(proof) != _SECRET_LEN):
            raise InvalidRequestError(f"proof: a credential is {_SECRET_LEN} bytes, not "
                                      f"{str(proof)[:40]!r}", "proof")
        if worker_id in self.banned:
            raise PermissionDeniedError(
                f"worker {worker_id!r} was revoked by an operator (iris worker revoke): it "
                f"may not join again (remove it from {self._banned_file} and restart the "
                "controller to let it back)")
        held = self._held.get(worker_id)
        if held is not None:
            self._check_free(worker_id, held, now, heard_s_ago, address, proof)
        elif len(self._held) >= self._max_held:
            raise OverloadedError(
                f"{self._max_held} worker credentials are held (ids joined and not yet "
                f"registered are reclaimed {JOIN_GRACE_S:g} s after joining): retry later",
                retry_after_s=10.0)
        self.revoke(worker_id)
        credential, command = secrets.token_bytes(_SECRET_LEN), secrets.token_bytes(_SECRET_LEN)
        self._held[worker_id] = _Held(credential, command, now)
        self._log.issued(worker_id, verifier(credential))
        self._grant(credential, tokens.WORKER, worker_id)
        return {"worker_id": worker_id, "credential": credential, "command_token": command}

    def join(self, worker_id: str, info: Any, now: float, proof: bytes | None = None) -> dict:
        """A host joining under `worker_id` (`info`: the worker registered under it, if
        any): `issue`, refused while that worker is live, and for an id held since before
        a restart unless `proof` is the credential it was issued."""
        check_id(worker_id)
        if info is None:
            return self.issue(worker_id, now, None, proof=proof)
        return self.issue(worker_id, now, now - info.last_heard, info.address, proof)

    def ended(self, worker_id: str, address: str, info: Any) -> None:
        """The worker process at `address` ended: its credential ends with it, unless the
        worker already registered again elsewhere (`info`: as registered now; a restarted
        process on the same work dir, whose credential file the old one's watchdog reads)."""
        if info is None or info.address == address:
            self.revoke(worker_id)

    def revoke_by_operator(self, worker_id: str, registered: bool) -> str:
        """`iris worker revoke`: revoked and barred, whether or not it is still known (lost
        over a minute ago, or never joined: barred all the same). What it was:
        "registered", "joined" (holding a credential) or "unknown"."""
        held = self.ban(worker_id)
        return "registered" if registered else "joined" if held else "unknown"

    def _check_free(self, worker_id: str, held: _Held, now: float,
                    heard_s_ago: float | None, address: str, proof: bytes | None) -> None:
        """ConflictError unless `worker_id`'s credential may be replaced now."""
        live = heard_s_ago is not None and heard_s_ago < LIVE_S
        if not live and proof is not None and hmac.compare_digest(
                verifier(proof), self._log.held.get(worker_id, b"")):
            return  # its holder, joining again (after a restart, after a refusal)
        if not live and held.credential is None:
            raise ConflictError(
                f"worker id {worker_id} holds a credential issued before the controller "
                f"restarted: only the worker holding it may join under it (it proves so), "
                f"or anyone once it is {JOIN_GRACE_S:g} s unclaimed (lost)")
        where = f" at {address}" if address else ""
        if live or now - held.issued < LIVE_S:
            raise ConflictError(
                f"worker id {worker_id} is live{where}; a second worker cannot join under "
                f"it (do two workers share one --work-dir? a restarted worker keeps its "
                f"credential in its work dir, or joins once the old one is lost)")
        if heard_s_ago is not None:  # registered: silent is not gone (a blip costs nothing)
            raise ConflictError(
                f"worker id {worker_id} is registered{where} and silent for "
                f"{heard_s_ago:.0f} s: only the host holding its credential may join under "
                f"it (showing it as proof), any other once it is lost")

    def revoke(self, worker_id: str) -> bool:
        """Its credential holds no role from now on; True if it held one."""
        held = self._held.pop(worker_id, None)
        if held is None:
            return False
        self._log.revoked(worker_id)
        if held.credential is not None:  # named as revoked at the node, not as a client
            self._grant(held.credential, tokens.REVOKED, worker_id)
            self._revoked[held.credential] = None
            if len(self._revoked) > self._max_held:
                oldest = next(iter(self._revoked))
                del self._revoked[oldest]
                self._revoke(oldest)
        return True

    def ban(self, worker_id: str) -> bool:
        """Revoked for good: the id may not join again (kept across restarts); True if it
        held a credential. The bar is on disk before the credential is revoked."""
        check_id(worker_id)
        if worker_id not in self.banned:
            with open(self._banned_file, "a") as f:
                f.write(worker_id + "\n")
                f.flush()
                os.fsync(f.fileno())
            self.banned.add(worker_id)
        return self.revoke(worker_id)

    def sweep(self, registered: dict, now: float) -> list[str]:
        """Revoke the credentials of workers that are not registered (lost, gone, or not
        back since a restart) and were issued more than JOIN_GRACE_S ago; the ids revoked.
        What was written is fsynced (credential_log.SYNC_EVERY_S)."""
        stale = [w for w, held in self._held.items()
                 if w not in registered and now - held.issued > JOIN_GRACE_S]
        for worker_id in stale:
            self.revoke(worker_id)
        self._log.sync()
        return stale

    def close(self) -> None:
        self._log.close()


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


__all__ = ["Credentials", "attempt_proof", "check_id", "controller_token", "grant_roles",
           "load_secret", "proof_verifier"]
