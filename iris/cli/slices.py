"""`iris slice ...` and `iris vm ...`: an operator's hands on the slices of a config's cluster.

Not the autoscaler: these call the same Provider code it uses (GcpTpuProvider), one call
per command, with the cluster's labels, so a slice made here is one the autoscaler lists
and adopts (counted against its group's max_slices, never a second time). The slices of
every other provider (local worker processes, and any provider kind but gcp) are listed by
the controller's own providers through the Provider protocol (`list_slices`, the Region
actors' view: Controller.slices), with the same columns and JSON. VM ids are the host ids
the workers register under (`<slice>-w<index>` on GCP, `<slice>-h<index>` locally), plus
the controller VM's name. Every verb prints a table, or with --json the same rows as one
JSON document.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from iris.actors import tokens
from iris.base.errors import CapacityError, InvalidRequestError, IrisError, NotFoundError
from iris.base.ids import new_id
from iris.cli.jobs import print_rows
from iris.controller.providers.base import HostInfo, SliceInfo, SliceState

if TYPE_CHECKING:  # the config module (~15 ms) is loaded by the verbs that read a config
    from iris.controller.config import ClusterConfig, ScaleGroupConfig

SLICE_COLUMNS = ["slice_id", "group", "zone", "state", "hosts"]
VM_COLUMNS = ["vm_id", "role", "slice", "zone", "state", "address"]
_GONE = (SliceState.DELETING, SliceState.NOT_FOUND)


class Providers:
    """The cluster's slices, every provider's. Regions with gcp groups are reached from here:
    one GcpTpuProvider per region, made on first use, closed at the end (so slices are
    listed and deleted even while no controller runs). Every other region's slices are
    listed by the controller's own providers (`slices`: local worker processes only it can
    see, and any other provider kind), given as `controller()`, a call returning its rows."""

    def __init__(self, config: ClusterConfig, controller: Callable[[], list[dict]] | None = None):
        self.config = config
        self._controller = controller
        self._made: dict[str, Any] = {}
        self.note = ""  # why some slices could not be listed, for the operator

    def regions(self) -> list[str]:
        return sorted({g.region for g in self.config.scale_groups() if g.provider == "gcp"})

    def controller_regions(self) -> list[str]:
        return sorted({g.region for g in self.config.scale_groups() if g.provider != "gcp"})

    def for_region(self, region: str) -> Any:
        if region not in self._made:
            from iris.controller.providers.gcp_tpu import GcpTpuProvider

            # Slices made here hand their workers the cluster token only if the operator has
            # it ($IRIS_CLUSTER_TOKEN, the controller's STATE_DIR/cluster.token); the
            # autoscaler's own slices always get it from the controller.
            token = os.environ.get(tokens.ENV_TOKEN, "")
            self._made[region] = GcpTpuProvider.from_config(self.config, region,
                                                            cluster_token=token)
        return self._made[region]

    def group(self, name: str) -> ScaleGroupConfig:
        _known_group(self, name)
        group = self.config.scale_group(name)
        if group.provider != "gcp":
            raise InvalidRequestError(f"--scale-group: {name} uses provider {group.provider}; "
                                      "slice commands act on gcp groups (the controller makes "
                                      "the others itself)")
        return group

    def all_slices(self) -> list[SliceInfo]:
        """The slices of the gcp regions, asked of GCP now."""
        return [s for r in self.regions() for s in self.for_region(r).list_slices()]

    def everything(self) -> list[tuple[str, SliceInfo]]:
        """(region, slice) of every provider: gcp ones asked here, the others of the
        controller; `note` says which could not be listed."""
        out = [(r, s) for r in self.regions() for s in self.for_region(r).list_slices()]
        others = set(self.controller_regions())
        if not others:
            return out
        try:
            rows = self._controller() if self._controller else None
        except IrisError as exc:
            rows, why = None, str(exc)
        else:
            why = "no controller to ask"
        if rows is None:
            self.note = (f"the slices of region(s) {', '.join(sorted(others))} are listed by "
                         f"their controller, which does not answer ({why})")
            return out
        return out + [(row["region"], _info(row)) for row in rows if row["region"] in others]

    def find(self, slice_id: str) -> tuple[SliceInfo, Any]:
        for region in self.regions():
            info = self.for_region(region).slice_status(slice_id)
            if info.state is not SliceState.NOT_FOUND:
                return info, self.for_region(region)
        raise NotFoundError(f"no slice {slice_id!r} in cluster {self.config.name}")

    def close(self) -> None:
        for provider in self._made.values():
            provider.close()


def _info(row: dict) -> SliceInfo:
    """A slice row from the controller (Region.slices) as a SliceInfo."""
    return SliceInfo(row["slice_id"], row["group"], row["zone"], SliceState(row["state"]),
                     tuple(HostInfo(h["host_id"], h["address"]) for h in row["hosts"]),
                     row.get("detail", ""))


def slice_row(info: SliceInfo, region: str = "") -> dict:
    row = {"slice_id": info.slice_id, "group": info.group, "zone": info.zone,
           "state": info.state.value, "hosts": ",".join(h.address for h in info.hosts),
           "detail": info.detail}
    return {**row, "region": region} if region else row


def create_slice(providers: Providers, group_name: str, zone: str | None) -> SliceInfo:
    """One slice of the group, within its max_slices (the autoscaler adopts it), trying the
    group's zones in order past stock-outs."""
    group = providers.group(group_name)
    if zone is not None and zone not in group.zones:
        raise InvalidRequestError(f"--zone: scale group {group.name} does not use {zone!r} "
                                  f"(its zones: {', '.join(group.zones)})")
    provider = providers.for_region(group.region)
    if not os.environ.get(tokens.ENV_TOKEN):
        print(f"warning: ${tokens.ENV_TOKEN} is not set, so this slice's workers get no "
              "cluster token and cannot register; set it to the controller's "
              "STATE_DIR/cluster.token, or let the autoscaler make the slice",
              file=sys.stderr)
    alive = [s for s in provider.list_slices(group.name) if s.state not in _GONE]
    if len(alive) >= group.max_slices:
        raise InvalidRequestError(
            f"--scale-group: {group.name} is at max_slices {group.max_slices} "
            f"({', '.join(s.slice_id for s in alive)}); terminate one or raise max_slices")
    slice_id = f"{group.name[:48].rstrip('-')}-op-{new_id(nbytes=3)}"
    errors = []
    for candidate in [zone] if zone else list(group.zones):
        try:
            return provider.create_slice(group, candidate, slice_id)
        except CapacityError as exc:
            errors.append(str(exc))
    raise CapacityError("; ".join(errors))


def slice_verb(args: argparse.Namespace, providers: Providers, confirm: Any) -> int:
    action = args.slice_action
    if action == "create":
        info = create_slice(providers, args.scale_group, args.zone)
        _out([slice_row(info)], SLICE_COLUMNS, args.json, one=True)
    elif action == "list":
        found = providers.everything()
        if args.scale_group:
            _known_group(providers, args.scale_group)  # a typo is named, not an empty list
            found = [(r, s) for r, s in found if s.group == args.scale_group]
        _noted(providers)
        _out([slice_row(s, r) for r, s in found], SLICE_COLUMNS, args.json)
    elif action == "get":
        found = [(r, s) for r, s in providers.everything() if s.slice_id == args.slice_id]
        _noted(providers)
        if not found:
            raise NotFoundError(f"no slice {args.slice_id!r} in cluster "
                                f"{providers.config.name} (iris slice list names them)")
        _out([slice_row(found[0][1], found[0][0])], SLICE_COLUMNS, args.json, one=True)
    else:
        return _terminate(args, providers, confirm)
    return 0


def _terminate(args: argparse.Namespace, providers: Providers, confirm: Any) -> int:
    if bool(args.all) == bool(args.slice_ids):
        raise InvalidRequestError("slice terminate: name slice ids or pass --all (not both)")
    targets = providers.all_slices() if args.all else \
        [providers.find(s)[0] for s in args.slice_ids]  # every id checked before any delete
    if targets and not confirm(f"delete {len(targets)} slice(s): "
                               f"{', '.join(s.slice_id for s in targets)}?", args.yes):
        print("nothing deleted", file=sys.stderr)
        return 1
    for info in targets:
        providers.find(info.slice_id)[1].delete_slice(info.slice_id)
        print(f"deleted slice {info.slice_id}", file=sys.stderr)
    if args.json:
        print(json.dumps({"deleted": [s.slice_id for s in targets]}))
    return 0


def _known_group(providers: Providers, name: str) -> None:
    known = [g.name for g in providers.config.scale_groups()]
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        raise InvalidRequestError(f"--scale-group: no scale group {name!r}"
                                  f"{f' (did you mean {close[0]!r}?)' if close else ''}; "
                                  f"known: {', '.join(known) or 'none'}")


def _noted(providers: Providers) -> None:
    if providers.note:
        print(f"note: {providers.note}", file=sys.stderr)


def vm_rows(providers: Providers, controller_vm: Any) -> list[dict]:
    rows = []
    if controller_vm is not None:
        found = controller_vm.find()
        rows.append({"vm_id": controller_vm.vm.name, "role": "controller", "slice": "",
                     "zone": controller_vm.vm.zone,
                     "state": found.status if found else "NOT_FOUND",
                     "address": found.internal_ip if found else ""})
    for _, info in providers.everything():
        rows += [{"vm_id": h.host_id, "role": "worker", "slice": info.slice_id,
                  "zone": info.zone, "state": info.state.value, "address": h.address}
                 for h in info.hosts]
    _noted(providers)
    return rows


def _out(rows: list[dict], columns: list[str], as_json: bool, one: bool = False) -> None:
    if as_json and one:
        print(json.dumps(rows[0]))
    else:
        print_rows(rows, columns, as_json)


__all__ = ["Providers", "create_slice", "slice_row", "slice_verb", "vm_rows"]
