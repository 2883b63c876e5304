"""What a node counts about its traffic and the calls it makes. Not the rendering (/metrics).

Everything is written on the node's loop thread and read from any thread (a dashboard, a
benchmark): plain ints and one Histogram, so a reader sees values at most one update stale.

Call outcomes, for calls this node made and waited on (casts have no outcome):
- ok: a reply arrived; error: the remote answered with an error (the method raised, no such
  actor, ...); timeout: no answer before the call's deadline; peer_unavailable: the call
  failed because the peer was declared dead, the connection dropped or the send queue
  was full (counted where the peer fails them: Peer.fail_all). Calls failed by this node stopping are not counted.
`call_latency` is the client-side time from send to reply or error reply, as seen on the
loop thread; timeouts and dead peers are counted, not timed (their "latency" is the
deadline or the liveness limit, which says nothing about the callee).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from iris.base.histogram import Histogram

CALL_OUTCOMES = ("ok", "error", "timeout", "peer_unavailable")
_NOT_TRAFFIC = frozenset({"call_latency", *(f"calls_{o}" for o in CALL_OUTCOMES)})


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
    # Times this node's own loop stood still for over a second (a starved process, a
    # stopped VM, a long GC): its peers' silence meanwhile was not held against them.
    own_stalls: int = 0
    # Calls refused with OverloadedError because their actor had max_waiting_calls waiting.
    refused_overloaded: int = 0
    # Outcomes of the calls this node made (see the module docstring).
    calls_ok: int = 0
    calls_error: int = 0
    calls_timeout: int = 0
    calls_peer_unavailable: int = 0
    call_latency: Histogram = field(default_factory=Histogram)

    def as_dict(self) -> dict[str, int]:
        """The traffic counters by field name (not the call outcomes nor the latency)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in _NOT_TRAFFIC}

    def call_outcomes(self) -> dict[str, int]:
        return {o: getattr(self, f"calls_{o}") for o in CALL_OUTCOMES}

    def latency_snapshot(self) -> dict:
        """`call_latency.as_dict()` made consistent for a reader on another thread: the loop
        may record a sample between reading the buckets and the count, and Prometheus
        rejects a histogram whose +Inf count is below a bucket's."""
        data = self.call_latency.as_dict()
        top = max(data["buckets"].values(), default=0)
        data["count"] = max(data["count"], top)
        return data
