"""Benchmark: the cost of pushing a region's inventory to its Region actor, whole vs delta.

    python -m bench.inventory [--quick] [--hosts 10000] [--changes 20] [--repeat 20]

Not a test: it asserts nothing. A fleet of --hosts registered hosts in one region (the
worst case for a whole push: 90 % in v5litepod-16 slices of 4 hosts, 10 % single CPU
hosts; a third busy), one Region actor object fed in this process (the controller hosts its
Region actors in its own process, so both sides are the controller's CPU). Each push follows
--changes changes: hosts whose attempts start or end, and one host that re-registers.

- whole_build_ms: before this change, every push: `region_inventory` over every worker
  (inventory.py), as RegionPushes.sync_regions does, plus comparing it with the last push.
- whole_encode_ms / whole_bytes: msgpack of the call's arguments (what goes on the wire).
- whole_apply_ms: the Region's `sync`: checking the whole message (control.RegionSync),
  then ReservationLedger.set_inventory.
- whole_push_ms: the three together, one push's CPU on the controller's process.
- delta_build_ms / delta_encode_ms / delta_bytes / delta_apply_ms / delta_push_ms: the same
  for the delta the incremental inventory (gangs/inventory.py) pushes after the same
  changes: the touched hosts' facts (inventory.host_facts), `inventory.push`, the Region's
  `sync_delta` (control.RegionDelta, ReservationLedger.apply_delta).
- speedup: whole_push_ms / delta_push_ms.

Medians of --repeat pushes, CPU time of this process (time.process_time). There is no peer:
Ray has no region inventory to push (its GCS keeps every node's resources and broadcasts
changes to raylets, a different design not timed here). --quick: 2,000 hosts, 10 repeats.
The last line printed is one JSON object of every figure.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import msgpack

from bench._report import fmt, step
from iris.base.clock import FakeClock
from iris.controller.gangs import inventory as inv
from iris.controller.gangs.inventory import host_facts, region_inventory
from iris.controller.jobs.state import KernelState
from iris.controller.region_pushes import RegionPushes
from iris.controller.regions.region import Region
from iris.controller.workers import WorkerInfo

REGION = "us-central2"


def _fleet(n: int) -> dict[str, WorkerInfo]:
    workers = {}
    tpu = int(n * 0.9) // 4 * 4
    for i in range(n):
        if i < tpu:
            sid = f"tpu-{i // 4}"
            wid, attrs = f"{sid}-w{i % 4}", {"slice_id": sid,
                                              "accelerator_type": "v5litepod-16",
                                              "accelerator_count": "4"}
        else:
            wid, attrs = f"cpu-{i}", {}
        attrs.update({"region": REGION, "zone": f"{REGION}-b", "cpu": "32"})
        workers[wid] = WorkerInfo(wid, f"tcp://10.0.{i // 250}.{i % 250}:7000", REGION,
                                  attrs, 32.0, 2**37, 4 if i < tpu else 0, 0.0, 0.0)
    return workers


def _change(rng: random.Random, state: KernelState, workers: dict[str, WorkerInfo],
            changes: int, seq: int) -> list[str]:
    """`changes` hosts start or end an attempt; one re-registers (new WorkerInfo)."""
    ids = list(workers)
    touched = rng.sample(ids, changes)
    for wid in touched[:-1]:
        if state.by_worker.pop(wid, None) is None:
            state.by_worker[wid] = {f"att-{seq}-{wid}"}
    wid = touched[-1]
    old = workers[wid]
    workers[wid] = WorkerInfo(wid, old.address, old.region, dict(old.attributes), old.cpu,
                              old.memory_bytes, old.accelerators, seq, seq)
    return touched


def _timed(fn):
    start = time.process_time()
    out = fn()
    return out, (time.process_time() - start) * 1000.0


def run(hosts: int, changes: int, repeat: int) -> dict:
    rng = random.Random(7)
    workers = _fleet(hosts)
    state = KernelState()
    for wid in rng.sample(list(workers), hosts // 3):
        state.by_worker[wid] = {f"att-0-{wid}"}
    # Before: the whole inventory, built from every worker, pushed to a Region.
    old_region = Region(REGION, [], FakeClock())
    last = region_inventory(state, workers.values(), {})[REGION]
    old_region.sync(*last, {}, [])
    # After: the kept inventory, a full push first, then deltas.
    pushes = RegionPushes((), 0.0, incarnation="inc-bench")
    new_region = Region(REGION, [], FakeClock())
    pushes.sync_regions(state, workers.values(), {})
    [full] = pushes.take_outbox()
    new_region.sync(full.slices, full.busy, full.unmet, full.drained, full.incarnation,
                    full.seq)
    rows: dict[str, list[float]] = {}
    for seq in range(1, repeat + 1):
        touched = _change(rng, state, workers, changes, seq)

        def whole(last=last):  # built, and compared with the last push (was it changed?)
            now = region_inventory(state, workers.values(), {})[REGION]
            assert now != last
            return now
        now, build = _timed(whole)
        args = (now[0], now[1], {}, [])
        wire, encode = _timed(lambda a=args: msgpack.packb(a))
        _, apply = _timed(lambda a=args: old_region.sync(*a))
        last = now

        def delta(t=touched):
            pushes.note_hosts(inv.HostIs(h, host_facts(state, workers[h], {}, ()))
                               for h in t)
            pushes.push_regions({}, (), ())
            return pushes.take_outbox()[0]
        msg, d_build = _timed(delta)
        body = {"incarnation": msg.incarnation, "seq": msg.seq, "slices": msg.slices,
                "removed": msg.removed, "busy": msg.busy, "free": msg.free,
                "unmet": msg.unmet, "drained": msg.drained, "undrained": msg.undrained}
        d_wire, d_encode = _timed(lambda b=body: msgpack.packb((b,)))
        _, d_apply = _timed(lambda b=body: new_region.sync_delta(b))
        for key, value in (("whole_build_ms", build), ("whole_encode_ms", encode),
                           ("whole_apply_ms", apply), ("whole_bytes", len(wire)),
                           ("delta_build_ms", d_build), ("delta_encode_ms", d_encode),
                           ("delta_apply_ms", d_apply), ("delta_bytes", len(d_wire))):
            rows.setdefault(key, []).append(value)
    assert new_region.inventory()["busy"] == old_region.inventory()["busy"]  # same result
    out = {k: statistics.median(v) for k, v in rows.items()}
    out["whole_push_ms"] = out["whole_build_ms"] + out["whole_encode_ms"] + out["whole_apply_ms"]
    out["delta_push_ms"] = out["delta_build_ms"] + out["delta_encode_ms"] + out["delta_apply_ms"]
    out["speedup"] = out["whole_push_ms"] / out["delta_push_ms"]
    return {"hosts": hosts, "changes": changes, **out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2,000 hosts, 10 pushes")
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--changes", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    hosts, repeat = (2000, 10) if args.quick else (args.hosts, args.repeat)
    step(f"{repeat} pushes at {hosts:,} hosts, {args.changes} changes each")
    r = run(hosts, args.changes, repeat)
    print(f"inventory push at {hosts:,} hosts after {args.changes} changes "
          "(CPU ms of the controller's process; no Ray peer: see the docstring)")
    print("        | build | encode | apply | push  | bytes")
    for kind in ("whole", "delta"):
        print(f"{kind:7} | " + " | ".join(fmt(r[f"{kind}_{k}"]) for k in
                                          ("build_ms", "encode_ms", "apply_ms", "push_ms",
                                           "bytes")))
    print(f"speedup (whole / delta push): {fmt(r['speedup'])}x")
    print(json.dumps(r))


if __name__ == "__main__":
    main()
