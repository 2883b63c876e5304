"""The current cluster context: a ContextVar, never a module global value.

Not the context itself (context.py); this tiny module exists so hosting and context can
both reach the variable without importing each other.
"""

from __future__ import annotations

import contextvars
from typing import Any

current_context: contextvars.ContextVar[Any] = contextvars.ContextVar("iris_context",
                                                                      default=None)
