"""How `--dist loadgroup` hands tests to the xdist workers (issue 33).

xdist's loadgroup sends a test marked `xdist_group(NAME)` with the rest of its group, and
every other test on its own, so a module's tests were spread over all the workers: each
worker that ran one of them started the module's shared cluster or browser again, and each
started its own copy of a directory's session cluster (the dashboard's, the backends'), which
then idled until the run ended (~100 CPU-s of a 4-worker run went to such copies).

Here a unit of work is:
- a named group (`xdist_group`: "ray", "slurm", "roles"), as before;
- a whole directory where its tests share one session fixture (DIRECTORY_UNITS): its fixture
  starts once per run, in one worker;
- otherwise a whole module: its module-scoped fixtures start once per run.

Units go out longest first (tests/durations.json, seconds per unit from a census run), so a
long unit does not start last while the other workers have nothing left to do.
"""

from __future__ import annotations

import json
import os

# tests/<directory>/ -> its unit: the directory's tests need one session fixture (backends:
# the shared Iris cluster, and the Ray head of the "ray" group; dashboard: the `dash`
# cluster; logstore: the fake GCS server).
DIRECTORY_UNITS = {"backends": "ray", "dashboard": "dashboard", "logstore": "logstore"}
# A unit's session fixtures, stopped when its worker moves on to another unit instead of idling
# until the run ends (the Ray head, a cluster's workers and Slurm's daemons poll: ~66 CPU-s in
# one 4-worker run on a loaded machine, reaped at the end of the worker that ran "ray").
UNIT_FIXTURES = {"ray": ("ray_head", "iris_cluster"), "dashboard": ("dash",),
                 "logstore": ("fake_gcs",), "slurm": ("slurm_daemons",)}
DURATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to, from its id as xdist sees it (with an `@group`
    suffix after any parameters when it has an xdist_group)."""
    if nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[1]
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in DIRECTORY_UNITS:
        return DIRECTORY_UNITS[parts[1]]
    return path


def longest_units_first(items: list) -> None:
    """Sort `items` in place: each unit's tests together (in their collection order), units
    by their seconds in tests/durations.json, longest first; a unit missing from the file
    goes after the known ones."""
    try:
        with open(DURATIONS) as f:
            seconds = json.load(f)
    except (OSError, ValueError):
        seconds = {}
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        first.setdefault(unit_of(item.nodeid), index)
    items.sort(key=lambda item: (-seconds.get(unit_of(item.nodeid), 0.0),
                                 first[unit_of(item.nodeid)]))


def finish_unit_fixtures(item, nextitem) -> None:
    """After `item`'s teardown: if the next test is of another unit (or none), stop the
    session fixtures of `item`'s unit. A later test that asks for one starts it again."""
    unit = unit_of(item.nodeid)
    if nextitem is not None and unit_of(nextitem.nodeid) == unit:
        return
    manager = item.session._fixturemanager
    for name in UNIT_FIXTURES.get(unit, ()):
        for fixturedef in manager.getfixturedefs(name, item) or ():
            fixturedef.finish(item._request)  # a no-op for one that never started


def make_scheduler(config, log):
    """xdist's loadgroup scheduling with units as above, handed out in collection order
    (which longest_units_first made longest first), not by test count."""
    from xdist.scheduler import LoadGroupScheduling

    class UnitScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False
    return UnitScheduling(config, log)


def durations_from_census(*paths: str) -> dict[str, float]:
    """Seconds per unit from census files (`pytest --census FILE`), longest first. With
    several runs, a unit's share of each run's total is averaged (a loaded machine's peak
    slows whichever units run then), times the runs' mean total."""
    runs = []
    for path in paths:
        totals: dict[str, float] = {}
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                unit = unit_of(row["test"])
                totals[unit] = totals.get(unit, 0.0) + row["wall"]
        runs.append(totals)
    mean_total = sum(sum(t.values()) for t in runs) / len(runs)
    units = {u for t in runs for u in t}
    seconds = {u: mean_total * sum(t.get(u, 0.0) / (sum(t.values()) or 1.0) for t in runs)
               / len(runs) for u in units}
    return {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}
