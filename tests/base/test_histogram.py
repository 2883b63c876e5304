"""The duration histogram /metrics renders: buckets are cumulative and bounds are upper edges."""

import pytest

from iris.base.histogram import Histogram


def test_histogram_observations_land_in_cumulative_buckets():
    h = Histogram((0.001, 0.01, 0.1))
    for seconds in (0.0005, 0.001, 0.005, 0.05, 3.0):
        h.observe(seconds)
    data = h.as_dict()
    assert data["buckets"] == {0.001: 2, 0.01: 3, 0.1: 4}  # 3.0 s is only in +Inf (count)
    assert data["count"] == 5 and data["sum_s"] == pytest.approx(3.0565)
    assert h.quantile(0.5) == 0.01 and h.quantile(1.0) is None


def test_histogram_rejects_unsorted_bounds():
    with pytest.raises(ValueError, match="ascending"):
        Histogram((0.1, 0.01))
