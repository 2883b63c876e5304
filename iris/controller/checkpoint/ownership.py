"""Which controller owns a checkpoint prefix: a lease in one GCS object, so that two
controllers pointed at one prefix never both write its checkpoints (split brain: a stale one
would put an older past above the newest, and a restore would pick it).

`PREFIX/controller-state/OWNER` holds who owns the prefix (host, state dir, pid, epoch) and
when it last renewed. Every write names the generation it read (`if_generation_match`), so
of two controllers racing, exactly one wins, and an owner whose object was taken over learns
it on its next renewal or checkpoint and stops (`FencedError`): it never uploads again.
Checkpoints carry the epoch of the owner that took them, and a restore prefers the highest.

Rules (`may_claim`, pure), crash told apart from silence by renewal, not by guessing:
- no owner, or one that released the prefix on a clean stop: claim it;
- the same controller restarted (same host and state dir; its pid changed): claim it at once;
- another controller whose address refuses connections: nothing serves there (it was killed
  and its port is closed): claim it at once, so a replacement adopts running work before
  workers' own leases (15 s) lapse;
- another controller that renewed within LEASE_S and may be listening: wait (showing why)
  until it renews, which proves it alive (refused, naming it), or stays silent for LEASE_S
  (presumed dead, a lost VM: claimed); `--take-over` claims at once (the other is fenced on
  its next renewal). A wrong "dead" is safe: the owner is fenced on its next renewal.

Times are the writers' wall clocks: cloud VMs keep NTP time, and LEASE_S dwarfs their skew.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from iris.base.errors import ConflictError, IrisError, StorageError

_log = logging.getLogger(__name__)

# An owner renews every RENEW_S; one silent for LEASE_S is presumed gone. A replacement VM
# waits at most LEASE_S after its predecessor died (a VM takes longer than that to boot), and
# four renewals must fail in a row before a second controller may step in beside a live one.
RENEW_S = 5.0
LEASE_S = 20.0
OWNER_OBJECT = "OWNER"


class FencedError(StorageError):
    """Another controller took this prefix over: this one must stop writing (and serving)."""


@dataclass(frozen=True)
class Owner:
    host: str
    state_dir: str
    pid: int
    address: str = ""  # what workers dial (tcp://host:port): probed to tell a dead owner
    epoch: int = 0  # +1 on every claim: which owner this is, in order
    renewed_at: float = 0.0  # wall seconds
    released: bool = False  # stopped cleanly: the next controller need not wait

    @classmethod
    def me(cls, state_dir: Any, address: str = "") -> Owner:
        return cls(socket.gethostname(), os.path.abspath(str(state_dir)), os.getpid(), address)

    def same_controller(self, other: Owner) -> bool:
        return (self.host, self.state_dir) == (other.host, other.state_dir)

    def describe(self, now: float) -> str:
        return (f"the controller on {self.host} (state dir {self.state_dir}, pid {self.pid}), "
                f"renewed {max(now - self.renewed_at, 0):.0f} s ago")


def may_claim(current: Owner | None, me: Owner, now: float, take_over: bool) -> str | None:
    """None if `me` may claim the prefix now; otherwise who holds it (a live-looking owner:
    the caller waits to see whether it renews)."""
    if current is None or current.released or current.same_controller(me) or take_over:
        return None
    if now - current.renewed_at >= LEASE_S:
        return None
    return f"{current.describe(now)} owns these checkpoints"


def alive_refusal(current: Owner, now: float) -> str:
    return (f"{current.describe(now)} owns these checkpoints and is alive (it renewed while "
            "this one waited): stop it first, or start this one with --take-over (the other "
            f"then stops within {RENEW_S:.0f} s)")


def refuses_connections(address: str) -> bool:
    """True when a TCP connect to `address` (tcp://host:port) is refused: no process
    listens there. A timeout or an unreachable host proves nothing (a partition): False."""
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    if not host or not port.isdigit() or host in ("0.0.0.0", "*") or port == "0":
        return False
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=2.0).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


def encode(owner: Owner) -> bytes:
    return json.dumps(asdict(owner), sort_keys=True).encode()


def decode(data: bytes, where: str) -> Owner:
    try:
        raw = json.loads(data)
        return Owner(str(raw["host"]), str(raw["state_dir"]), int(raw["pid"]),
                     str(raw.get("address", "")), int(raw.get("epoch", 0)),
                     float(raw.get("renewed_at", 0.0)), bool(raw.get("released", False)))
    except (ValueError, TypeError, KeyError) as exc:
        raise StorageError(f"{where}: not an Iris owner record ({exc}); delete it if no "
                           "controller uses this prefix") from exc


class Lease:
    """This controller's hold on a prefix. `bucket` is a CheckpointBucket (read_owner,
    write_owner); every method may raise StorageError (GCS unreachable)."""

    def __init__(self, bucket: Any, owner: Owner, generation: int):
        self._bucket = bucket
        self.owner = owner
        self._generation = generation
        self._write = threading.Lock()  # the renewing thread and the checkpoint thread
        self._stopped = threading.Event()
        self.fenced: str | None = None

    @classmethod
    def claim(cls, bucket: Any, me: Owner, take_over: bool = False,
              wall: Callable[[], float] = time.time,
              say: Callable[[str], None] = _log.warning,
              sleep: Callable[[float], None] = time.sleep,
              waiting: Callable[[str], None] | None = None) -> Lease:
        """Claim the prefix, waiting up to LEASE_S to tell a dead owner from a live one;
        ConflictError naming a live owner. `say` gets what the claim found, `waiting` (else
        `say`) the line shown while it waits."""
        data, generation = bucket.read_owner()
        current = _decode_at(bucket, data)
        held = may_claim(current, me, wall(), take_over)
        if held and refuses_connections(current.address):
            say(f"{held}, but nothing answers at {current.address}: presumed dead")
            held = None
        if held:
            (waiting or say)(f"{held}; waiting up to {LEASE_S:.0f} s to see whether it is "
                             "alive")
            deadline = current.renewed_at + LEASE_S
            while wall() < deadline:
                sleep(min(1.0, max(deadline - wall(), 0.0)))
                data, now_generation = bucket.read_owner()
                if now_generation != generation:
                    renewed = _decode_at(bucket, data)
                    if renewed is None or renewed.released:
                        current, generation = renewed, now_generation
                        break
                    raise ConflictError(f"{bucket.where}: {alive_refusal(renewed, wall())}")
        now = wall()
        mine = replace(me, epoch=(current.epoch + 1) if current else 1, renewed_at=now)
        try:
            new_generation = bucket.write_owner(encode(mine), generation)
        except FencedError as exc:
            raise ConflictError(f"{bucket.where}: another controller claimed these "
                                "checkpoints at the same moment; start again") from exc
        if current is not None and not current.released and not current.same_controller(me):
            say(f"took over {bucket.where} from {current.describe(now)}")
        return cls(bucket, mine, new_generation)

    def keep_renewing(self, on_fenced: Callable[[str], None] | None) -> None:
        """Renew every RENEW_S on a thread of its own (a long checkpoint upload must not
        let the lease lapse); once fenced, call `on_fenced(why)` and stop."""
        def run() -> None:
            while not self._stopped.wait(RENEW_S):
                try:
                    self.renew(time.time())
                except FencedError as exc:
                    _log.critical("%s", exc)
                    if on_fenced is not None:
                        on_fenced(str(exc))
                    return
                except IrisError as exc:  # GCS unreachable: the lease holds LEASE_S
                    _log.warning("renewing the checkpoint lease failed: %s", exc)

        threading.Thread(target=run, name="iris-checkpoint-lease", daemon=True).start()

    def renew(self, now: float) -> None:
        """Extend the lease; FencedError if another controller owns the prefix now."""
        with self._write:
            self._renew(now)

    def _renew(self, now: float) -> None:
        if self.fenced:
            raise FencedError(self.fenced)
        renewed = replace(self.owner, renewed_at=now)
        try:
            self._generation = self._bucket.write_owner(encode(renewed), self._generation)
        except FencedError:
            # A retried write whose first try landed also fails its precondition: the
            # record there is then our own.
            data, generation = self._bucket.read_owner()
            there = _decode_at(self._bucket, data)
            if there != renewed:
                self.fenced = self._why_fenced(there, now)
                raise FencedError(self.fenced) from None
            self._generation = generation
        self.owner = renewed

    def release(self, now: float) -> None:
        """A clean stop: stop renewing and mark the prefix free, so the next controller
        need not wait."""
        self._stopped.set()
        with self._write:
            if self.fenced:
                return
            try:
                self._bucket.write_owner(encode(replace(self.owner, renewed_at=now,
                                                        released=True)), self._generation)
            except StorageError as exc:  # it lapses by itself after LEASE_S
                _log.warning("could not release %s: %s", self._bucket.where, exc)

    def _why_fenced(self, other: Owner | None, now: float) -> str:
        who = other.describe(now) if other else "another controller"
        return (f"{who} took over the checkpoints in {self._bucket.where} (epoch "
                f"{other.epoch if other else '?'}; this one held epoch {self.owner.epoch}): "
                "this controller stops so that only one serves the cluster")


def _decode_at(bucket: Any, data: bytes | None) -> Owner | None:
    return decode(data, bucket.where + OWNER_OBJECT) if data is not None else None
