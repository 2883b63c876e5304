"""A wait's timeout, a cluster address and a ref are checked where the user hands them over,
with an error naming the argument: they failed deep inside ("arguments of
/iris/controller.wait cannot be sent: cannot convert float NaN to integer", "'<' not
supported between instances of 'float' and 'str'", "expected string or bytes-like object",
"'str' object has no attribute 'owner'") or waited a negative time. A group budget's
members given as one string is refused (it made the members 'b' and 'o' of "bob").
A real cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

import iris
from iris.actors.keys import CONTROLLER_KEY
from iris.base.errors import ConfigError, InvalidRequestError
from iris.client import budgets

pytestmark = pytest.mark.slow


def _one() -> int:
    return 1


@pytest.fixture(scope="module")
def finished(shared_cluster):
    from tests.conftest import as_current

    with as_current(shared_cluster):
        handle = iris.submit(_one)
        assert handle.result(timeout=120) == 1
    return handle


BAD_WAITS = [float("nan"), float("inf"), -1, "5", True]


@pytest.mark.parametrize("timeout", BAD_WAITS)
def test_a_jobs_wait_and_result_refuse_a_bad_timeout(jobs_cluster, finished, timeout):
    for wait in (finished.wait, finished.result):
        with pytest.raises(InvalidRequestError, match="timeout: expected None or a finite "
                           "number of seconds >= 0") as info:
            wait(timeout=timeout)
        assert info.value.field == "timeout"
    assert finished.result(timeout=0) == 1  # the handle still works


@pytest.mark.parametrize("timeout", BAD_WAITS)
def test_resolve_refuses_a_bad_timeout(jobs_cluster, timeout):
    for resolve in (iris.resolve, iris.resolve_all):
        with pytest.raises(InvalidRequestError, match="timeout: expected None or a finite"):
            resolve("trainer", timeout=timeout)


def test_connect_refuses_an_address_that_is_not_a_string():
    with pytest.raises(ConfigError, match="cluster address 123: expected tcp://HOST:PORT"):
        iris.connect(123)


def test_free_refuses_what_is_not_an_object_ref(jobs_cluster):
    with pytest.raises(InvalidRequestError, match="iris.free: expected an ObjectRef"):
        iris.free("x")


def test_a_group_budgets_members_as_one_string_are_refused(jobs_cluster):
    state_dir = jobs_cluster.node.call(jobs_cluster.address, CONTROLLER_KEY,
                                       "state_dir").result(30)
    before = budgets.list_budgets()
    with pytest.raises(InvalidRequestError, match=r"members: expected a list of user names, "
                       r"e\.g\. \['bob'\]") as info:
        budgets.set_budget("group:ml", hours=1, members="bob",
                           admin_token_file=Path(state_dir) / "admin.token")
    assert info.value.field == "members"
    assert budgets.list_budgets() == before
