"""The gang coordinator's state as plain data for the controller's store, and back.

The controller persists this after every event it hands the coordinator and before it
sends the effects, so a restarted controller knows every gang it was placing and which
token it was committing; `Restarted` then re-arms what the crash lost. Not the store.
"""

from __future__ import annotations

from collections.abc import Mapping

from iris.base.errors import ProtocolError, StorageError
from iris.controller.scheduling.coordinator import (
    CoordinatorConfig,
    GangCoordinator,
    GangRecord,
    Phase,
)
from iris.controller.scheduling.protocol import Reserved
from iris.controller.scheduling.wire_format import (
    from_wire,
    shape_from_wire,
    shape_to_wire,
    to_wire,
)

SCHEMA = 1


def snapshot(coord: GangCoordinator) -> dict[str, object]:
    """msgpack/JSON-able state of every gang the coordinator is handling."""
    return {"schema": SCHEMA, "gangs": [_record_to_data(r) for r in coord.gangs().values()]}


def restore(data: Mapping[str, object],
            config: CoordinatorConfig | None = None) -> GangCoordinator:
    if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
        raise StorageError(f"gang coordinator state: unknown schema in {data!r:.100}")
    try:
        records = [_record_from_data(d) for d in data["gangs"]]
    except (KeyError, TypeError, ValueError, AttributeError, ProtocolError) as exc:
        raise StorageError(f"gang coordinator state is corrupt: {exc!r}") from exc
    return GangCoordinator.from_records(records, config)


def _record_to_data(r: GangRecord) -> dict[str, object]:
    return {"gang_id": r.gang_id, "shape": shape_to_wire(r.shape), "regions": list(r.regions),
            "phase": r.phase.value, "attempt": r.attempt, "failures": r.failures,
            "resends": r.resends, "timer_seq": r.timer_seq, "retry_at": r.retry_at,
            "waiting": sorted(r.waiting),
            "offers": {k: to_wire(v) for k, v in r.offers.items()},
            "reasons": dict(r.reasons),
            "chosen": to_wire(r.chosen) if r.chosen is not None else None}


def _reserved(data: object) -> Reserved:
    msg = from_wire(data)
    if not isinstance(msg, Reserved):
        raise ValueError(f"expected a Reserved offer, got {type(msg).__name__}")
    return msg


def _record_from_data(d: Mapping) -> GangRecord:
    return GangRecord(
        gang_id=str(d["gang_id"]), shape=shape_from_wire("state", d["shape"]),
        regions=tuple(map(str, d["regions"])), phase=Phase(d["phase"]),
        attempt=int(d["attempt"]), failures=int(d["failures"]), resends=int(d["resends"]),
        timer_seq=int(d["timer_seq"]),
        retry_at=None if d["retry_at"] is None else float(d["retry_at"]),
        waiting=set(map(str, d["waiting"])),
        offers={str(k): _reserved(v) for k, v in d["offers"].items()},
        reasons={str(k): str(v) for k, v in d["reasons"].items()},
        chosen=None if d["chosen"] is None else _reserved(d["chosen"]))
