"""bench.ab on a tiny repository: two revisions of a one-line `iris` and a benchmark that
reports what that `iris` says. The tool must run each revision's own code, find the
difference it was given, and find none between revisions whose code is the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench._abstats import compare, min_p, rank_test_p

ROOT = Path(__file__).resolve().parents[2]

# The tiny benchmark's figure: the revision's iris.SPEED plus a fixed run-to-run "noise"
# (the k-th run of the session gets NOISE[k]), so the outcome does not depend on luck.
_TINY_BENCH = """
import json, os, sys
from pathlib import Path
import iris

NOISE = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
counter = Path(os.environ["TINY_COUNTER"])
k = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(k + 1))
assert "--quick" in sys.argv
print("some table")
print(json.dumps({"speed": iris.SPEED + NOISE[k % len(NOISE)], "n": 2, "quick": True,
                  "name": "tiny"}))
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def tiny_repo(tmp_path: Path) -> dict[str, str]:
    """Commits: slow (SPEED 100), fast (200), slow_again (100, only a README changed)."""
    repo = tmp_path / "repo"
    (repo / "iris").mkdir(parents=True)
    (repo / "bench").mkdir()
    (repo / "bench" / "__init__.py").write_text("")
    (repo / "bench" / "tiny.py").write_text(_TINY_BENCH)
    _git(repo, "init", "-q")
    commits = {}
    for name, speed, readme in (("slow", 100, "a"), ("fast", 200, "a"), ("slow_again", 100, "b")):
        (repo / "iris" / "__init__.py").write_text(f"SPEED = {speed}\n")
        (repo / "README").write_text(readme)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", name)
        commits[name] = _git(repo, "rev-parse", "HEAD")
    commits["repo"] = str(repo)
    return commits


def _ab(repo: str, *args: str, counter: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TINY_COUNTER": str(counter), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "bench.ab", "--repo", repo, *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_ab_reports_the_difference_between_revisions_that_differ(tiny_repo, tmp_path):
    out = _ab(tiny_repo["repo"], tiny_repo["slow"], tiny_repo["fast"], "tiny", "--rounds", "5",
              "--json", counter=tmp_path / "k")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    speed = report["benches"]["tiny"]["speed"]
    # Each side ran its own iris: A's runs are 100 + noise, B's 200 + noise, alternating.
    assert speed["a"] == [103, 104, 105, 102, 105]
    assert speed["b"] == [201, 201, 209, 206, 203]
    assert speed["differs"] and speed["p"] < 0.01 and not speed["ranges_overlap"]
    assert speed["ratio"] == pytest.approx(203 / 104)
    assert set(report["benches"]["tiny"]) == {"speed"}  # settings echoed back are left out
    assert report["a"]["commit"] == tiny_repo["slow"]
    assert "speed" in out.stdout and "differs" in out.stdout


def test_ab_finds_no_difference_between_revisions_with_the_same_code(tiny_repo, tmp_path):
    out = _ab(tiny_repo["repo"], tiny_repo["slow"], tiny_repo["slow_again"], "bench.tiny",
              "--rounds", "5", "--bench-from", "each", "--json", counter=tmp_path / "k")
    assert out.returncode == 0, out.stderr
    speed = json.loads(out.stdout.strip().splitlines()[-1])["benches"]["tiny"]["speed"]
    assert speed["a"] == [103, 104, 105, 102, 105]
    assert speed["b"] == [101, 101, 109, 106, 103]
    assert not speed["differs"] and speed["p"] > 0.5
    assert "within spread" in out.stdout


def test_ab_runs_the_working_tree_with_its_uncommitted_change(tiny_repo, tmp_path):
    repo = Path(tiny_repo["repo"])
    (repo / "iris" / "__init__.py").write_text("SPEED = 1000\n")  # not committed
    out = _ab(tiny_repo["repo"], "HEAD", ".", "tiny", "--rounds", "1", "--json",
              counter=tmp_path / "k")
    assert out.returncode == 0, out.stderr
    speed = json.loads(out.stdout.strip().splitlines()[-1])["benches"]["tiny"]["speed"]
    assert speed["a"] == [103] and speed["b"] == [1001]
    assert "no difference can show" in out.stdout  # one round cannot tell


@pytest.mark.parametrize("args, message", [
    (["nope", "HEAD", "tiny"], "'nope' names no commit"),
    (["HEAD", "HEAD", "missing"], "no bench/missing.py"),
    (["HEAD", "HEAD", "../x"], "is not a module name"),
])
def test_ab_bad_request_is_one_line_error(tiny_repo, tmp_path, args, message):
    out = _ab(tiny_repo["repo"], *args, counter=tmp_path / "k")
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


def test_ab_failing_benchmark_is_reported_with_its_output(tiny_repo, tmp_path):
    repo = Path(tiny_repo["repo"])
    (repo / "bench" / "broken.py").write_text("raise SystemExit('tiny bench broke')\n")
    out = _ab(tiny_repo["repo"], "HEAD", "HEAD", "broken", counter=tmp_path / "k")
    assert out.returncode == 2
    assert "without a JSON last line" in out.stderr and "tiny bench broke" in out.stderr


def test_rank_test_p_exact_and_with_ties():
    assert rank_test_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(min_p(5))
    assert rank_test_p([1, 1, 1], [1, 1, 1]) == 1.0
    assert rank_test_p([1, 3, 5, 7], [2, 4, 6, 8]) > 0.5
    many = rank_test_p(list(range(20)), list(range(100, 120)))  # sampled, not enumerated
    assert many < 0.001
    assert compare([10.0, 12.0], [20.0, 22.0])["ratio"] == pytest.approx(21 / 11)


def test_ab_leaves_out_a_failed_run_and_says_so(tiny_repo, tmp_path):
    repo = Path(tiny_repo["repo"])
    # Fails on its third run (A of round 2) only, as a benchmark can on a loaded machine.
    (repo / "bench" / "flaky.py").write_text(_TINY_BENCH.replace(
        'assert "--quick" in sys.argv', 'assert k != 2, "flaky failure"'))
    out = _ab(tiny_repo["repo"], tiny_repo["slow"], tiny_repo["fast"], "flaky", "--rounds", "4",
              "--json", counter=tmp_path / "k")
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    speed = report["benches"]["flaky"]["speed"]
    assert speed["a"] == [103, 105, 102] and speed["b"] == [201, 201, 209, 206]
    assert len(report["a"]["failed"]["flaky"]) == 1 and not report["b"]["failed"]
    assert "1 run(s) failed" in out.stdout and "flaky failure" in out.stdout


def test_ab_counts_a_run_whose_json_says_it_failed_as_failed(tiny_repo, tmp_path):
    repo = Path(tiny_repo["repo"])
    # Like bench.fleet when the controller stopped answering: exit 0, a JSON last line
    # naming the failure and no figure for that size.
    (repo / "bench" / "caught.py").write_text(
        'import json\nprint(json.dumps({"n10000_failed": "TimeoutError: no answer"}))\n')
    out = _ab(tiny_repo["repo"], "HEAD", "HEAD", "caught", counter=tmp_path / "k")
    assert out.returncode == 2
    assert "reported a failure" in out.stderr and "no answer" in out.stderr
