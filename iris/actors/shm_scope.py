"""Which processes may share memory segments with this one: those on the same boot of the
same host and in the same PID namespace (a receiver opens the sender's memfd as
/proc/<pid>/fd/<fd>). Identities, the DEALER routing id that carries ours to every callee,
and the checks on both sides. Not the segments themselves (shm.py).
"""

from __future__ import annotations

import hashlib
import os


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


BOOT_ID = _boot_id()
# A receiver opens the sender's memfd as /proc/<sender pid>/fd/<fd>: only a process in the
# same PID namespace (on the same boot of the same host) names the sender by that pid.
# Containers that share the host's network but not its PIDs reach each other on loopback,
# so the address alone cannot tell; the namespace's inode can.
PID_NS = _pid_namespace()
AVAILABLE = hasattr(os, "memfd_create") and bool(BOOT_ID) and bool(PID_NS)
FOREIGN = "another PID namespace"  # in the refusal, so a sender can tell and fall back


def can_share(mine: tuple[str, int], theirs: tuple[str, int]) -> bool:
    """May processes with these (boot id, PID namespace inode) pairs share segments?"""
    return bool(mine[0]) and bool(mine[1]) and mine == theirs


# A node's DEALER routing id: 0x01, 8 bytes naming its (boot id, PID namespace), 7 random.
# The callee reads it on every call (it is the ROUTER's first frame), so it sends a big reply
# through shared memory only to a caller that can open it; ids ZeroMQ makes start with 0x00.
_NS_TAG = hashlib.blake2b(f"{BOOT_ID}/{PID_NS}".encode(), digest_size=8).digest()


def routing_id() -> bytes:
    return b"\x01" + _NS_TAG + os.urandom(7)


def shares_with_caller(rid: bytes) -> bool:
    """Did the call with this routing id come from a node that can open our segments?"""
    return len(rid) == 16 and rid[0] == 1 and rid[1:9] == _NS_TAG and AVAILABLE


def same_host(address: str) -> bool:
    """Is `address` (a ZeroMQ endpoint) certainly on this host? Loopback and ipc only: a
    routable address may be this host too, but then TCP is the safe choice."""
    return (address.startswith("tcp://127.") or address.startswith("tcp://localhost:")
            or address.startswith("ipc://") or address.startswith("tcp://[::1]"))
