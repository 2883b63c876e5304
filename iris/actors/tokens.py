"""Cluster tokens: the secrets that give a peer a control-plane role. Not the check (hosting.py).

A controller keeps three secrets in its state directory, made on first start and kept
across restarts (workers must keep working through one):
- `cluster.token`: what an operator hands a new host so that it may join ("member" role):
  it buys a worker its own credential (`join`), nothing else.
- `admin.token`: held by operators ("admin" role), for admin methods.
- `controller.secret`: the controller's alone ("controller" role at its own node, for a
  Region served elsewhere); the key of the command tokens it gives each worker at join.
Each worker then holds two secrets of its own (controller/credentials.py): its credential
("worker" role, naming its id: it may speak only as itself) and the token the controller
presents on the commands it sends that worker ("controller" role there). Clients hold
none. Beside the secrets the state directory keeps `revoked_workers` (ids an operator
barred) and `worker_credentials` (the sha256 of each worker's credential: no secret).
Region actors live in the controller's process and are called in process
("internal"), which no token can claim. Tokens are 32 random bytes, written 0600.

A worker gets the cluster token from `--token-file`, from `IRIS_CLUSTER_TOKEN` (hex; removed
from the environment once read, so no task inherits it), or, on the controller's own host,
by reading it from the state directory the controller names: only a process that may read
that directory gets the role. With CURVE keys the token travels encrypted; without keys
(loopback only) it guards against every process that cannot read the controller's files.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from iris.base.errors import SecurityError

MEMBER, ADMIN = "member", "admin"
WORKER = "worker"  # one worker, speaking as itself (its credential names it)
CONTROLLER = "controller"  # the controller: commands to workers, Region changes
REVOKED = "revoked"  # a worker credential revoked: no method names it; the refusal says so
CLUSTER_TOKEN_FILE, ADMIN_TOKEN_FILE = "cluster.token", "admin.token"
CONTROLLER_SECRET_FILE = "controller.secret"
REVOKED_WORKERS_FILE = "revoked_workers"  # ids an operator revoked, one a line
WORKER_CREDENTIALS_FILE = "worker_credentials"  # which credential owns which id (hashes)
ENV_TOKEN = "IRIS_CLUSTER_TOKEN"


def load_or_create(path: Path) -> bytes:
    """The token in `path`, made (0600) if the file does not exist yet."""
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return read(path)


def read(path: Path) -> bytes:
    try:
        text = Path(path).read_text().strip()
        return bytes.fromhex(text)
    except (OSError, ValueError) as exc:
        raise SecurityError(f"cannot read the token in {path}: {exc}") from exc


def from_env() -> bytes | None:
    """The token handed down in IRIS_CLUSTER_TOKEN, removed so that no child inherits it."""
    raw = os.environ.pop(ENV_TOKEN, None)
    if not raw:
        return None
    try:
        return bytes.fromhex(raw)
    except ValueError as exc:
        raise SecurityError(f"{ENV_TOKEN} is not a hex token") from exc
