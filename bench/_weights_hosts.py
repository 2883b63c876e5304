"""`python -m bench.weights --hosts N`: weights and a big call between N namespace hosts.

Not a test: it asserts nothing about speed. It builds N network namespaces on one bridge
(bench/_netns.hosts), makes CURVE keys (Iris refuses a non-loopback bind without them),
and runs, with A/B alternating in one run on the same hosts:

- floors: 256 MiB (the sync size) in 1 MiB messages on a bare pyzmq DEALER -> ROUTER,
  plain TCP and CURVE: one link alone (host 0 -> 1), and every link of the chain at once
  (host i -> i+1, as a chain's links run), taken in every round between the syncs;
- sync: a trainer on host 0 (beside the registry) publishes to a rollout on each other host
  (iris.weights: the chain 0 -> 1 -> ... -> N-1 over the bulk path), sealed (AES-256-GCM)
  and plaintext (IRIS_BULK_PLAINTEXT=1), alternating; per version: the time until every
  rollout holds it, each link's time (its receiver's first attach to the whole value in
  place), and each role's CPU seconds (user + system of its process);
- call (host 0 -> host 1): one actor call whose argument is one big array (1 GiB; 256 MiB
  with --quick), sealed bulk, plaintext bulk, and CURVE (the bulk path off:
  IRIS_BULK_MIN_CALL_BYTES=0), alternating; GB/s = bytes / median call time.

Children talk to this process over stdio (bench/_procs): `READY ...`, then one JSON line
per command.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

MiB = 1 << 20
MSG = MiB  # floor message size
MODES = {"aead": {}, "plain": {"IRIS_BULK_PLAINTEXT": "1"}}
CALL_MODES = {"aead": {}, "plain": {"IRIS_BULK_PLAINTEXT": "1"},
              "curve": {"IRIS_BULK_MIN_CALL_BYTES": "0"}}


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def make_weights(total: int, seed: int = 0) -> dict:
    import numpy as np

    per = total // 16 // 4
    return {f"layer{i}.w": np.arange(per, dtype=np.float32) + float(seed + i)
            for i in range(16)}


def checksum(weights: dict) -> float:
    return float(sum(w.astype("float64").sum() for w in weights.values()))


def _lines(handler) -> None:
    """Serve commands from stdin, one JSON reply line each, until stdin closes."""
    for line in sys.stdin:
        print(json.dumps(handler(*line.split())), flush=True)
    os._exit(0)


# ---------------------------------------------------------------- children


def serve_registry() -> None:
    from iris.actors import ClusterContext, Node, NodeConfig, Registry, Security
    from iris.actors.registry import REGISTRY_KEY

    node = Node(NodeConfig(bind=os.environ["IRIS_BIND"]),
                security=Security.load(os.environ["IRIS_KEYS_DIR"])).start()
    node.host(REGISTRY_KEY, Registry)
    with ClusterContext(node, node.address):
        print("READY", node.address, flush=True)
        _lines(lambda *a: {})


def serve_trainer(name: str, size: int, chunk: int) -> None:
    import iris

    with iris.connect():
        pub = iris.weights.Publisher(name, chunk_bytes=chunk)
        weights = make_weights(size, seed=1)
        print("READY", checksum(weights), flush=True)

        def publish() -> dict:
            cpu, t0 = cpu_s(), time.perf_counter()
            version = pub.publish(weights)
            return {"version": version, "seconds": time.perf_counter() - t0,
                    "cpu": cpu_s() - cpu, "failures": pub.last_failures}

        _lines(lambda *a: publish())


def serve_rollout(name: str) -> None:
    import iris

    with iris.connect() as ctx:
        sub = iris.weights.Subscriber(name)
        transfers = ctx.node._actors[sub._rollouts].instance._transfers
        print("READY", ctx.node.address, flush=True)
        last = [cpu_s()]

        def report(what: str = "") -> dict:
            now = cpu_s()
            out = {"cpu": now - last[0], "version": sub.version,
                   "link": dict(transfers.history[-1]) if transfers.history else None}
            last[0] = now
            if what == "verify":
                out["checksum"] = checksum(sub._box.weights)
            return out

        _lines(report)


def serve_floor(ip: str) -> None:
    import zmq

    from iris.actors import Security

    sec = Security.load(os.environ["IRIS_KEYS_DIR"])
    ctx = zmq.Context()
    plain, curve = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER)
    # CURVE with the cluster's keys and no ZAP handler: the floor measures CURVE's box.
    curve.curve_server = True
    curve.curve_publickey, curve.curve_secretkey = sec.server_public, sec._server_secret
    ports = [s.bind_to_random_port(f"tcp://{ip}") for s in (plain, curve)]

    def sink(sock) -> None:
        while True:
            rid, frame = sock.recv_multipart(copy=False)
            if len(frame) < 16:
                sock.send_multipart([rid, b"ok"])

    for sock in (plain, curve):
        threading.Thread(target=sink, args=(sock,), daemon=True).start()
    print("READY", f"tcp://{ip}:{ports[0]}", f"tcp://{ip}:{ports[1]}", flush=True)
    payload = bytearray(os.urandom(MSG))

    def send(endpoint: str, mode: str, nbytes: str) -> dict:
        dealer = ctx.socket(zmq.DEALER)
        if mode == "curve":
            sec.configure_client(dealer)
        dealer.connect(endpoint)
        dealer.send(b"hello")
        dealer.recv()
        cpu, t0 = cpu_s(), time.perf_counter()
        for _ in range(int(nbytes) // MSG):
            dealer.send(payload, copy=False)
        dealer.send(b"end")
        dealer.recv()
        out = {"seconds": time.perf_counter() - t0, "cpu": cpu_s() - cpu}
        dealer.close(linger=0)
        return out

    _lines(send)


def serve_callee(name: str) -> None:
    import iris

    @iris.actor
    class Sink:
        def take(self, array) -> int:
            return int(array.nbytes)

    with iris.connect():
        Sink.serve(name)
        print("READY", flush=True)
        last = [cpu_s()]

        def report(*_: str) -> dict:
            now = cpu_s()
            out = {"cpu": now - last[0]}
            last[0] = now
            return out

        _lines(report)


def serve_caller(name: str, size: int) -> None:
    import numpy as np

    import iris

    with iris.connect():
        ref = iris.resolve(name, timeout=60)
        array = np.ones(size, dtype=np.uint8)
        print("READY", flush=True)

        def call(*_: str) -> dict:
            cpu, t0 = cpu_s(), time.perf_counter()
            try:
                got = ref.take(array).result(600)
            except iris.IrisError as exc:
                return {"error": f"{type(exc).__name__}: {exc}"}
            return {"seconds": time.perf_counter() - t0, "cpu": cpu_s() - cpu, "ok": got == size}

        _lines(call)


# ---------------------------------------------------------------- the driver


def run(cfg: dict) -> dict:
    """Every figure of the --hosts run (see the module docstring)."""
    from bench import _netns
    from bench._procs import Children
    from bench._report import step
    from iris.actors import generate_keys

    why = _netns.available()
    if why is not None:
        raise SystemExit(f"--hosts needs network namespaces: {why}")
    n, size = cfg["hosts"], cfg["size"]
    out: dict = {"hosts": n}
    with tempfile.TemporaryDirectory() as tmp, _netns.hosts(n) as net, Children() as kids:
        keys = str(generate_keys(Path(tmp) / "keys"))
        if cfg.get("cap_gbit"):
            net.cap(cfg["cap_gbit"])

        def spawn(i: int, role: list[str], env: dict | None = None):
            base = {"IRIS_KEYS_DIR": keys, "IRIS_BIND": f"tcp://{net.ips[i]}:0"}
            return kids.spawn(["-m", "bench._weights_hosts", *role], {**base, **(env or {})},
                              prefix=net.prefix(i))

        registry = spawn(0, ["registry"])
        address = registry.expect("READY")
        joined = {"IRIS_ADDRESS": address}
        floors = [spawn(i, ["floor", net.ips[i]]) for i in range(n)]
        ends = [f.expect("READY").split() for f in floors]
        out.update(_syncs(spawn, joined, n, size, cfg, step, Floors(floors, ends, size)))
        out.update(_calls(spawn, joined, cfg, step))
    return out


def ask(child, command: str = "go") -> dict:
    """Send one command; its JSON answer."""
    child.send(command)
    return answer(child)


def answer(child) -> dict:
    return json.loads("{" + child.expect("{", timeout=600))


class Floors:
    """Raw pyzmq 256 MiB DEALER -> ROUTER floors on the same hosts, plain TCP and CURVE."""

    def __init__(self, floors: list, ends: list, size: int):
        self.floors, self.ends, self.size = floors, ends, size
        self.samples: dict = {"plain_link": [], "curve_link": [], "plain_chain": [],
                              "curve_chain": []}

    def link(self, mode: str) -> None:
        """Host 0 -> 1 alone."""
        col = 0 if mode == "plain" else 1
        done = ask(self.floors[0], f"{self.ends[1][col]} {mode} {self.size}")
        self.samples[f"{mode}_link"].append(done["seconds"])

    def chain(self, mode: str) -> None:
        """Every link i -> i+1 at once, as a chain's links run; the slowest one's time."""
        col = 0 if mode == "plain" else 1
        for i in range(len(self.floors) - 1):
            self.floors[i].send(f"{self.ends[i + 1][col]} {mode} {self.size}")
        self.samples[f"{mode}_chain"].append(max(answer(f)["seconds"]
                                                 for f in self.floors[:-1]))

    def figures(self) -> dict:
        out = {}
        for mode in ("plain", "curve"):
            for kind in ("link", "chain"):
                seconds = statistics.median(self.samples[f"{mode}_{kind}"])
                name = "link" if kind == "link" else "chain_link"
                out[f"floor_{mode}_{name}_gbps"] = self.size / seconds / 1e9
            out[f"floor_{mode}_chain_s"] = statistics.median(self.samples[f"{mode}_chain"])
        return out


def _syncs(spawn, joined: dict, n: int, size: int, cfg: dict, step, floors: Floors) -> dict:
    """Sealed and plaintext syncs, with the floors of the chain's links at once, taken in
    turn in every round (the machine's load moves within a minute)."""
    sets = {}
    for mode, env in MODES.items():
        name = f"policy-{mode}"
        trainer = spawn(0, ["trainer", name, str(size), str(cfg["chunk"])], {**joined, **env})
        expected = float(trainer.expect("READY"))
        rollouts = [spawn(i, ["rollout", name], {**joined, **env}) for i in range(1, n)]
        for r in rollouts:
            r.expect("READY")
        sets[mode] = (trainer, rollouts, expected)
    time.sleep(2.0)  # registrations visible to the trainers' resolve_all
    out: dict = {}
    samples: dict = {m: [] for m in MODES}
    for rep in range(cfg["sync_reps"] + 1):  # the first of each mode: cold, and verified
        if rep:
            step(f"floors, round {rep}: one link alone, the chain's links at once")
            for mode in ("plain", "curve"):
                floors.link(mode)
                floors.chain(mode)
        for mode, (trainer, rollouts, expected) in sets.items():
            step(f"sync {size // MiB} MiB 1 -> {n - 1}, {mode}, round {rep}")
            done = ask(trainer)
            if done["failures"]:
                raise RuntimeError(f"{mode} sync failed: {done['failures']}")
            reports = [ask(r, "verify" if rep == 0 else "report") for r in rollouts]
            if rep == 0:
                bad = [r for r in reports if abs(r["checksum"] - expected) > 1e-6 * expected]
                if bad or any(r["version"] != done["version"] for r in reports):
                    raise RuntimeError(f"{mode}: wrong weights at a rollout: {reports}")
                out[f"sync_{mode}_first_s"] = done["seconds"]
                continue
            samples[mode].append((done, reports))
    for mode, runs in samples.items():
        out.update(_sync_figures(mode, runs, size))
    return out | floors.figures()


def _sync_figures(mode: str, runs: list, size: int) -> dict:
    gb = size / 1e9
    seconds = statistics.median(d["seconds"] for d, _ in runs)
    links = [[r["link"]["seconds"] for r in reports] for _, reports in runs]
    per_link = [size / statistics.median(col) / 1e9 for col in zip(*links, strict=True)]
    trainer_cpu = statistics.median(d["cpu"] for d, _ in runs)
    roll_cpu = [statistics.median(col) for col in
                zip(*[[r["cpu"] for r in reports] for _, reports in runs], strict=True)]
    return {f"sync_{mode}_s": seconds, f"sync_{mode}_all_links_gbps": len(per_link) * gb / seconds,
            f"sync_{mode}_link_gbps": per_link,
            f"sync_{mode}_cpu_s": trainer_cpu + sum(roll_cpu),
            f"sync_{mode}_cpu_trainer_s_per_gb": trainer_cpu / gb,
            f"sync_{mode}_cpu_forwarder_s_per_gb": (statistics.mean(roll_cpu[:-1]) / gb
                                                    if len(roll_cpu) > 1 else None),
            f"sync_{mode}_cpu_last_s_per_gb": roll_cpu[-1] / gb}


def _calls(spawn, joined: dict, cfg: dict, step) -> dict:
    size = cfg["call_size"]
    pairs = {}
    for mode, env in CALL_MODES.items():
        callee = spawn(1, ["callee", f"sink-{mode}"], {**joined, **env})
        callee.expect("READY")
        caller = spawn(0, ["caller", f"sink-{mode}", str(size)], {**joined, **env})
        caller.expect("READY")
        pairs[mode] = (caller, callee)
    times: dict = {m: [] for m in CALL_MODES}
    cpus: dict = {m: [] for m in CALL_MODES}
    errors: dict = {}
    for rep in range(cfg["reps"] + 1):
        for mode, (caller, callee) in pairs.items():
            step(f"call with a {size // MiB} MiB argument, host 0 -> 1, {mode}, round {rep}")
            done = ask(caller)
            callee_cpu = ask(callee)["cpu"]
            if "error" in done:  # CURVE: a frame that takes > 3 s fails the call (see RESULTS)
                errors[mode] = done["error"]
            elif not done["ok"]:
                raise RuntimeError(f"{mode} call returned the wrong size")
            elif rep:
                times[mode].append(done["seconds"])
                cpus[mode].append(done["cpu"] + callee_cpu)
    out: dict = {"call_bytes": size}
    for mode in CALL_MODES:
        if errors.get(mode):
            out[f"call_{mode}_error"] = errors[mode]
        if times[mode]:
            out[f"call_{mode}_gbps"] = size / statistics.median(times[mode]) / 1e9
            out[f"call_{mode}_cpu_s_per_gb"] = statistics.median(cpus[mode]) / (size / 1e9)
    return out


def main() -> None:
    role, *args = sys.argv[1:]  # each role exits when its stdin closes (the driver went)
    if os.environ.get("IRIS_BENCH_LOG"):  # e.g. DEBUG: the children's logs on stderr
        import logging

        logging.basicConfig(level=os.environ["IRIS_BENCH_LOG"])
    if role == "registry":
        serve_registry()
    elif role == "trainer":
        serve_trainer(args[0], int(args[1]), int(args[2]))
    elif role == "rollout":
        serve_rollout(args[0])
    elif role == "floor":
        serve_floor(args[0])
    elif role == "callee":
        serve_callee(args[0])
    elif role == "caller":
        serve_caller(args[0], int(args[1]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()


def print_table(f: dict, cfg: dict) -> None:
    from bench._report import fmt

    n, size = cfg["hosts"], cfg["size"] // MiB
    print(f"\nweights across {n} namespace hosts on one bridge ({os.cpu_count()} cores for all "
          f"of them), {size} MiB 1 -> {n - 1}, chunks of {cfg['chunk'] // MiB} MiB")
    print(f"{'':40} {'sealed':>10} {'plaintext':>10}")
    rows = [("sync_{}_first_s", "sync, first (cold), s"), ("sync_{}_s", "sync, median, s"),
            ("sync_{}_all_links_gbps", "all links together, GB/s"),
            ("sync_{}_cpu_s", "CPU per version, all roles, s"),
            ("sync_{}_cpu_trainer_s_per_gb", "CPU s/GB, trainer"),
            ("sync_{}_cpu_forwarder_s_per_gb", "CPU s/GB, forwarder (mean)"),
            ("sync_{}_cpu_last_s_per_gb", "CPU s/GB, last of the chain")]
    for key, label in rows:
        print(f"{label:40} {fmt(f.get(key.format('aead'))):>10} "
              f"{fmt(f.get(key.format('plain'))):>10}")
    for mode in ("aead", "plain"):
        links = ", ".join(fmt(x) for x in f.get(f"sync_{mode}_link_gbps", []))
        print(f"per link GB/s, {'sealed' if mode == 'aead' else 'plaintext'}: {links}")
    print(f"floor, raw pyzmq {size} MiB, GB/s: plain one link {fmt(f['floor_plain_link_gbps'])}, "
          f"plain all chain links at once {fmt(f['floor_plain_chain_link_gbps'])} each; "
          f"CURVE one link {fmt(f['floor_curve_link_gbps'])}, at once "
          f"{fmt(f['floor_curve_chain_link_gbps'])} each")
    floor = f["floor_plain_chain_link_gbps"]
    rate = cfg["cap_gbit"] / 8 if cfg.get("cap_gbit") else None  # GB/s of the tbf cap
    for mode in ("aead", "plain"):
        worst = min(f.get(f"sync_{mode}_link_gbps") or [0])
        against = f"; / the link's rate ({fmt(rate)} GB/s): {worst / rate:.0%}" if rate else ""
        print(f"slowest link / plain floor at once, {mode}: {worst / floor:.0%}{against}")
    call = cfg["call_size"] // MiB
    print(f"call, one {call} MiB argument host 0 -> 1, GB/s: sealed bulk "
          f"{fmt(f.get('call_aead_gbps'))}, plaintext bulk {fmt(f.get('call_plain_gbps'))}, "
          f"CURVE {fmt(f.get('call_curve_gbps'))}")
    if f.get("call_aead_gbps") and f.get("call_plain_gbps"):
        print(f"  sealed / plaintext: {f['call_aead_gbps'] / f['call_plain_gbps']:.0%}")
    print("  CPU s/GB of a call, both sides: " + ", ".join(
        f"{m} {fmt(f.get(f'call_{m}_cpu_s_per_gb'))}" for m in CALL_MODES))
    for mode in CALL_MODES:
        if f.get(f"call_{mode}_error"):
            print(f"  {mode} call failed: {f[f'call_{mode}_error']}")
