"""Faults of a gang, on real processes: a multi-host gang runs whole or not at all, and never
two attempts of one of its tasks at once.

One region with two v4-16 slices (2 hosts each, LocalProvider worker processes with the
attributes a TPU VM has). Killing one host's worker -9 while a gang runs must stop the gang's
tasks on both hosts (the dead worker's by its watchdog, the live one's by the controller)
before the gang runs again whole on the other slice; nothing is left running afterwards.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import iris
from iris.client.jobs import _controller
from iris.controller.config import ScaleGroupConfig
from iris.controller.providers.local import LocalProvider
from tests.faults.markers import _runs, hold_checking_overlap

pytestmark = pytest.mark.slow

GANG = iris.Resources(tpu="v4-16", cpu=1)  # 8 chips on 2 hosts: a 2-task gang


def _starts(marker_dir, name="gang"):
    return sorted(marker_dir.glob(f"start-{name}-*"), key=lambda p: p.stat().st_mtime)


@pytest.fixture
def two_slices(tmp_path, wait_until):
    # The attributes make the local cluster offer v4-16 at submit; its hosts come from the
    # provider below.
    tpu = {"accelerator_type": "v4-16", "accelerator_count": "4"}
    with iris.local_cluster(workers=0, state_dir=tmp_path / "c", worker_attrs=tpu,
                            stop_grace_s=2.0) as ctx:
        provider = LocalProvider(ctx.address, tmp_path / "hosts", "r1")
        group = ScaleGroupConfig("v4-16", "r1", "tpu", "v4-16", 2, 4, ("r1-a",))
        try:
            for slice_id in ("s1", "s2"):
                provider.create_slice(group, "r1-a", slice_id)
            wait_until(lambda: len(_controller(ctx, "list_workers")) == 4, 180,
                       "four hosts of two slices to register")
            yield ctx
        finally:
            provider.close()


def test_a_gang_host_killed_9_stops_the_whole_gang_before_it_runs_again_whole(
        two_slices, tmp_path, wait_until):
    ctx = two_slices
    markers = tmp_path / "m"
    markers.mkdir()
    job = iris.submit(hold_checking_overlap, str(markers), resources=GANG, name="gang")
    first = wait_until(lambda: _starts(markers)[1:] and _starts(markers), 120,
                       "both tasks of the gang running")
    first_slice = {t["worker_id"].rsplit("-h", 1)[0] for t in job.tasks()}
    assert len(first_slice) == 1  # whole, on one slice
    victim_index, victim = 0, job.tasks()[0]["worker_id"]
    pids = {w["worker_id"]: int(w["attributes"]["pid"])
            for w in _controller(ctx, "list_workers")}
    os.kill(pids[victim], signal.SIGKILL)

    rerun = wait_until(lambda: len(_starts(markers)) >= 4 and _starts(markers)[2:], 180,
                       "the gang running again, both tasks")
    assert not list(markers.glob("overlap-*")), [p.read_text() for p in
                                                  markers.glob("overlap-*")]
    assert all(not _runs(int(p.read_text())) for p in first)  # the first gang is gone
    tasks = job.tasks()
    second_slice = {t["worker_id"].rsplit("-h", 1)[0] for t in tasks}
    assert len(second_slice) == 1 and second_slice != first_slice  # whole, on the other slice
    # Requeued whole: one more attempt for each task; the lost host's task spends its
    # preemption budget, its gang mate spends nothing, and nothing counts as a failure.
    assert [(t["attempts"], t["preemptions"], t["failures"]) for t in tasks] == [
        (2, 1 if t["index"] == victim_index else 0, 0) for t in tasks]

    (markers / "release").touch()
    assert sorted(job.result(timeout=180)) == sorted(
        p.name.split("-", 3)[3] for p in rerun)
    assert len(_starts(markers)) == 4  # no third start of either task
    wait_until(lambda: not any(_runs(int(p.read_text())) for p in _starts(markers)), 60,
               "no attempt process left behind")
    dead_host_dir = str(tmp_path / "hosts" / victim.rsplit("-h", 1)[0] / victim)
    wait_until(lambda: not _processes_naming(dead_host_dir), 60,
               "the dead worker's watchdog to exit once its attempts are gone")


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line contains `text`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if text.encode() in cmdline and _runs(int(entry.name)):
            found.append(int(entry.name))
    return found
