"""Layer 5, above iris.client: one API over three backends (in process, Iris, Ray).

`iris.submit`, `spawn`, `resolve`, `resolve_all`, `map`, `put`, `get`, `wait` act on the
backend current here: `with iris.backend("inprocess" | "ray" | "ray://H:P" | "tcp://H:P")`,
`iris.local_cluster()`, `iris.connect()`, or $IRIS_BACKEND (see select.py).
"""

from iris.backends.api import (
    backend_kind,
    current_backend,
    free,
    get,
    list_actors,
    map,
    map_unordered,
    put,
    resolve,
    resolve_all,
    spawn,
    spawn_job,
    submit,
    wait,
)
from iris.backends.common import ObjectRef, TaskInfo, task_info
from iris.backends.select import backend, install_default

install_default()

__all__ = ["ObjectRef", "TaskInfo", "backend", "backend_kind", "current_backend", "free", "get",
           "list_actors", "map", "map_unordered", "put", "resolve", "resolve_all", "spawn",
           "spawn_job", "submit", "task_info", "wait"]
