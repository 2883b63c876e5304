"""`python -m iris` is the `iris` command."""

import sys

from iris.cli import main

sys.exit(main())
