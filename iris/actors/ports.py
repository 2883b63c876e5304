"""Who holds a TCP port on this machine: for the one-line error of a bind that found it taken.

Not the binding (node.py). Linux only, from /proc: the listening socket's inode in
/proc/net/tcp{,6}, then the process holding a descriptor to it. A process of another user
(unreadable /proc/PID/fd) is not found; the error then names the address alone.
"""

from __future__ import annotations

import errno
import os
import socket

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column


def bind_error(bind: str) -> str | None:
    """Why a ROUTER could not bind `bind` (tcp://HOST:PORT), found by binding a plain socket
    first, or None if it is free (or not a concrete TCP address: nothing to check)."""
    host, _, port = bind.removeprefix("tcp://").rpartition(":")
    if not bind.startswith("tcp://") or not port.isdigit() or int(port) == 0:
        return None
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as libzmq binds
        try:
            probe.bind(("" if host in ("*", "0.0.0.0") else host, int(port)))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return None  # not ours to judge: the node's own bind reports it
            return in_use(bind)
    return None


def in_use(bind: str) -> str:
    """The one line for a taken address, naming the process that holds it when it is found."""
    port = bind.rpartition(":")[2]
    owner = owner_of(int(port)) if port.isdigit() else None
    if owner is None:
        return f"address {bind} is already in use (by a process this user cannot see)"
    pid, command = owner
    return f"address {bind} is already in use by pid {pid} ({command})"


def owner_of(port: int) -> tuple[int, str] | None:
    """(pid, command line) of the process listening on TCP `port`, or None."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                target = os.readlink(fd.path)
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    return int(entry.name), _command(int(entry.name))
        except OSError:
            continue  # gone, or not ours to read
    return None


def _listening_inodes(port: int) -> set[str]:
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == _LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                found.add(cols[9])
    return found


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(w.decode(errors="replace") for w in words if w)
    return text if len(text) <= 120 else text[:117] + "..."


__all__ = ["bind_error", "in_use", "owner_of"]
