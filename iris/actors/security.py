"""CURVE encryption and ZAP authentication with cluster keys.

Not transport (node.py). A keys directory holds the cluster keypair (`cluster.key`,
`cluster.key_secret`) and `authorized/` with the public keys allowed to connect (the
cluster's own, plus any user's). Every node's ROUTER is a CURVE server with the cluster
secret key; every DEALER authenticates with the cluster keypair (or a user's own). A peer
whose key is not authorized fails the handshake, so nothing it sends is ever delivered —
let alone unpickled.

Binding to a non-loopback address without keys is refused: a cluster reachable from the
network without authentication would run any pickle sent to it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import urlparse

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from iris.base.errors import ConfigError, SecurityError

# The ZAP domain set on every ROUTER; the authenticator must be configured for the very
# same string (an authenticator set up for "*" matches only sockets with an EMPTY domain,
# so every client was denied when the two differed — seen here).
ZAP_DOMAIN = "iris"
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


def generate_keys(directory: str | Path) -> Path:
    """Create a cluster keypair and authorize it. Refuses to overwrite existing keys."""
    root = Path(directory)
    if (root / "cluster.key_secret").exists():
        raise SecurityError(f"{root} already holds cluster keys; refusing to overwrite them")
    (root / "authorized").mkdir(parents=True, exist_ok=True)
    public, secret = zmq.auth.create_certificates(str(root), "cluster")
    shutil.copy(public, root / "authorized" / "cluster.key")
    Path(secret).chmod(0o600)
    return root


class Security:
    """Loaded keys; applies CURVE options to sockets and runs the ZAP authenticator."""

    def __init__(self, server_public: bytes, server_secret: bytes, client_public: bytes,
                 client_secret: bytes, authorized_dir: Path):
        self.server_public = server_public
        self._server_secret = server_secret
        self.client_public = client_public
        self._client_secret = client_secret
        self.authorized_dir = authorized_dir

    @classmethod
    def load(cls, directory: str | Path, client_key: str | Path | None = None) -> Security:
        """Keys from `directory`; `client_key` is a user's own `.key_secret` file, if any."""
        root = Path(directory)
        secret_file = root / "cluster.key_secret"
        if not secret_file.exists():
            raise SecurityError(f"no cluster keys in {root} (create them: iris keys generate {root})")
        try:
            public, secret = zmq.auth.load_certificate(str(secret_file))
            c_public, c_secret = (zmq.auth.load_certificate(str(client_key)) if client_key
                                  else (public, secret))
        except (OSError, ValueError) as exc:
            raise SecurityError(f"cannot read keys in {root}: {exc}") from exc
        if secret is None or c_secret is None:
            raise SecurityError(f"{secret_file} holds no secret key")
        authorized = root / "authorized"
        if not authorized.is_dir():
            raise SecurityError(f"{authorized} is missing: no client could ever connect")
        return cls(public, secret, c_public, c_secret, authorized)

    def start_authenticator(self, ctx: zmq.Context) -> ThreadAuthenticator:
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve(domain=ZAP_DOMAIN, location=str(self.authorized_dir))
        return auth

    def configure_server(self, sock: zmq.Socket) -> None:
        sock.curve_server = True
        sock.curve_publickey = self.server_public
        sock.curve_secretkey = self._server_secret
        sock.zap_domain = ZAP_DOMAIN.encode()

    def configure_client(self, sock: zmq.Socket) -> None:
        sock.curve_serverkey = self.server_public
        sock.curve_publickey = self.client_public
        sock.curve_secretkey = self._client_secret


def is_loopback(endpoint: str) -> bool:
    if endpoint.startswith(("inproc://", "ipc://")):
        return True
    host = urlparse(endpoint).hostname or ""
    return host in _LOOPBACK_HOSTS or host.startswith("127.")


# What a node can bind: tcp://HOST:PORT (HOST may be * or an interface, PORT * for any free
# one), ipc://PATH or inproc://NAME.
_BIND = re.compile(r"^(tcp://(\*|\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]*]+):(\*|\d{1,5})|(ipc|inproc)://\S+)$")


def check_bind_allowed(endpoint: str, security: Security | None) -> None:
    if not isinstance(endpoint, str) or not _BIND.match(endpoint):
        raise ConfigError(f"bind address {endpoint!r}: expected tcp://HOST:PORT (HOST may be * "
                          "and PORT * for any free port), ipc://PATH or inproc://NAME, "
                          "e.g. tcp://127.0.0.1:*")
    if security is None and not is_loopback(endpoint):
        raise SecurityError(
            f"refusing to bind {endpoint} without CURVE keys: a non-loopback address needs "
            "keys (iris keys generate DIR, then pass them with IRIS_KEYS_DIR or security=)"
        )
