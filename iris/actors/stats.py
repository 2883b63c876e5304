"""Counters a node keeps about its traffic (read by tests, benchmarks and later /metrics)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class NodeStats:
    calls_sent: int = 0
    calls_received: int = 0
    # Frames that failed validation and were dropped (fuzzed, truncated, wrong types).
    malformed: int = 0
    # Replies we could not deliver because the caller vanished or flooded its queue.
    replies_dropped: int = 0
    # Replies that arrived after their call had failed (deadline or dead peer).
    late_replies: int = 0
    peers_declared_dead: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
