"""Named ports of this host's attempts: a free port for each name a task asked for
(`Resources(ports=["http"])`), never the same one to two live attempts. No policy.

A port is found by binding port 0 on every interface and closing the socket: the kernel
picks one nobody holds now, and the task binds it moments later. Another process could take
it in between (the same race Ray's and Kubernetes' host ports have); the book at least
keeps this worker from handing one port to two of its attempts.
"""

from __future__ import annotations

import socket
import threading

# Tries before giving up on finding a port not already handed out (the kernel's ephemeral
# range has ~28,000; a clash is rare, eight in a row means something else is wrong).
_TRIES = 8


class PortBook:
    """Thread-safe: attempts start and end on executor threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, dict[str, int]] = {}  # attempt id -> name -> port

    def assign(self, attempt_id: str, names: tuple[str, ...]) -> dict[str, int]:
        """A free port for each name (the same ones again for an attempt that has them)."""
        with self._lock:
            if attempt_id in self._held:
                return dict(self._held[attempt_id])
            taken = {p for ports in self._held.values() for p in ports.values()}
            ports: dict[str, int] = {}
            for name in names:
                ports[name] = _free_port(taken | set(ports.values()))
            self._held[attempt_id] = ports
            return dict(ports)

    def release(self, attempt_id: str) -> None:
        with self._lock:
            self._held.pop(attempt_id, None)


def _free_port(taken: set[int]) -> int:
    for _ in range(_TRIES):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        if port not in taken:
            return port
    raise OSError(f"no free port found in {_TRIES} tries")


def port_env(ports: dict[str, int]) -> dict[str, str]:
    """{"http": 8123} -> {"IRIS_PORT_HTTP": "8123"}: what the task reads."""
    return {f"IRIS_PORT_{name.upper()}": str(port) for name, port in ports.items()}
