"""The worker desk: who is registered, how fast newcomers are admitted, what each last said of
itself, and which workers from before a restart have not come back. A component of
ControllerService (service.py) that owns these fields; the requests that drive it
(worker_requests.py) run on the service's turn, which passes `now` in. No sockets, no clock.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterable
from typing import Any

from iris.base.errors import InvalidRequestError, OverloadedError
from iris.controller.reclaim import drop_absent
from iris.controller.regions.capacity import Offer, fits_checker, offers_from_workers
from iris.controller.workers import WorkerTable, report_interval_s
from iris.wire import control

# New registrations admitted per second (and the burst): a registration costs ~1 ms here, so
# this keeps a re-registration storm from 10,000 hosts under half the controller's time.
REGISTRATIONS_PER_S = 500
_REGION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class WorkerDesk:
    def __init__(self, dead_after_s: float, max_regions: int, restart_grace_s: float,
                 unclaimed: Iterable[str], regions: Iterable[str], now: float):
        self.workers = WorkerTable(dead_after_s)
        # worker id -> (max_flush_lag_s, dropped_lines) of its last report's log shipping
        # stats: two numbers, read at the report, rather than the report's dicts kept until
        # the snapshot walks them (10,000 of them every 2 s at 10,000 hosts).
        self._shipping: dict[str, tuple[float, int]] = {}
        self._max_regions = max_regions
        self._restart_grace_s = restart_grace_s
        # Every region a worker or the config ever named: each becomes an actor (max_regions).
        self._regions_seen: set[str] = set(regions)
        self._registrations = 0
        # The retry hints' jitter: a generator of its own, not the process's shared one.
        self._jitter = random.Random()
        # Workers that had attempts (running, or stopping) before a restart and have not
        # come back yet; lost once restart_grace_s has passed since `started`.
        self._unclaimed = set(unclaimed)
        self._started = now
        self._admission, self._admitted_at = float(REGISTRATIONS_PER_S), now
        self._admit_slot = float("-inf")  # the last retry time handed to a refused worker
        self._live_fits: tuple = (None, None)  # (workers key, checker) for catalogue()

    def check_region(self, region: str) -> None:
        """A region name must be well formed, and a new one must fit under max_regions."""
        if not _REGION_NAME.fullmatch(region):
            raise InvalidRequestError(f"attributes.region: {region[:80]!r} is not a region name "
                                      "(letters, digits, '.', '_' and '-', at most 64)",
                                      "attributes.region")
        known = self._regions_seen
        if region not in known and len(known) >= self._max_regions:
            raise InvalidRequestError(
                f"attributes.region: {region!r} would be region {len(known) + 1}; this "
                f"controller serves at most {self._max_regions} (max_regions)",
                "attributes.region")

    def admit(self, worker_id: str, address: str, now: float) -> None:
        """Registrations are admitted at a bounded rate (a token bucket of
        REGISTRATIONS_PER_S); past it the worker is told when to come back. A mass
        re-registration (a network heal, a controller restart) then spreads out instead of
        starving the loop that answers heartbeats: the overload must not feed itself."""
        known = self.workers.workers.get(worker_id)
        if known is not None and known.address == address:
            return  # a refresh costs little
        self._admission = min(REGISTRATIONS_PER_S, self._admission
                              + (now - self._admitted_at) * REGISTRATIONS_PER_S)
        self._admitted_at = now
        if self._admission < 1.0:
            # Each refused worker gets its own later slot, 1/REGISTRATIONS_PER_S after the
            # last one handed out: 10,000 refused at once come back over 20 s, at the rate
            # they can be admitted. (A retry within ~1 s for all of them, as before, brought
            # 10,000 refusals a second, each a turn of the controller: it fell behind.)
            self._admit_slot = max(now, self._admit_slot) + 1.0 / REGISTRATIONS_PER_S
            wait = (self._admit_slot - now) * (1.0 + 0.1 * self._jitter.random())
            raise OverloadedError(f"too many registrations at once: retry in {wait:.1f} s",
                                  retry_after_s=wait)
        self._admission -= 1.0

    def register(self, msg: control.WorkerRegistration, now: float) -> None:
        """A checked and admitted registration joins the table."""
        self.workers.register(msg.worker_id, msg.address, msg.attributes, now)
        self._regions_seen.add(msg.attributes.get("region", "local"))
        self._registrations += 1
        self._unclaimed.discard(msg.worker_id)

    def note_stats(self, worker_id: str, stats: dict) -> None:
        """A worker's own figures for /metrics, kept as last reported."""
        shipping = stats.get("log_shipping")
        if isinstance(shipping, dict):
            self._shipping[worker_id] = (_figure(shipping.get("max_flush_lag_s", 0.0), float),
                                         _figure(shipping.get("dropped_lines", 0), int))
        else:
            self._shipping.pop(worker_id, None)

    def drop_absent_stats(self) -> None:
        """Forget the figures of workers no longer registered (reclaim.py)."""
        drop_absent(self._shipping, self.workers.workers)

    def forget_region(self, region: str) -> None:
        """A reclaimed region counts towards max_regions again only when a host names it."""
        self._regions_seen.discard(region)

    def forget(self, worker_id: str) -> None:
        """The worker is gone (goodbye, its slice deleted)."""
        del self.workers.workers[worker_id]

    def overdue(self, now: float) -> list[str]:
        """Workers from before a restart still missing after restart_grace_s (once)."""
        if not self._unclaimed or now - self._started <= self._restart_grace_s:
            return []
        missing = sorted(self._unclaimed)
        self._unclaimed.clear()
        return missing

    def catalogue(self, offers: tuple[Offer, ...] | None, accept_unfit: bool) -> Any:
        """What a request must fit at admission (submit and dry run): the config's scale
        groups plus the workers registered now, so a job that fits a hand-started worker is
        never refused, whatever the groups say (issue 27). Without a config, the registered
        workers alone bound what can ever run (a request no host can hold is refused at
        submit, not left pending): None with no workers yet, or when more may join
        (accept_unfit)."""
        if offers is None and (accept_unfit or not self.workers.workers):
            return None
        key = (len(self.workers.workers), self._registrations)
        if self._live_fits[0] != key:
            self._live_fits = (key, fits_checker((*(offers or ()), *offers_from_workers(
                self.workers.workers.values()))))
        return self._live_fits[1]

    def report_interval(self, now: float) -> float:
        """Seconds between reports this controller asks of its workers now."""
        return report_interval_s(len(self.workers.workers), self.workers.behind(now))

    def log_shipping(self) -> dict:
        """Worst shipping lag and total dropped lines over the live workers' last reports."""
        workers = self.workers.workers
        live = [figures for w, figures in self._shipping.items() if w in workers]
        if not live:
            return {}
        return {"max_flush_lag_s": max(lag for lag, _ in live),
                "dropped_lines": sum(dropped for _, dropped in live)}


def _figure(value: Any, kind: type) -> Any:
    """A reported figure as a number; one that is not a finite number >= 0 counts as 0 (a
    worker's own figures are observation: a bad one must not break the snapshot that sums
    them, nor put a NaN, which is not JSON, in what the dashboard and /metrics read)."""
    try:
        number = kind(value)
        return number if math.isfinite(number) and number >= 0 else kind(0)
    except (TypeError, ValueError, OverflowError):
        return kind(0)
