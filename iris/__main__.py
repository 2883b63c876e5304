"""`python -m iris` is the `iris` command; running a worker skips the CLI (worker/command.py)."""

import sys

if sys.argv[1:2] == ["worker"]:
    from iris.worker.command import main as worker

    code = worker(sys.argv[2:])
    if code is not None:
        sys.exit(code)

from iris.cli import main  # noqa: E402 - only when the worker's own entry did not run

sys.exit(main())
