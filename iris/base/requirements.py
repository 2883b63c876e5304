"""One pip requirement, checked and normalized: the worker keys its environments by these,
and the controller refuses a job whose requirements no worker could build (a newline, a NUL
byte, an option such as --index-url), at submit rather than in its first build."""

from __future__ import annotations

import re

from iris.base.errors import InvalidRequestError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a newline, a NUL...: all but a tab


def normalize_requirement(req: object) -> str:
    """One requirement, whitespace removed and its name in canonical form; bad ones refused."""
    if not isinstance(req, str) or not req.strip() or _CONTROL.search(req):
        raise InvalidRequestError(f"pip: invalid requirement {req!r}", "pip")
    text = re.sub(r"\s+", "", req)
    if text.startswith("-"):
        raise InvalidRequestError(
            f"pip: options are not allowed in requirements ({req!r})", "pip")
    m = _NAME.match(text)
    if m is None:
        raise InvalidRequestError(f"pip: requirement {req!r} does not start with a name", "pip")
    name = re.sub(r"[-_.]+", "-", m.group(0)).lower()
    return name + text[m.end():]
