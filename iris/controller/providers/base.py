"""The Provider contract: create, delete, list and inspect slices. Not the autoscaler.

A provider turns "I want one more slice of group G in zone Z" into machines, and reports
what exists. It makes no decisions: which group, zone and how many belong to the region
actor's autoscaler, which calls these blocking methods from an executor thread.

Contract every implementation keeps (tests/providers/test_provider_contract.py checks it):

- `create_slice` returns once the provider's create operation has finished: the slice is
  READY, or CREATING while its hosts boot (poll `slice_status`). A slice id already in use
  raises ConflictError and leaves the existing slice alone (ids are the caller's, so a
  duplicate is a bug or a retry of a create that already happened, never a second slice).
- Stock-outs, quota and ResourceExhausted raise CapacityError whose message names the zone;
  other refusals raise ProviderError. Nothing is left behind by a create that raised.
- Bad input (zone not in the group, malformed slice id) raises InvalidRequestError before
  any call to the cloud.
- `delete_slice` of an unknown id is a no-op, so the autoscaler can retry after a crash.
- `slice_status` of an unknown id reports NOT_FOUND rather than raising.
- A preempted slice stays listed as PREEMPTED until deleted (it still counts against quota).
- A READY slice may carry `draining` (why no new work should go there): its running work
  finishes, then the autoscaler deletes it. Providers whose sites retire machines
  gracefully (Slurm drains, Kubernetes cordons) report it; the others never set it.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from iris.base.errors import InvalidRequestError

if TYPE_CHECKING:  # annotations only: the CLI's slice verbs load this module without a config
    from iris.controller.config import ScaleGroupConfig

# TPU node ids: lowercase letters, digits and '-', starting with a letter, <= 63 chars.
_SLICE_ID = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


class SliceState(enum.Enum):
    CREATING = "CREATING"  # accepted; hosts are booting
    READY = "READY"  # every host is up and reachable
    PREEMPTED = "PREEMPTED"  # the cloud took it back; delete it and make another
    DELETING = "DELETING"
    FAILED = "FAILED"  # broken beyond use (terminated, repair failed...); delete it
    NOT_FOUND = "NOT_FOUND"  # no such slice (never created, or deleted)


@dataclass(frozen=True)
class HostInfo:
    """One machine of a slice: a stable id and the IP address its worker is reached at."""

    host_id: str
    address: str


@dataclass(frozen=True)
class SliceInfo:
    """What a provider knows about one slice at one moment."""

    slice_id: str
    group: str
    zone: str
    state: SliceState
    hosts: tuple[HostInfo, ...] = ()
    detail: str = ""  # the provider's own words about the state, for operators
    # Non-empty: the provider wants no new work placed on this slice, and why (a Slurm node
    # drained by an admin, an allocation near its time limit, a cordoned Kubernetes node).
    # The autoscaler drains the slice (its running work finishes) and then deletes it.
    draining: str = ""

    @classmethod
    def not_found(cls, slice_id: str) -> SliceInfo:
        return cls(slice_id=slice_id, group="", zone="", state=SliceState.NOT_FOUND)


class Provider(Protocol):
    """Blocking slice operations; see the module docstring for the contract."""

    def create_slice(self, group: ScaleGroupConfig, zone: str, slice_id: str) -> SliceInfo: ...

    def delete_slice(self, slice_id: str) -> None: ...

    def list_slices(self, group: str | None = None) -> list[SliceInfo]: ...

    def slice_status(self, slice_id: str) -> SliceInfo: ...

    def close(self) -> None: ...


def check_create_request(group: ScaleGroupConfig, zone: str, slice_id: str) -> None:
    """Refuse a create that no provider should attempt, naming the bad field."""
    if not isinstance(slice_id, str) or not _SLICE_ID.match(slice_id):
        raise InvalidRequestError(
            f"slice_id: {slice_id!r} is not valid: use lowercase letters, digits and '-', "
            "start with a letter, at most 63 characters", "slice_id")
    if zone not in group.zones:
        raise InvalidRequestError(
            f"zone: scale group {group.name} does not use zone {zone!r} "
            f"(its zones: {', '.join(group.zones)})", "zone")


__all__ = ["HostInfo", "Provider", "SliceInfo", "SliceState", "check_create_request"]
