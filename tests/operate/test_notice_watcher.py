"""NoticeWatcher against the fake GCE metadata server: which values are a notice, and when."""

from __future__ import annotations

import threading

import pytest

from iris.worker.preemption_notice import (
    NOTICE_FILE,
    Notice,
    NoticeWatcher,
    read_notice,
    write_notice_files,
)
from tests.providers.fake_metadata_server import FakeMetadataServer


class _Seen:
    def __init__(self) -> None:
        self.notices: list[Notice] = []
        self.event = threading.Event()

    def __call__(self, notice: Notice) -> None:
        self.notices.append(notice)
        self.event.set()


@pytest.fixture
def metadata():
    with FakeMetadataServer() as server:
        yield server


def _watch(metadata: FakeMetadataServer, seen: _Seen) -> NoticeWatcher:
    return NoticeWatcher(seen, base_url=f"http://{metadata.host}/computeMetadata/v1",
                         hang_s=2).start()


def test_migration_is_no_notice_but_a_terminating_maintenance_event_is(metadata):
    seen = _Seen()
    watcher = _watch(metadata, seen)
    try:
        metadata.wait_for_watchers("maintenance-event")
        metadata.raise_maintenance("MIGRATE_ON_HOST_MAINTENANCE")
        metadata.wait_for_watchers("maintenance-event", count=2)  # it looked, and waits on
        assert seen.notices == []
        metadata.raise_maintenance("TERMINATE_ON_HOST_MAINTENANCE")
        assert seen.event.wait(30)
        [notice] = seen.notices
        assert notice.reason == "GCE instance/maintenance-event=TERMINATE_ON_HOST_MAINTENANCE"
    finally:
        watcher.stop()


def test_a_notice_given_before_the_watcher_started_counts_once(metadata):
    metadata.raise_preemption()
    metadata.raise_maintenance()
    seen = _Seen()
    watcher = _watch(metadata, seen)
    try:
        assert seen.event.wait(30)
        metadata.wait_for_watchers("preempted", count=0)
        watcher.stop()
        assert len(seen.notices) == 1
    finally:
        watcher.stop()


def test_metadata_server_refuses_requests_without_the_flavor_header(metadata):
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://{metadata.host}/computeMetadata/v1/instance/preempted",
                               timeout=10)
    assert err.value.code == 403


def test_notice_files_reach_every_attempt_directory(tmp_path):
    attempts = tmp_path / "attempts"
    for name in ("a-0", "b-1"):
        (attempts / name).mkdir(parents=True)
    notice = Notice("GCE instance/preempted=TRUE", 1_700_000_030.0)
    written = write_notice_files(attempts, notice)
    assert [p.parent.name for p in written] == ["a-0", "b-1"]
    assert read_notice(attempts / "a-0") == notice
    (attempts / "b-1" / NOTICE_FILE).write_text("{not json")
    assert read_notice(attempts / "b-1") is None
    assert read_notice(tmp_path / "nowhere") is None
    assert write_notice_files(tmp_path / "missing", notice) == []


def test_a_later_notice_does_not_replace_the_first(tmp_path):
    """Slurm's SIGTERM reaches the worker too: its own "worker stopping" notice follows the
    Slurm one at once, and the task, reading after both, must be told the cause."""
    (tmp_path / "attempts" / "a-0").mkdir(parents=True)
    first = Notice("Slurm preempted job 10 (GraceTime 5 s, KillWait 5 s)", 1_700_000_010.0)
    write_notice_files(tmp_path / "attempts", first)
    later = Notice("worker stopping: stopped", 1_700_000_012.0)
    assert write_notice_files(tmp_path / "attempts", later) == []
    assert read_notice(tmp_path / "attempts" / "a-0") == first
    assert [p.name for p in (tmp_path / "attempts" / "a-0").iterdir()] == [NOTICE_FILE]


def test_auto_mode_watches_only_when_a_metadata_server_answers(metadata):
    from iris.worker.preemption_notice import start_watching

    seen = _Seen()
    watcher = NoticeWatcher(seen, base_url=f"http://{metadata.host}/computeMetadata/v1",
                            hang_s=2)
    watcher.start_if_answering()  # the fake answers as GCE does: watching
    try:
        metadata.raise_preemption()
        assert seen.event.wait(30)
    finally:
        watcher.stop()
    quiet = NoticeWatcher(_Seen(), base_url="http://127.0.0.1:9/computeMetadata/v1")
    quiet.start_if_answering()  # nothing there: no thread started
    assert not any(t.is_alive() for t in quiet._threads)
    assert start_watching("off", seen) is None
    with pytest.raises(Exception, match="--preemption-notice: must be one of auto, gce, off"):
        start_watching("always", seen)
