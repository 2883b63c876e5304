"""Cluster tier: the bulk path between real hosts made of network namespaces, CURVE on.

Host 0 runs the registry and the sender (a trainer, a caller); the others receive. Every
process is driven over its stdin/stdout (this test's process has no address on the
hosts' bridge). Needs root and iproute2 (CI has both); skipped with the reason otherwise.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from iris.actors import generate_keys

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20

PRELUDE = """
import json, logging, os, sys, threading
import numpy as np
import iris
if os.environ.get("LOG_DEBUG"):
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
def say(*parts):
    print(*parts, flush=True)
def commands():
    for line in sys.stdin:
        yield line.split()
    os._exit(0)
"""

REGISTRY = PRELUDE + """
from iris.actors import ClusterContext, Node, NodeConfig, Registry, Security
from iris.actors.registry import REGISTRY_KEY
node = Node(NodeConfig(bind=os.environ["IRIS_BIND"]),
            security=Security.load(os.environ["IRIS_KEYS_DIR"])).start()
node.host(REGISTRY_KEY, Registry)
with ClusterContext(node, node.address):
    say("READY", node.address)
    for _ in commands():
        pass
"""


class Host:
    """One process on one namespace host, driven by lines."""

    def __init__(self, prefix: list[str], code: str, env: dict, logs: Path):
        self.log = logs.open("w")
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-c", textwrap.dedent(code)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env}, start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.seen.append(line)
            self.lines.put(line.strip())
        self.lines.put(None)

    def expect(self, prefix: str, timeout: float = 120) -> str:
        while True:
            line = self.lines.get(timeout=timeout)
            if line is None:
                raise AssertionError(f"exited ({self.proc.wait()}) before {prefix!r}")
            if line.startswith(prefix):
                return line[len(prefix):].strip()

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def ask(self, line: str, timeout: float = 120):
        self.send(line)
        return json.loads(self.expect("JSON", timeout))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self.log.close()


@pytest.fixture
def hosts(tmp_path):
    from bench import _netns

    why = _netns.available()
    if why is not None:
        pytest.skip(why)
    keys = generate_keys(tmp_path / "keys")
    started: list[Host] = []
    with _netns.hosts(4) as net:
        def start(i: int, code: str, **env: str) -> Host:
            base = {"IRIS_KEYS_DIR": str(keys), "IRIS_BIND": f"tcp://{net.ips[i]}:0"}
            host = Host(net.prefix(i), code, {**base, **env},
                        tmp_path / f"host{i}-{len(started)}.log")
            started.append(host)
            return host

        registry = start(0, REGISTRY)
        start.address = registry.expect("READY")
        start.started = started
        try:
            yield start
        finally:
            for host in started:
                host.stop()


CALLEE = PRELUDE + """
@iris.actor
class Store:
    def __init__(self):
        self.seen = []
    def describe(self, array):
        return [str(array.dtype), list(array.shape), float(array.astype("float64").sum()),
                array.flags.writeable]
    def seq(self, x):
        self.seen.append(x if isinstance(x, int) else int(x[0]))
    def order(self):
        return self.seen
    def fetched(self):
        return iris.current().node._bulk_calls.received
    def make(self, n):
        return np.arange(n, dtype=np.int64)
with iris.connect():
    Store.serve("store")
    say("READY")
    for _ in commands():
        pass
"""

CALLER = PRELUDE + """
with iris.connect():
    ref = iris.resolve("store", timeout=60)
    say("READY")
    for cmd in commands():
        big = np.arange(1024 * 2048, dtype=np.float32).reshape(1024, 2048)  # 8 MiB
        out = {"big": ref.describe(big).result(60),
               "small": ref.describe(np.arange(1000, dtype=np.int64)).result(60),
               "sent": iris.current().node._bulk_calls.sent}
        ref.seq.cast(np.full(2 * 1024 * 1024, 7, dtype=np.int32))  # 8 MiB, bulk
        ref.seq(8).result(60)                                         # small, on CURVE
        out["order"] = ref.order().result(60)
        out["fetched"] = ref.fetched().result(60)
        made = ref.make(1 << 20).result(60)                           # an 8 MiB reply
        out["reply"] = [float(made.sum()), made.flags.writeable,
                        iris.current().node._bulk_calls.received]
        say("JSON", json.dumps(out))
"""


@pytest.mark.slow
def test_big_call_frames_between_hosts_travel_on_the_bulk_path_in_order(hosts):
    hosts(1, CALLEE, IRIS_ADDRESS=hosts.address).expect("READY")
    caller = hosts(0, CALLER, IRIS_ADDRESS=hosts.address)
    caller.expect("READY")
    out = caller.ask("go")
    expected = float(np.arange(1024 * 2048, dtype=np.float64).sum())
    assert out["big"] == ["float32", [1024, 2048], expected, False]  # read-only views
    assert out["small"] == ["int64", [1000], 499500.0, False]
    assert out["sent"] == 1 and out["fetched"] == 2  # the 8 MiB call and the 8 MiB cast
    assert out["order"] == [7, 8]  # the small call ran after the big cast sent before it
    assert out["reply"] == [float(np.arange(MiB).sum()), False, 1]  # pulled back, in bulk


TRAINER = PRELUDE + """
import iris.actors.bulk_seal as seal
made = []
new = seal.ChunkKey.new
def recording(*args, **kwargs):
    key = new(*args, **kwargs)
    made.append(key.secret())
    return key
seal.ChunkKey.new = recording
with iris.connect() as ctx:
    pub = iris.weights.Publisher("policy", chunk_bytes=64 * 1024)
    say("READY")
    for cmd in commands():
        if cmd[0] == "chain":
            group = iris.resolve_all("policy.rollouts")
            say("JSON", json.dumps([r.address for r in group.refs]))
        elif cmd[0] == "publish":
            version = int(cmd[1])
            pub.publish({"w": np.arange(1 << 20, dtype=np.float32) + float(version)})
            say("JSON", json.dumps(sorted(pub.last_failures)))
        elif cmd[0] == "keys":  # for the test only, to a file: never logged
            Path = __import__("pathlib").Path
            Path(os.environ["KEYS_FILE"]).write_text(" ".join(k.hex() for k in made))
            say("JSON", json.dumps(len(made)))
"""

ROLLOUT = PRELUDE + """
with iris.connect() as ctx:
    sub = iris.weights.Subscriber("policy")
    say("READY", ctx.node.address)
    for cmd in commands():
        if cmd[0] == "die_at":  # SIGKILL this process when chunk k is in place
            import iris.actors.relay as relay
            opened, k = relay.Incoming.opened, int(cmd[1])
            def opened_or_die(incoming, i):
                if i == k:
                    os.kill(os.getpid(), 9)
                return opened(incoming, i)
            relay.Incoming.opened = opened_or_die
            say("JSON", "1")
        elif cmd[0] == "check":
            version, weights = sub.get(timeout=60)
            say("JSON", json.dumps([version, float(weights["w"].astype("float64").sum()),
                                    sub._box.via]))
"""


def expected_sum(version: int) -> float:
    return float((np.arange(MiB, dtype=np.float32) + float(version)).astype(np.float64).sum())


def start_chain(hosts, **env):
    trainer = hosts(0, TRAINER, IRIS_ADDRESS=hosts.address, **env)
    trainer.expect("READY")
    rollouts = {}
    for i in (1, 2, 3):
        rollout = hosts(i, ROLLOUT, IRIS_ADDRESS=hosts.address, **env)
        rollouts[rollout.expect("READY")] = rollout
    chain = []
    for _ in range(600):
        chain = trainer.ask("chain")
        if len(chain) == 3:
            break
    assert sorted(chain) == sorted(rollouts)
    return trainer, [(address, rollouts[address]) for address in chain]


@pytest.mark.slow
def test_weights_chain_between_hosts_survives_a_forwarder_killed_mid_transfer(hosts):
    trainer, chain = start_chain(hosts)
    assert trainer.ask("publish 1") == []
    for _, rollout in chain:
        assert rollout.ask("check")[:2] == [1, expected_sum(1)]
    (first, r1), (victim, r2), (_, r3) = chain
    assert [r.ask("check")[2] for r in (r2, r3)] == [first, victim]  # forwarded, not sent
    assert r2.ask("die_at 20") == 1  # mid-transfer: 20 of 64 chunks in place
    assert trainer.ask("publish 2") == [victim]
    assert r2.proc.wait(30) == -9
    for rollout in (r1, r3):  # the right bytes
        assert rollout.ask("check")[:2] == [2, expected_sum(2)]
    assert r3.ask("check")[2] == first  # from the push, not a fetch: r1 took r3 on


def forms(key: bytes) -> list[str]:
    return [key.hex(), key.hex().upper(), base64.b64encode(key).decode(),
            base64.urlsafe_b64encode(key).decode(), repr(key)[2:-1]]


@pytest.mark.slow
def test_keys_never_appear_in_logs_or_on_command_lines(hosts, tmp_path):
    keys_file = tmp_path / "made-keys"
    trainer, chain = start_chain(hosts, LOG_DEBUG="1", KEYS_FILE=str(keys_file))
    for version in (1, 2):
        assert trainer.ask(f"publish {version}") == []
    for _, rollout in chain:
        assert rollout.ask("check")[:2] == [2, expected_sum(2)]
    late = hosts(1, ROLLOUT, IRIS_ADDRESS=hosts.address, LOG_DEBUG="1")
    late.expect("READY")  # joined after the push: fetches the newest, a big reply in bulk
    assert late.ask("check") == [2, expected_sum(2), ""]
    assert trainer.ask("keys") == 3  # two versions and one reply
    made = [bytes.fromhex(k) for k in keys_file.read_text().split()]
    assert len(made) == 3 and all(len(k) == 32 for k in made)
    texts = []
    for host in hosts.started:
        texts.append("".join(host.seen))
        for path in (f"/proc/{host.proc.pid}/cmdline", f"/proc/{host.proc.pid}/environ"):
            texts.append(Path(path).read_bytes().decode(errors="replace"))
    for host in hosts.started:
        host.stop()  # flush and close the logs
        texts.append(Path(host.log.name).read_text(errors="replace"))
    assert any("DEBUG" in text for text in texts)  # the logs were on, and captured
    for key in made:
        for form in forms(key):
            assert not any(form in text for text in texts), "a bulk key leaked"
