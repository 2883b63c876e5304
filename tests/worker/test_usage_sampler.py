"""What an attempt uses, read from real processes: readings while it runs, totals as it ends
(also when it lived less than one interval, and when its cgroup's OOM killer ended it)."""

from __future__ import annotations

import os
import stat
import sys
import textwrap

import pytest

from iris.worker.outcome import OutcomeKind
from iris.worker.usage import GpuBusy, dir_size, read_procs
from iris.worker.usage_sampler import SamplerConfig, UsageSampler, samples_for

PYTHON = sys.executable
WAIT_S = 60.0

# Holds `MIB` MiB resident (every page written), says so, then waits to be stopped.
HOLD = textwrap.dedent("""
    import sys, time
    buf = bytearray({mib} << 20)
    for i in range(0, len(buf), 4096):
        buf[i] = 1
    print("holding", flush=True)
    time.sleep(600)
""")
# Burns CPU for `seconds`, then exits: shorter than any sampling interval used here.
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_reading_a_process_sees_its_resident_memory_and_cpu(attempts, lines):
    proc = attempts([PYTHON, "-c", HOLD.format(mib=64)], lines)
    lines.wait_for(lambda t: t == "holding")
    reading = read_procs([proc.pid])
    assert reading.processes == 1
    assert reading.rss_bytes >= 64 << 20
    assert reading.cpu_s > 0.0  # writing 64 MiB of pages took some


def test_readings_go_to_the_report_once_each_by_attempt_id(attempts, lines):
    proc = attempts([PYTHON, "-c", HOLD.format(mib=40)], lines, task_id="/u/j[0]")
    lines.wait_for(lambda t: t == "holding")
    sampler = UsageSampler(lambda: [proc], SamplerConfig(interval_s=0))
    sampler.sample_once()
    taken = sampler.take()
    assert sampler.take() == {}  # the same reading is never sent twice
    held = {"att-1": _Held("/u/j[0]", proc.spec.attempt)}
    [sample] = samples_for(taken, held)
    assert sample["attempt_id"] == "att-1" and sample["rss_bytes"] >= 40 << 20
    assert sample["disk_bytes"] == 0  # the first reading walks the (empty) work dir


def test_totals_of_an_attempt_shorter_than_an_interval_come_from_its_exit(attempts):
    proc = attempts([PYTHON, "-c", BURN.format(s=0.5)])
    outcome = proc.wait(WAIT_S)
    sampler = UsageSampler(lambda: [], SamplerConfig(interval_s=0))
    totals = sampler.finish(proc, outcome)  # never sampled: the kernel's rusage says it
    assert totals.cpu_s >= 0.45
    assert totals.peak_rss_bytes > 1 << 20
    assert not totals.oom_killed


def test_an_attempt_killed_by_its_cgroups_oom_killer_says_so(attempts, require_cgroups):
    limit = 64 << 20
    proc = attempts([PYTHON, "-c", "b = bytearray(400 << 20)\nfor i in range(0, len(b), 4096):"
                     " b[i] = 1"], cgroups=require_cgroups, memory_limit_bytes=limit)
    outcome = proc.wait(WAIT_S)
    assert outcome.kind is OutcomeKind.OOM_KILLED
    totals = UsageSampler(lambda: [], SamplerConfig(interval_s=0)).finish(proc, outcome)
    assert totals.oom_killed
    assert totals.peak_memory_bytes is not None and totals.peak_memory_bytes >= limit * 0.9


def test_the_work_dir_size_counts_files_and_stops_at_its_bound(tmp_path):
    for i in range(30):
        (tmp_path / f"f{i}").write_bytes(b"x" * 1000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "big").write_bytes(b"y" * 5000)
    assert dir_size(tmp_path, 1000) == 35_000
    assert dir_size(tmp_path, 10) <= 10 * 5000  # a lower bound, never a long walk


def test_sampling_interval_comes_from_the_environment():
    assert SamplerConfig.from_env({"IRIS_USAGE_INTERVAL_S": "0.5"}).interval_s == 0.5
    assert SamplerConfig.from_env({"IRIS_USAGE_INTERVAL_S": "soon"}).interval_s == 2.0
    assert SamplerConfig.from_env({}).interval_s == 2.0


def test_gpu_busy_is_read_from_nvidia_smi_where_there_is_one(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '0, 87'\necho '1, 3'\necho 'garbage'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    assert GpuBusy(str(fake)).read() == {0: 0.87, 1: 0.03}
    assert GpuBusy(os.devnull + "-missing").read() == {}


class _Held:
    """What samples_for reads of the worker's book: the task id and attempt number."""

    def __init__(self, task_id: str, number: int):
        self.task_id = task_id
        self.launch = type("L", (), {"attempt_number": number})()


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi found by GpuBusy()
