"""Slurm's SIGTERM read as the preemption notice (worker/slurm_notice.py), and the GPUs a
worker was given by its launcher handed to tasks by name (worker/main.visible_gpus)."""

from __future__ import annotations

import threading

import pytest

from iris.base.clock import FakeClock
from iris.base.errors import ConfigError
from iris.base.resources import Resources
from iris.worker.main import visible_gpus
from iris.worker.slurm_notice import SlurmNotice, notice_for


def test_notice_for_a_preemption_counts_grace_time_and_kill_wait():
    preempted = notice_for("7", True, 1000.0, kill_wait_s=30.0, grace_time_s=120.0)
    assert preempted.deadline == 1150.0 and "Slurm preempted job 7" in preempted.reason
    ended = notice_for("7", False, 1000.0, kill_wait_s=30.0, grace_time_s=120.0)
    assert ended.deadline == 1030.0 and "Slurm is ending job 7" in ended.reason
    unknown = notice_for("7", None, 1000.0, kill_wait_s=30.0, grace_time_s=120.0)
    assert unknown.deadline == 1030.0  # squeue could not say: the shorter, safe deadline


def test_first_sigterm_marks_the_worker_then_notifies_once_then_stops(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("IRIS_SLURM_KILL_WAIT_S", "5")
    monkeypatch.setenv("IRIS_SLURM_GRACE_TIME_S", "10")
    seen: list = []
    stop, sent = threading.Event(), threading.Event()
    watcher = SlurmNotice(seen.append, stop, on_signal=lambda why: seen.append(("ending", why)),
                          on_sent=sent.set, clock=FakeClock(), query=lambda job: job == "42")
    watcher.fire()
    assert seen[0] == ("ending", "Slurm sent SIGTERM to job 42")  # in the handler, first
    watcher.fire()  # Slurm signals again at the end of GraceTime: nothing more
    assert stop.wait(30) and sent.is_set()
    notices = [s for s in seen if not isinstance(s, tuple)]
    assert len(notices) == 1 and notices[0].time_left(FakeClock().wall()) == 15.0


def test_visible_gpus_names_the_devices_the_launcher_gave(monkeypatch):
    h100x4 = Resources(cpu=1, memory=1 << 30, gpu="H100", count=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert visible_gpus(h100x4) == ("4", "5", "6", "7")
    assert visible_gpus(Resources(cpu=1, memory=1 << 30)) == ()  # no GPUs advertised
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(ConfigError, match="advertises 4 H100 GPUs but CUDA_VISIBLE_DEVICES"):
        visible_gpus(h100x4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_gpus(h100x4) == ()  # the whole machine's, 0..N-1
