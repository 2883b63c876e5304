"""Cgroup detection: the host's real layout, and the clear warning where none is usable."""

from __future__ import annotations

import logging

from iris.base.ids import new_id
from iris.worker.cgroups import CgroupVersion, detect


def test_cgroups_host_without_memory_cgroup_warns_and_returns_none(tmp_path, caplog):
    (tmp_path / "self_cgroup").write_text("0::/\n")
    with caplog.at_level(logging.WARNING, logger="iris.worker.cgroups"):
        assert detect(tmp_path / "sys", tmp_path / "self_cgroup") is None
    assert "memory limits will NOT be enforced" in caplog.text


def test_cgroups_v2_layout_detected_and_memory_enabled_for_children(tmp_path):
    # A directory shaped like a cgroup2 mount: the parsing and the writes are what is tested.
    root = tmp_path / "sys"
    (root / "worker").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    (root / "worker" / "cgroup.subtree_control").write_text("")
    (tmp_path / "self_cgroup").write_text("0::/worker\n")
    host = detect(root, tmp_path / "self_cgroup")
    assert host is not None and host.version is CgroupVersion.V2
    assert host.parent == root / "worker"
    assert (root / "worker" / "cgroup.subtree_control").read_text() == "+memory"


def test_cgroups_real_host_detects_own_cgroup_when_available(cgroup_host):
    if cgroup_host is None:
        return  # the warning path is covered above
    own = cgroup_host.parent
    assert own.is_dir()
    child = cgroup_host.create(f"iris-{new_id()}", memory_limit_bytes=64 << 20)
    try:
        assert child.path.parent == own and child.pids() == []
    finally:
        assert child.remove()
