"""The Ray program of examples/ray_port, ported twice (iris.compat.ray and the native API),
runs on every backend with the same outcome: synchronous training is deterministic, so its
final weights must equal a plain sequential run's; the asynchronous run and the sweep must
learn. (bench/ps_port.py runs the original on Ray beside the ports, with the same weights.)"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest

from examples.ray_port import ps_compat, ps_iris, ps_ray

CFG = ps_ray.Config(samples=600, workers=2, sync_steps=6, async_updates=8, eval_every=3,
                    sweep=(0.05, 0.2), sweep_steps=10)


def _reference_sync_checksum(cfg: ps_ray.Config) -> float:
    """train_sync without actors: the same gradients, applied in the same order."""
    x, y = ps_ray.make_dataset(cfg.samples + cfg.samples // 10, cfg.dim, cfg.classes,
                               cfg.seed)
    shards = ps_ray.shard(x[:cfg.samples], y[:cfg.samples], cfg.workers)
    server = ps_ray.Model(cfg.dim, cfg.hidden, cfg.classes, cfg.seed)
    velocity = {k: np.zeros_like(v) for k, v in server.weights.items()}
    workers = [(ps_ray.Model(cfg.dim, cfg.hidden, cfg.classes, cfg.seed), sx, sy,
                np.random.default_rng(cfg.seed + 1 + i)) for i, (sx, sy) in enumerate(shards)]
    for _ in range(cfg.sync_steps):
        weights, grads = server.get_weights(), []
        for model, sx, sy, rng in workers:
            model.set_weights(weights)
            pick = rng.choice(len(sx), size=min(cfg.batch, len(sx)), replace=False)
            grads.append(model.loss_and_gradients(sx[pick], sy[pick])[1])
        for key in grads[0]:
            mean = np.mean([g[key] for g in grads], axis=0)
            velocity[key] = cfg.momentum * velocity[key] - cfg.lr * mean
            server.weights[key] = server.weights[key] + velocity[key]
    return ps_ray._checksum(server.get_weights())


EXPECTED = _reference_sync_checksum(CFG)


def _check(result: dict) -> None:
    assert result["sync"]["checksum"] == pytest.approx(EXPECTED, rel=1e-6)
    assert result["sync"]["accuracy"] > 0.8
    assert result["async"]["updates"] == CFG.async_updates
    assert result["async"]["accuracy"] > 0.5
    assert [t["lr"] for t in result["sweep"]["trials"]] == list(CFG.sweep)


def test_ray_program_ported_with_the_ray_shaped_layer(backend):
    ps_compat.ray.init(runtime_env={"pip": ["numpy"]})  # as its main() does
    try:
        _check(ps_compat.run(ps_compat.Config(**asdict(CFG))))
    finally:
        ps_compat.ray.shutdown()  # ray.init()'s runtime_env is the process's, as on Ray


@pytest.mark.parametrize("backend", ["inprocess", "iris"], indirect=True)
def test_ray_program_ported_to_the_native_api(backend):
    """On Ray too in bench/ps_port.py; here two backends keep the suite's Ray time down."""
    _check(ps_iris.run(ps_iris.Config(**asdict(CFG))))

