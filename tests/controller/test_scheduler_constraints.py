"""Constraint parsing and matching: EQ / NE / IN / EXISTS over worker attributes."""

from __future__ import annotations

import pytest

from iris.base.errors import InvalidRequestError
from iris.controller.scheduling.constraints import Op, matches_all, parse_constraints

WORKER = {"region": "us-central2", "zone": "us-central2-b", "preemptible": "true",
          "gpu-driver": "550"}


def test_constraints_scalar_means_equal_and_bools_match_text():
    cons = parse_constraints({"region": "us-central2", "preemptible": True})
    assert [c.op for c in cons] == [Op.EQ, Op.EQ]
    assert matches_all(cons, WORKER)
    assert not matches_all(parse_constraints({"preemptible": False}), WORKER)


@pytest.mark.parametrize(("spec", "matches"), [
    ({"zone": {"in": ["us-central2-a", "us-central2-b"]}}, True),
    ({"zone": {"in": ["us-east5-a"]}}, False),
    ({"region": {"ne": "us-east5"}}, True),
    ({"tier": {"ne": "spot"}}, True),  # a worker without the attribute is not "spot"
    ({"gpu-driver": {"exists": True}}, True),
    ({"gpu-driver": {"exists": False}}, False),
    ({"tier": {"exists": True}}, False),
    ({"gpu-driver": {"eq": 550}}, True),  # numbers compare as text: 550 == "550"
])
def test_constraints_operators_select_expected_workers(spec, matches):
    assert matches_all(parse_constraints(spec), WORKER) is matches


@pytest.mark.parametrize(("spec", "words"), [
    ({"zone": {"between": [1, 2]}}, "constraints.zone: unknown operator"),
    ({"zone": {"in": "us-central2-a"}}, "constraints.zone: 'in' takes a list"),
    ({"zone": {"in": []}}, "constraints.zone: 'in' takes a non-empty list"),
    ({"gpu": {"exists": "yes"}}, "constraints.gpu: 'exists' takes true or false"),
    ({"region": ["a", "b"]}, "constraints.region: expected a value"),
    ({"region": {"eq": "a", "ne": "b"}}, "constraints.region: expected a value"),
    ({"": "x"}, "constraints: key"),
])
def test_constraints_bad_spec_names_the_key(spec, words):
    with pytest.raises(InvalidRequestError) as err:
        parse_constraints(spec)
    assert words in str(err.value)


def test_constraints_equal_dicts_give_equal_tuples():
    a = parse_constraints({"zone": "z", "region": "r"})
    b = parse_constraints({"region": "r", "zone": "z"})
    assert a == b and hash(a) == hash(b)


def test_constraints_not_a_mapping_is_refused():
    with pytest.raises(InvalidRequestError, match="expected a mapping"):
        parse_constraints(["region", "x"])
