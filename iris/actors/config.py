"""Node configuration: one frozen dataclass; every field says its unit and why its default."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BulkConfig:
    """The bulk path (bulk.py): big payloads to other hosts, sealed per chunk, off CURVE."""

    # TCP connections per link. One stream on this machine's veths moved 1.0-1.1 GB/s and a
    # second added nothing (2 cores); a 25-100 Gbit/s NIC needs several streams, each with
    # its own congestion window, to fill. Every stream of a link shares its credit.
    streams: int = 2
    # Chunks asked for and not yet in place, per stream: 8 x 4 MiB keeps a 1 GB/s link busy
    # through a ~30 ms pause of either side (a loaded host's thread wake-ups take that
    # long), and bounds the memory in flight per link (64 MiB with 2 streams).
    credits: int = 8
    # Bytes per chunk of a call's big frames (the weights chain takes Publisher(chunk_bytes=)).
    # 4 MiB: a version of 256 MiB to 4 hosts cost 1.2 CPU-s in all against 1.6 with 1 MiB
    # chunks here (each chunk is a request, a reply, an open and two thread hand-offs),
    # and the pipeline still fills in one chunk (~4 ms at 1 GB/s) per hop.
    chunk_bytes: int = 4 << 20
    # A call's buffer frame of at least this many bytes, to a node on another host, travels
    # on the bulk path instead of the CURVE connection (which moved 0.15-0.27 GB/s per link
    # here). 4 MiB: below it the extra round trip of a pull costs more than CURVE's box.
    # 0 turns it off.
    min_call_bytes: int = 4 << 20
    # Threads sealing and opening chunks (cryptography releases the GIL): AES-256-GCM did
    # 6-10 GB/s per core here, so 2 keep up with any link this host has.
    crypto_threads: int = 2
    # libzmq I/O threads of the bulk context: the kernel copies of several streams run in
    # parallel with two.
    io_threads: int = 2
    # Bytes of released receive buffers kept for reuse (bulk_buffers.py): their pages stay
    # faulted in, which saves 0.21 CPU-s per 256 MiB received here. 2 GiB holds the spare
    # of a 1 GiB weight set while the rollout holds the current one.
    pool_bytes: int = 2 << 30
    # Send chunks unencrypted (plaintext: no key, no tag). Only for a network the operator
    # trusts, or one already encrypted below (IPsec, WireGuard): off by default, logged at
    # start, and a receiver accepts a plaintext transfer only if it allows it too. Also
    # $IRIS_BULK_PLAINTEXT=1.
    plaintext: bool = False


@dataclass(frozen=True)
class NodeConfig:
    # Where this process's ROUTER listens. Port 0 picks a free port. Loopback by default:
    # binding anything else requires CURVE keys (see security.py).
    bind: str = "tcp://127.0.0.1:0"
    # Seconds a call may take when the caller gives no timeout. Long enough for a training
    # step behind a blocking method; short enough that a lost call surfaces the same hour.
    default_timeout_s: float = 300.0
    # Seconds between PINGs to a peer that owes us replies and has been silent. Paranoid
    # Pirate: any traffic counts as a sign of life, so a busy peer is never pinged.
    heartbeat_interval_s: float = 0.5
    # A peer silent this long while owing replies is declared dead and its calls fail.
    # 3 s = 6 missed heartbeats: survives a GC pause or a loaded 2-core box, and keeps the
    # promise that calls on a dead peer fail within 5 s (3 s + one sweep interval).
    peer_dead_after_s: float = 3.0
    # How often pending calls are checked against their deadlines and peers against
    # liveness. 50 ms keeps deadline errors prompt at negligible cost (one heap peek).
    sweep_interval_s: float = 0.05
    # ZeroMQ reconnect backoff: first retry after 100 ms, doubling up to 2 s, so a restarted
    # peer is found again quickly without hammering a dead address.
    reconnect_initial_ms: int = 100
    reconnect_max_ms: int = 2000
    # Largest single frame accepted; a peer sending more is disconnected by libzmq before
    # we allocate it. 1 GiB leaves room for big weight transfers.
    max_frame_bytes: int = 1 << 30
    # Messages queued per socket before sends fail fast instead of growing memory.
    high_water_mark: int = 200_000
    # libzmq's default is 1,023 sockets per context: a controller starting tasks on more
    # workers than that (one DEALER each) could not connect to the rest. Bounded in practice
    # by the process's open-file limit.
    max_sockets: int = 65_536
    # Buffer frames of at least this many bytes between processes of one host (loopback or
    # ipc addresses) travel through a shared-memory segment instead of the socket: one copy
    # instead of four (send, two kernel copies, receive). 1 MiB: below it the memfd's
    # creation and mapping (~40 us) cost more than the copies saved. 0 turns it off; so does
    # $IRIS_SHM_MIN_BYTES=0 (read at node start).
    shm_min_bytes: int = 1 << 20
    # Seconds a segment of a reply or cast waits for its receiver to map it; a receiver that
    # died before mapping it must not pin the memory for longer.
    shm_hold_s: float = 60.0
    # Bytes of released segments kept for reuse (their pages stay faulted in: refilling one
    # runs at memcpy speed, a fresh one pays page faults, ~6x slower here). 2 GiB holds the
    # spare for a 1 GiB weight set, published while receivers still hold the last one.
    shm_pool_bytes: int = 2 << 30
    # Async methods of one actor running at once (sync methods always run one at a time).
    default_max_concurrency: int = 1000
    # Calls waiting for one actor (its mailbox, a batched method's batch, the line for an
    # async method) before new ones are refused at once with OverloadedError: a flood must
    # not grow memory without bound (a small waiting call holds ~1 KB: 100,000 is ~100 MB),
    # and its caller hears "come back later" instead of timing out behind the queue. Far
    # above what a healthy actor ever holds (10,000 hosts' reports are one each).
    max_waiting_calls: int = 100_000
    # The bulk path for big payloads to other hosts (weights chains, big call frames).
    bulk: BulkConfig = field(default_factory=BulkConfig)
