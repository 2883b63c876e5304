"""Write pytest's assertion-rewritten .pyc of every test module once, before the xdist workers
start (scripts/test.sh), on both cores.

pytest rewrites the asserts of each test module and conftest.py (parse, rewrite, compile) and
caches the result in __pycache__ (`*-pytest-<version>.pyc`). On a fresh clone there is no
cache yet, and the five workers all start together: each rewrote all ~200 modules, ~4.7 CPU-s
apiece (collecting took 8.0 CPU-s cold, 3.4 warm, per worker). Here they are written once, by
two processes; the workers then find them.

This uses pytest's own rewriting functions, which are not a public API: if they change, this
says so and does nothing, and the workers rewrite as before (slower, same result).
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _rewrite(paths: list[Path]) -> int:
    from _pytest.assertion import rewrite

    class _State:  # what _write_pyc asks of pytest's AssertionState
        @staticmethod
        def trace(*_args) -> None:
            pass

    written = 0
    for path in paths:
        pyc = rewrite.get_cache_dir(path) / (path.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(path, pyc) is not None:
            continue  # already written for this source
        if not rewrite.try_makedirs(pyc.parent):
            continue
        source_stat, code = rewrite._rewrite_test(path, None)
        written += bool(rewrite._write_pyc(_State, code, source_stat, pyc))
    return written


def main() -> int:
    if sys.dont_write_bytecode:
        return 0  # the workers could not read what is not written either
    paths = sorted([*TESTS.rglob("test_*.py"), *TESTS.rglob("conftest.py")])
    halves = [paths[0::2], paths[1::2]]
    try:
        with ProcessPoolExecutor(len(halves)) as pool:
            written = sum(pool.map(_rewrite, halves))
    except (ImportError, AttributeError, TypeError) as exc:
        print(f"tests/prewarm.py: pytest's rewriting API changed ({exc!r}); "
              "each worker rewrites the test modules itself", file=sys.stderr)
        return 0
    print(f"rewrote the asserts of {written} of {len(paths)} test modules", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
