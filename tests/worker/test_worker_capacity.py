"""CapacityLedger: the worker never runs more than it advertises."""

from __future__ import annotations

import pytest

from iris.base.errors import ConflictError
from iris.base.resources import Resources
from iris.worker.capacity import CapacityExceededError, CapacityLedger


def test_capacity_over_cpu_refused_nothing_held():
    ledger = CapacityLedger(Resources(cpu=4, memory="8GB"))
    ledger.admit("a", Resources(cpu=3, memory="1GB"))
    with pytest.raises(CapacityExceededError, match="cpu"):
        ledger.admit("b", Resources(cpu=2))
    assert ledger.holders() == ["a"]
    ledger.release("a")
    ledger.admit("b", Resources(cpu=2))


def test_capacity_over_memory_refused():
    ledger = CapacityLedger(Resources(cpu=8, memory="1GB"))
    with pytest.raises(CapacityExceededError, match="memory"):
        ledger.admit("a", Resources(cpu=1, memory="2GB"))


def test_capacity_tpu_host_used_whole_by_one_task():
    ledger = CapacityLedger(Resources(cpu=8, tpu="v5litepod-8"))
    ledger.admit("a", Resources(cpu=1, tpu="v5litepod-8"))
    with pytest.raises(CapacityExceededError, match="tpu_hosts"):
        ledger.admit("b", Resources(cpu=1, tpu="v5litepod-8"))
    with pytest.raises(CapacityExceededError, match="v4-8"):
        ledger.admit("c", Resources(cpu=1, tpu="v4-8"))


def test_capacity_gpus_counted():
    ledger = CapacityLedger(Resources(cpu=8, gpu="H100", count=2))
    ledger.admit("a", Resources(cpu=1, gpu="H100"))
    ledger.admit("b", Resources(cpu=1, gpu="H100"))
    with pytest.raises(CapacityExceededError, match="gpus"):
        ledger.admit("c", Resources(cpu=1, gpu="H100"))


def test_capacity_same_attempt_twice_refused():
    ledger = CapacityLedger(Resources(cpu=8))
    ledger.admit("a", Resources(cpu=1))
    with pytest.raises(ConflictError, match="already holds"):
        ledger.admit("a", Resources(cpu=1))
