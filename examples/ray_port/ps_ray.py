"""Parameter-server training of a small classifier, written against Ray.

Written for Iris, in the shape of Ray's parameter-server tutorial (Ray Core examples): a
ParameterServer actor holds the weights, DataWorker actors compute gradients on their own
shard of the data, and the driver runs synchronous training (every worker, every step),
asynchronous training (`ray.wait` for whichever gradient is ready first) and a small
learning-rate sweep (tasks collected with `ray.wait` as they finish). The model is a
two-layer perceptron in numpy on synthetic data, so the program needs nothing but numpy.

This is the ORIGINAL: `python -m examples.ray_port.ps_ray` runs it on Ray. ps_compat.py
is the same program ported with `from iris.compat import ray`; ps_iris.py is the port to
the native `iris.*` API. docs/migrating-from-ray.md shows both diffs.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass

import numpy as np
import ray

# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Config:
    """Sizes of the problem and of the training run."""

    samples: int = 4000          # training examples (a tenth more are held out for tests)
    dim: int = 16                # input features
    hidden: int = 32             # hidden units
    classes: int = 4             # output classes
    workers: int = 4             # DataWorker actors, one shard each
    batch: int = 64              # examples per gradient
    lr: float = 0.1              # learning rate of the synchronous and async runs
    momentum: float = 0.9        # SGD momentum on the parameter server
    sync_steps: int = 30         # synchronous iterations
    async_updates: int = 60      # asynchronous gradient applications
    eval_every: int = 10         # evaluate the weights every N steps
    sweep: tuple = (0.01, 0.05, 0.2)   # learning rates tried by the sweep
    sweep_steps: int = 40        # steps of each sweep trial
    seed: int = 0


# ---------------------------------------------------------------- data


def make_dataset(n: int, dim: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian blobs: one mean per class, unit noise, so a small MLP can separate them."""
    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, 2.0, size=(classes, dim))
    labels = rng.integers(0, classes, size=n)
    features = means[labels] + rng.normal(0.0, 1.0, size=(n, dim))
    return features.astype(np.float32), labels.astype(np.int64)


def shard(x: np.ndarray, y: np.ndarray, parts: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """`parts` nearly equal slices of (x, y), in order."""
    bounds = np.linspace(0, len(x), parts + 1).astype(int)
    return [(x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


# ---------------------------------------------------------------- model


class Model:
    """x -> ReLU(x W1 + b1) -> softmax(h W2 + b2), trained with cross-entropy."""

    def __init__(self, dim: int, hidden: int, classes: int, seed: int):
        rng = np.random.default_rng(seed)
        self.weights = {
            "w1": (rng.normal(0, 1, (dim, hidden)) / np.sqrt(dim)).astype(np.float32),
            "b1": np.zeros(hidden, np.float32),
            "w2": (rng.normal(0, 1, (hidden, classes)) / np.sqrt(hidden)).astype(np.float32),
            "b2": np.zeros(classes, np.float32),
        }

    def get_weights(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.weights.items()}

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        self.weights = {k: np.array(v, dtype=np.float32) for k, v in weights.items()}

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = self.weights
        hidden = np.maximum(x @ w["w1"] + w["b1"], 0.0)
        logits = hidden @ w["w2"] + w["b2"]
        logits = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        return hidden, probs / probs.sum(axis=1, keepdims=True)

    def loss_and_gradients(self, x: np.ndarray, y: np.ndarray) -> tuple[float, dict]:
        w = self.weights
        hidden, probs = self.forward(x)
        n = len(x)
        loss = float(-np.log(probs[np.arange(n), y] + 1e-9).mean())
        d_logits = probs.copy()
        d_logits[np.arange(n), y] -= 1.0
        d_logits /= n
        d_hidden = (d_logits @ w["w2"].T) * (hidden > 0)
        grads = {
            "w1": x.T @ d_hidden, "b1": d_hidden.sum(axis=0),
            "w2": hidden.T @ d_logits, "b2": d_logits.sum(axis=0),
        }
        return loss, {k: v.astype(np.float32) for k, v in grads.items()}

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.forward(x)[1].argmax(axis=1)


def accuracy(weights: dict, x: np.ndarray, y: np.ndarray, cfg: Config) -> float:
    model = Model(cfg.dim, cfg.hidden, cfg.classes, cfg.seed)
    model.set_weights(weights)
    return float((model.predict(x) == y).mean())


# ---------------------------------------------------------------- actors and tasks


@ray.remote
class ParameterServer:
    """Holds the weights; applies the mean of the gradients it is given (SGD + momentum)."""

    def __init__(self, cfg: Config, lr: float):
        self.model = Model(cfg.dim, cfg.hidden, cfg.classes, cfg.seed)
        self.lr = lr
        self.momentum = cfg.momentum
        self.velocity = {k: np.zeros_like(v) for k, v in self.model.weights.items()}
        self.updates = 0

    def apply_gradients(self, *gradients: dict) -> dict:
        mean = {k: np.mean([g[k] for g in gradients], axis=0) for k in gradients[0]}
        for key, grad in mean.items():
            self.velocity[key] = self.momentum * self.velocity[key] - self.lr * grad
            self.model.weights[key] = self.model.weights[key] + self.velocity[key]
        self.updates += 1
        return self.model.get_weights()

    def get_weights(self) -> dict:
        return self.model.get_weights()

    def stats(self) -> dict:
        return {"updates": self.updates}


@ray.remote
class DataWorker:
    """Computes gradients on minibatches drawn from its own shard of the data."""

    def __init__(self, data: tuple, cfg: Config, index: int):
        self.x, self.y = data
        self.model = Model(cfg.dim, cfg.hidden, cfg.classes, cfg.seed)
        self.batch = cfg.batch
        self.rng = np.random.default_rng(cfg.seed + 1 + index)
        self.losses: list[float] = []

    def compute_gradients(self, weights: dict) -> dict:
        self.model.set_weights(weights)
        pick = self.rng.choice(len(self.x), size=min(self.batch, len(self.x)), replace=False)
        loss, grads = self.model.loss_and_gradients(self.x[pick], self.y[pick])
        self.losses.append(loss)
        return grads

    def mean_loss(self, last: int = 10) -> float:
        return float(np.mean(self.losses[-last:])) if self.losses else float("nan")


@ray.remote
def evaluate(weights: dict, test: tuple, cfg: Config) -> float:
    """Accuracy of `weights` on the held-out set."""
    x, y = test
    return accuracy(weights, x, y, cfg)


@ray.remote
def train_trial(lr: float, train: tuple, test: tuple, cfg: Config) -> dict:
    """One sweep trial: plain minibatch SGD at `lr` in a single task; its test accuracy."""
    x, y = train
    model = Model(cfg.dim, cfg.hidden, cfg.classes, cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    for _ in range(cfg.sweep_steps):
        pick = rng.choice(len(x), size=cfg.batch, replace=False)
        _, grads = model.loss_and_gradients(x[pick], y[pick])
        for key, grad in grads.items():
            model.weights[key] = model.weights[key] - lr * grad
    return {"lr": lr, "accuracy": accuracy(model.get_weights(), *test, cfg)}


# ---------------------------------------------------------------- training loops


def start_workers(shards: list, cfg: Config) -> list:
    return [DataWorker.remote(ref, cfg, i) for i, ref in enumerate(shards)]


def train_sync(cfg: Config, shards: list, test_ref) -> dict:
    """Every step: every worker computes a gradient of the same weights; the server
    applies their mean. Deterministic for a given seed."""
    ps = ParameterServer.remote(cfg, cfg.lr)
    workers = start_workers(shards, cfg)
    weights = ps.get_weights.remote()
    history = []
    for step in range(1, cfg.sync_steps + 1):
        gradients = [w.compute_gradients.remote(weights) for w in workers]
        weights = ps.apply_gradients.remote(*gradients)
        if step % cfg.eval_every == 0:
            history.append((step, ray.get(evaluate.remote(weights, test_ref, cfg))))
    final = ray.get(weights)
    losses = ray.get([w.mean_loss.remote() for w in workers])
    for actor in [ps, *workers]:
        ray.kill(actor)
    return {"history": history, "accuracy": history[-1][1] if history else None,
            "loss": float(np.mean(losses)), "checksum": _checksum(final)}


def train_async(cfg: Config, shards: list, test_ref) -> dict:
    """Each worker gets the newest weights as soon as its last gradient is applied:
    `ray.wait` returns whichever gradient is ready first."""
    ps = ParameterServer.remote(cfg, cfg.lr)
    workers = start_workers(shards, cfg)
    weights = ps.get_weights.remote()
    in_flight = {w.compute_gradients.remote(weights): w for w in workers}
    history = []
    for update in range(1, cfg.async_updates + 1):
        ready, _ = ray.wait(list(in_flight), num_returns=1)
        worker = in_flight.pop(ready[0])
        weights = ps.apply_gradients.remote(ready[0])
        in_flight[worker.compute_gradients.remote(weights)] = worker
        if update % (cfg.eval_every * 2) == 0:
            history.append((update, ray.get(evaluate.remote(weights, test_ref, cfg))))
    ray.wait(list(in_flight), num_returns=len(in_flight))
    accuracy_now = ray.get(evaluate.remote(ps.get_weights.remote(), test_ref, cfg))
    updates = ray.get(ps.stats.remote())["updates"]
    for actor in [ps, *workers]:
        ray.kill(actor)
    return {"history": history, "accuracy": accuracy_now, "updates": updates}


def sweep(cfg: Config, train_ref, test_ref) -> dict:
    """Try each learning rate as its own task; report them as they finish."""
    pending = [train_trial.remote(lr, train_ref, test_ref, cfg) for lr in cfg.sweep]
    finished = []
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        finished.append(ray.get(ready[0]))
    best = max(finished, key=lambda r: r["accuracy"])
    return {"trials": sorted(finished, key=lambda r: r["lr"]), "best_lr": best["lr"]}


def _checksum(weights: dict) -> float:
    return float(sum(np.abs(v).sum() for v in weights.values()))


# ---------------------------------------------------------------- the program


def run(cfg: Config) -> dict:
    """The whole program: data to the object store, sync and async training, the sweep."""
    started = time.monotonic()
    x, y = make_dataset(cfg.samples + cfg.samples // 10, cfg.dim, cfg.classes, cfg.seed)
    train, test = (x[:cfg.samples], y[:cfg.samples]), (x[cfg.samples:], y[cfg.samples:])
    train_ref, test_ref = ray.put(train), ray.put(test)
    shards = [ray.put(s) for s in shard(*train, cfg.workers)]
    result = {
        "sync": train_sync(cfg, shards, test_ref),
        "async": train_async(cfg, shards, test_ref),
        "sweep": sweep(cfg, train_ref, test_ref),
    }
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (about 10 s)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    cfg = Config(samples=1000, sync_steps=10, async_updates=20, eval_every=5,
                 sweep_steps=20) if args.quick else Config()
    ray.init()
    result = run(cfg)
    print(json.dumps(result) if args.json else _report(result, cfg))
    return result


def _report(result: dict, cfg: Config) -> str:
    lines = [f"config: {asdict(cfg)}",
             f"sync:  accuracy {result['sync']['accuracy']:.3f} after {cfg.sync_steps} steps "
             f"(loss {result['sync']['loss']:.3f})",
             f"async: accuracy {result['async']['accuracy']:.3f} after "
             f"{result['async']['updates']} updates",
             "sweep: " + ", ".join(f"lr={t['lr']}: {t['accuracy']:.3f}"
                                   for t in result["sweep"]["trials"]),
             f"took {result['seconds']} s"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
