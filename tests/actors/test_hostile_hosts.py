"""Between hosts, CURVE on (network namespaces): a host holding the cluster keypair, as every
worker does, passes the handshake, so CURVE alone does not keep its pickles out of the control
plane; the control plane's own rule does (docs/protocol.md, Payloads). A host with a key not
authorized gets nothing through. Needs root and iproute2; skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from iris.actors import generate_keys

ROOT = Path(__file__).resolve().parents[2]

SERVER = """
import os, sys, time
from iris.actors import Node, NodeConfig, Registry, Security
from iris.actors.registry import REGISTRY_KEY
node = Node(NodeConfig(bind=os.environ["IRIS_BIND"]),
            security=Security.load(os.environ["IRIS_KEYS_DIR"])).start()
node.host(REGISTRY_KEY, Registry)
print("READY", node.address, flush=True)
sys.stdin.read()  # until the test closes it
"""

# A raw CURVE DEALER with the given keypair sends one pickled CALL to the registry and says
# what came back (or NOTHING).
PROBE = """
import os, pickle, sys
import msgpack, zmq, zmq.auth
class Touch:
    def __reduce__(self):
        return (os.system, ("touch " + os.environ["MARKER"],))
keys = os.environ["IRIS_KEYS_DIR"]
server_public, _ = zmq.auth.load_certificate(os.path.join(keys, "cluster.key"))
public, secret = zmq.auth.load_certificate(os.environ["CLIENT_SECRET"])
ctx = zmq.Context()
sock = ctx.socket(zmq.DEALER)
sock.linger = 0
sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = server_public, public, secret
sock.connect(os.environ["TARGET"])
sock.send(msgpack.packb([1, 1, 7, "/iris/registry", "list", 30000, 1,
                         pickle.dumps(((Touch(),), {}))]))
if sock.poll(int(os.environ["WAIT_MS"])):
    print("ANSWER", msgpack.unpackb(sock.recv(), raw=False)[3], flush=True)
else:
    print("NOTHING", flush=True)
"""


def _run(prefix: list[str], code: str, env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen([*prefix, sys.executable, "-c", textwrap.dedent(code)],
                            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **kw)


def test_a_host_with_the_cluster_keys_cannot_run_a_pickle_in_the_control_plane(tmp_path):
    from bench import _netns

    why = _netns.available()
    if why is not None:
        pytest.skip(why)
    keys = generate_keys(tmp_path / "keys")
    stranger = generate_keys(tmp_path / "stranger")  # a keypair not authorized
    marker = tmp_path / "loaded"
    with _netns.hosts(2) as net:
        server = _run(net.prefix(0), SERVER, {"IRIS_KEYS_DIR": str(keys),
                                              "IRIS_BIND": f"tcp://{net.ips[0]}:0"})
        try:
            address = server.stdout.readline().split()[1]
            base = {"IRIS_KEYS_DIR": str(keys), "TARGET": address, "MARKER": str(marker)}
            for secret, wait_ms, expected in (
                    (keys / "cluster.key_secret", 60_000, "ANSWER protocol"),
                    (stranger / "cluster.key_secret", 3_000, "NOTHING")):
                probe = _run(net.prefix(1), PROBE, {**base, "CLIENT_SECRET": str(secret),
                                                    "WAIT_MS": str(wait_ms)})
                out, _ = probe.communicate(timeout=120)
                assert out.strip() == expected, (secret, out)
                assert not marker.exists(), f"the registry loaded a pickle ({secret})"
        finally:
            server.communicate(input="", timeout=60)
