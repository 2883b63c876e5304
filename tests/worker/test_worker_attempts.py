"""The worker's book of attempts (attempts.handle): events in, effects and updates out.

Pure kernel tests: no processes, no sockets, no clock; `now` is CLOCK_MONOTONIC seconds.
"""

from __future__ import annotations

import pytest

from iris.wire import control
from iris.wire.fencing import FENCE_AFTER_S
from iris.worker import attempts
from iris.worker.attempts import (
    Acked,
    BeginStart,
    BeginStop,
    Book,
    Exited,
    Flush,
    LeaseRenewed,
    PhaseReached,
    Start,
    StartFailed,
    Stop,
    Tick,
)
from iris.worker.outcome import Outcome, OutcomeKind, classify_exit

T0 = 1000.0
LEASE_UNTIL = T0 + FENCE_AFTER_S


def launch(attempt_id: str = "a1", number: int = 0) -> control.Launch:
    return control.Launch(attempt_id=attempt_id, job_id="/u/job", task_index=2,
                          attempt_number=number,
                          entrypoint=control.Entrypoint("command", argv=("true",)), env={})


def leased() -> Book:
    return Book(lease_until=LEASE_UNTIL)


def handle(book: Book, event, now: float = T0) -> list:
    same, effects = attempts.handle(book, event, now)
    assert same is book
    return effects


def updates(book: Book) -> list[tuple[str, str, int | None, str]]:
    return [(u.attempt_id, u.status, u.exit_code, u.error) for _, u in book.updates.values()]


def running(book: Book, attempt_id: str = "a1") -> Book:
    handle(book, Start(launch(attempt_id)))
    handle(book, PhaseReached(attempt_id, "running"))
    return book


def test_start_with_the_lease_held_begins_at_once_and_a_resent_start_is_a_no_op():
    book = leased()
    assert handle(book, Start(launch())) == [BeginStart(launch())]
    assert handle(book, Start(launch())) == []
    assert list(book.held) == ["a1"] and not book.updates


def test_start_on_a_fresh_worker_without_any_lease_begins():
    assert handle(Book(), Start(launch())) == [BeginStart(launch())]


def test_start_while_the_lease_lapsed_waits_for_its_renewal_then_begins():
    book = Book(lease_until=T0 - 1)
    assert handle(book, Start(launch())) == []
    assert handle(book, Tick(), T0 + 1) == []
    assert handle(book, LeaseRenewed(T0 + 2 + FENCE_AFTER_S), T0 + 2) == [BeginStart(launch())]
    assert handle(book, LeaseRenewed(T0 + 3 + FENCE_AFTER_S), T0 + 3) == []  # begun once


def test_start_waiting_one_whole_lease_is_reported_preempted_and_never_begins():
    book = Book(lease_until=T0 - 1)
    handle(book, Start(launch()))
    assert handle(book, Tick(), T0 + FENCE_AFTER_S - 0.01) == []
    assert handle(book, Tick(), T0 + FENCE_AFTER_S) == [Flush()]
    assert not book.held
    [(attempt_id, status, _, error)] = updates(book)
    assert (attempt_id, status) == ("a1", "preempted") and "lease lapsed" in error
    assert handle(book, LeaseRenewed(T0 + 60), T0 + 30) == []


def test_stop_of_a_start_waiting_for_the_lease_ends_it_before_it_runs():
    book = Book(lease_until=T0 - 1)
    handle(book, Start(launch()))
    assert handle(book, Stop("a1", 2.0)) == [Flush()]
    assert updates(book) == [("a1", "exited", 143, "stopped on request before it started")]
    assert handle(book, LeaseRenewed(T0 + 60)) == []


def test_stop_while_starting_waits_for_the_process_then_stops_it_with_its_grace():
    book = leased()
    handle(book, Start(launch(number=3)))
    assert handle(book, Stop("a1", 2.5)) == []
    assert handle(book, PhaseReached("a1", "building")) == []
    assert handle(book, PhaseReached("a1", "running")) == [
        BeginStop("a1", "/u/job[2]", 3, 2.5)]


def test_stop_of_a_running_attempt_begins_the_stop_and_keeps_it_held_until_it_exits():
    book = running(leased())
    assert handle(book, Stop("a1", None)) == [BeginStop("a1", "/u/job[2]", 0, None)]
    assert list(book.held) == ["a1"]


def test_stop_of_an_attempt_not_held_changes_nothing():
    book = running(leased())
    before = (dict(book.held), list(book.updates))
    assert handle(book, Stop("other", 1.0)) == []
    assert (dict(book.held), list(book.updates)) == before


def test_phases_are_queued_in_order_and_a_running_after_the_exit_is_dropped():
    book = leased()
    handle(book, Start(launch()))
    handle(book, PhaseReached("a1", "building"))
    handle(book, Exited("a1", classify_exit(0), b"result"))
    handle(book, PhaseReached("a1", "running"))  # lost the race with its own exit
    assert [status for _, status, _, _ in updates(book)] == ["building", "exited"]


def test_success_is_exited_0_with_the_result_and_asks_for_a_report_now():
    book = running(leased())
    assert handle(book, Exited("a1", classify_exit(0), b"pickled")) == [Flush()]
    _, update = book.updates[("a1", "exited")]
    assert (update.exit_code, update.result, update.error) == (0, b"pickled", "")
    assert not book.held


def test_failure_names_its_exit_code_then_the_stderr_tail():
    book = running(leased())
    handle(book, Exited("a1", classify_exit(3), None, b"Traceback\nValueError: bad\n"))
    assert updates(book)[-1] == ("a1", "exited", 3, "exited with code 3\nTraceback\n"
                                 "ValueError: bad")


def test_out_of_memory_names_the_signal_and_the_limit():
    book = running(leased())
    outcome = classify_exit(-9, oom_kills=1, memory_limit_bytes=2 << 30)
    handle(book, Exited("a1", outcome))
    assert updates(book)[-1] == ("a1", "exited", 137,
                                 "killed by SIGKILL: out of memory (limit 2 GiB)")


def test_an_end_without_an_exit_status_reads_as_killed():
    book = running(leased())
    handle(book, Exited("a1", Outcome(OutcomeKind.UNKNOWN, detail="exit status unknown")))
    assert updates(book)[-1] == ("a1", "exited", 137, "exit status unknown")


def test_failure_after_the_lease_lapsed_is_preempted_by_fencing_not_a_failure():
    book = running(leased())
    handle(book, Exited("a1", classify_exit(-15)), LEASE_UNTIL)
    [(attempt_id, status, code, error)] = [u for u in updates(book) if u[1] != "running"]
    assert (status, code) == ("preempted", None) and "fencing" in error


def test_an_exit_handled_after_the_lease_was_renewed_is_still_the_fence_s():
    """A partition heals while the watchdog's SIGTERM is ending the attempt: on a loaded
    host its exit may be handled after the renewal, and it is still a preemption."""
    book = running(leased())
    healed = LEASE_UNTIL + 3
    handle(book, LeaseRenewed(healed + FENCE_AFTER_S), healed)
    handle(book, Exited("a1", classify_exit(-15)), healed + 1)
    [(attempt_id, status, code, error)] = [u for u in updates(book) if u[1] != "running"]
    assert (status, code) == ("preempted", None) and "fencing" in error


def test_a_failure_of_an_attempt_begun_after_the_lapse_is_its_own():
    book = leased()
    healed = LEASE_UNTIL + 3
    handle(book, LeaseRenewed(healed + FENCE_AFTER_S), healed)
    handle(book, Start(launch()), healed + 1)
    handle(book, PhaseReached("a1", "running"), healed + 1)
    handle(book, Exited("a1", classify_exit(-15)), healed + 2)
    assert updates(book)[-1][:3] == ("a1", "exited", 143)


def test_success_after_the_lease_lapsed_is_still_a_success():
    book = running(leased())
    handle(book, Exited("a1", classify_exit(0), b"r"), LEASE_UNTIL + 5)
    assert updates(book)[-1][:3] == ("a1", "exited", 0)


def test_start_failure_reports_its_exit_code_and_why():
    book = leased()
    handle(book, Start(launch()))
    assert handle(book, StartFailed("a1", "could not start: command not found: x", 127)) == [
        Flush()]
    assert updates(book) == [("a1", "exited", 127, "could not start: command not found: x")]
    assert not book.held


def test_acknowledged_updates_are_dropped_and_unacknowledged_ones_stay():
    book = leased()
    for attempt_id in ("a1", "a2"):
        running(book, attempt_id)
    sent = tuple((key, seq) for key, (seq, _) in book.updates.items())
    assert handle(book, Acked(sent, frozenset({"a1"}))) == []
    assert updates(book) == [("a2", "running", None, "")]


def test_an_update_replaced_after_it_was_sent_survives_the_acknowledgement_of_the_old():
    book = running(leased())
    sent = tuple((key, seq) for key, (seq, _) in book.updates.items())
    handle(book, PhaseReached("a1", "running"))  # re-queued under the same key, newer
    handle(book, Acked(sent, frozenset({"a1"})))
    assert updates(book) == [("a1", "running", None, "")]


@pytest.mark.parametrize("event", [
    PhaseReached("ghost", "building"), StartFailed("ghost", "x"), Stop("ghost", 1.0)])
def test_events_about_attempts_never_held_change_nothing(event):
    book = running(leased())
    before = (dict(book.held), list(book.updates), book.next_seq)
    assert handle(book, event) == []
    assert (dict(book.held), list(book.updates), book.next_seq) == before


def test_exits_after_the_machine_is_ending_are_preemptions_not_failures():
    book = running(running(leased(), "a1"), "a2")
    handle(book, attempts.Ending("Slurm sent SIGTERM to job 7"))
    handle(book, Exited("a1", classify_exit(143)))  # killed with its machine
    handle(book, Exited("a2", classify_exit(0)))  # finished in time: still a success
    assert updates(book)[-2:] == [
        ("a1", "preempted", None, "its machine is going away: Slurm sent SIGTERM to job 7"),
        ("a2", "exited", 0, "")]
