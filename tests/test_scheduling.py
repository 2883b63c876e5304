"""The units of work xdist hands out (tests/scheduling.py) and their order."""

from __future__ import annotations

import json
from types import SimpleNamespace

import scheduling
from scheduling import durations_from_census, longest_units_first, unit_of


def test_a_named_group_is_its_unit_even_with_an_at_sign_in_a_parameter():
    assert unit_of("tests/providers/test_slurm_faults.py::test_x@slurm") == "slurm"
    assert unit_of("tests/providers/test_provider_contract.py::test_x[slurm]@slurm") == "slurm"
    assert unit_of("tests/cli/test_cli.py::test_x[user@host]") == "tests/cli/test_cli.py"


def test_a_directory_sharing_a_session_fixture_is_one_unit_and_other_tests_go_by_module():
    assert unit_of("tests/dashboard/test_api.py::test_x") == "dashboard"
    assert unit_of("tests/backends/test_conformance.py::test_x[iris]") == "ray"
    assert unit_of("tests/backends/test_conformance.py::test_x[ray]@ray") == "ray"
    assert unit_of("tests/cluster/test_jobs.py::Test::test_x") == "tests/cluster/test_jobs.py"
    assert unit_of("tests/test_config.py::test_x") == "tests/test_config.py"


def test_units_are_kept_together_longest_first_and_unknown_ones_last(tmp_path, monkeypatch):
    path = tmp_path / "durations.json"
    path.write_text(json.dumps({"dashboard": 50.0, "tests/cluster/test_b.py": 80.0}))
    monkeypatch.setattr(scheduling, "DURATIONS", str(path))
    ids = ["tests/cluster/test_a.py::t1", "tests/dashboard/test_x.py::t1",
           "tests/cluster/test_b.py::t1", "tests/cluster/test_a.py::t2",
           "tests/dashboard/test_y.py::t1", "tests/cluster/test_b.py::t2"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    longest_units_first(items)
    assert [i.nodeid for i in items] == [
        "tests/cluster/test_b.py::t1", "tests/cluster/test_b.py::t2",
        "tests/dashboard/test_x.py::t1", "tests/dashboard/test_y.py::t1",
        "tests/cluster/test_a.py::t1", "tests/cluster/test_a.py::t2"]


def test_durations_from_a_census_sum_each_units_tests(tmp_path):
    census = tmp_path / "census.jsonl"
    census.write_text("".join(json.dumps({"test": t, "wall": w}) + "\n" for t, w in [
        ("tests/dashboard/test_api.py::a", 1.0), ("tests/dashboard/test_browser.py::b", 2.5),
        ("tests/cli/test_cli.py::c", 3.0), ("tests/providers/test_p.py::d[slurm]@slurm", 4.0)]))
    assert durations_from_census(str(census)) == {
        "slurm": 4.0, "dashboard": 3.5, "tests/cli/test_cli.py": 3.0}
