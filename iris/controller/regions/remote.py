"""Region actors served in other processes: the controller's setting that names them, and
what such a process runs.

By default each region's actor lives in the controller's process, made when a worker first
names the region (regions/region.py RegionCarrier). `ControllerConfig.region_actors` (a cluster file's
`regions.<name>.actor_address`) names, per region, the node that serves its actor instead:
the controller then makes none for it and calls that node (key `region_key(region)`) with
its own token, the "controller" role there (credentials.controller_token). The inventory
pushes and gang frames are the same calls as in process, so a Region actor elsewhere starts
empty and is sent its whole inventory by the first push; one restarted refuses the next
delta and is sent the whole again.

Such a region is not autoscaled here (its scale groups would need a provider in that
process): a region with scale groups and an address is refused. `serve_region` is the other
side: what a process hosting one runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from iris.base.errors import ConfigError
from iris.controller.config_reader import NAME, bad_name

_ADDRESS = re.compile(r"^(tcp://[^\s:/]+:(\d{1,5})|ipc://\S+)$")


def check_region_actors(value: Any, autoscaled: set[str] | frozenset[str] = frozenset(),
                        path: str = "region_actors", suffix: str = "") -> dict[str, str]:
    """`value` as region -> address, checked whole: ConfigError naming the first bad entry
    (a region name, an address that is not tcp://HOST:PORT or ipc://PATH, a port of 0,
    an autoscaled region) and nothing else kept."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: expected a mapping of region -> address, got "
                          f"{type(value).__name__}")
    out: dict[str, str] = {}
    for region, address in value.items():
        if not isinstance(region, str) or not NAME.match(region):
            raise ConfigError(f"{path}: {bad_name(str(region)[:80])}")
        where = f"{path}.{region}{suffix}"
        match = _ADDRESS.match(address) if isinstance(address, str) else None
        if match is None:
            raise ConfigError(f"{where}: {address!r:.80} is not tcp://HOST:PORT or "
                              "ipc://PATH")
        if match.group(2) is not None and not 0 < int(match.group(2)) < 65536:
            raise ConfigError(f"{where}: {address!r}: the port must be 1-65535 (a node "
                              "that serves a Region actor has a fixed address)")
        if region in autoscaled:
            raise ConfigError(f"{where}: region {region!r} has scale groups, which its actor "
                              "in this controller's process runs; a Region actor served "
                              "elsewhere is not autoscaled (remove the address or the groups)")
        out[region] = address
    return out


def serve_region(node: Any, region: str, controller_token: bytes) -> Any:
    """Host `region`'s Region actor on `node` for a controller elsewhere that presents
    `controller_token` (its `credentials.controller_token`). The hosted actor."""
    from iris.actors import tokens  # here: the config's check needs no actors
    from iris.actors.keys import region_key
    from iris.controller.regions.region import Region

    node.grant(controller_token, tokens.CONTROLLER)
    return node.host(region_key(region), Region, (region, [], node.clock))


__all__ = ["check_region_actors", "serve_region"]
