"""Write the caches every xdist worker would otherwise fill for itself at once on a fresh clone,
once, before the workers start (scripts/test.sh), on both cores.

pytest rewrites the asserts of each test module and conftest.py (parse, rewrite, compile) and
caches the result in __pycache__ (`*-pytest-<version>.pyc`). On a fresh clone there is no
cache yet, and the five workers all start together: each rewrote all ~200 modules, ~4.7 CPU-s
apiece (collecting took 8.0 CPU-s cold, 3.4 warm, per worker). Here they are written once, by
two processes; the workers then find them.

Hypothesis likewise collects the literal constants of every local module it finds imported
(Iris's, bench's, examples') to draw from, and caches them under .hypothesis/constants; each
worker parsed all of them, ~1.5 CPU-s apiece. They are cached here the same way.

Both use functions that are not a public API of pytest or Hypothesis: if they change, this
says so and does nothing, and the workers fill the caches as before (slower, same result).
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


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


def _constants(paths: list[Path]) -> int:
    import types

    from hypothesis.internal.constants_ast import constants_from_module

    for path in paths:
        module = types.ModuleType(path.stem)
        module.__file__ = str(path)  # all constants_from_module reads (its source)
        constants_from_module(module)
    return 0


def main() -> int:
    if sys.dont_write_bytecode:
        return 0  # the workers could not read what is not written either
    tests = sorted([*TESTS.rglob("test_*.py"), *TESTS.rglob("conftest.py")])
    local = sorted(p for d in ("iris", "bench", "examples") for p in (ROOT / d).rglob("*.py"))
    try:
        with ProcessPoolExecutor(2) as pool:
            rewrites = [pool.submit(_rewrite, tests[0::2]), pool.submit(_rewrite, tests[1::2])]
            constants = pool.submit(_constants, local)
            written = sum(f.result() for f in rewrites)
            constants.result()
    except (ImportError, AttributeError, TypeError) as exc:
        print(f"tests/prewarm.py: pytest's or Hypothesis's API changed ({exc!r}); each worker "
              "fills its caches itself", file=sys.stderr)
        return 0
    print(f"prewarm: rewrote the asserts of {written} of {len(tests)} test modules; "
          f"Hypothesis's constants of {len(local)} modules cached", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
