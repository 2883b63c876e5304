"""Statistics for bench.ab: does a figure differ between two revisions by more than the
run-to-run spread? Pure functions over lists of numbers; no processes, no clock.

The test is a two-sided permutation test on the Mann-Whitney rank sum (midranks for ties):
exact (every split of the pooled runs) up to 60,000 splits (9 runs a side), else 20,000
random splits with a fixed seed. It assumes nothing about the shape of the noise (a loaded
machine gives long tails, not a bell). With 5 runs a side the smallest p it can give is
2/252 = 0.008; with 3 a side it is 0.1, so fewer than 4 rounds never show a difference at
alpha = 0.05.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics

ALPHA = 0.05
_EXACT_MAX = 60_000
_SAMPLES = 20_000


def _midranks(values: list[float]) -> list[float]:
    """Rank of each value among `values` (1-based), ties sharing the mean of their ranks."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def rank_test_p(a: list[float], b: list[float]) -> float:
    """Two-sided p-value that `a` and `b` come from one distribution (rank-sum permutation)."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return 1.0
    ranks = _midranks([*a, *b])
    centre = n * (n + m + 1) / 2
    observed = abs(sum(ranks[:n]) - centre) - 1e-9
    total = math.comb(n + m, n)
    if total <= _EXACT_MAX:
        splits = itertools.combinations(ranks, n)
        extreme = sum(1 for s in splits if abs(sum(s) - centre) >= observed)
        return extreme / total
    rng = random.Random(0)
    extreme = sum(1 for _ in range(_SAMPLES)
                  if abs(sum(rng.sample(ranks, n)) - centre) >= observed)
    return (extreme + 1) / (_SAMPLES + 1)


def compare(a: list[float], b: list[float], alpha: float = ALPHA) -> dict:
    """One figure's A and B runs: medians, B/A ratio, ranges, p and the verdict."""
    med_a, med_b = statistics.median(a), statistics.median(b)
    p = rank_test_p(a, b)
    return {
        "a": a, "b": b, "median_a": med_a, "median_b": med_b,
        "ratio": med_b / med_a if med_a else None,
        "ranges_overlap": max(a) >= min(b) and max(b) >= min(a),
        "p": p, "differs": p < alpha,
    }


def min_p(rounds: int) -> float:
    """The smallest p the test can give with `rounds` runs a side (no ties)."""
    return 2 / math.comb(2 * rounds, rounds) if rounds else 1.0
