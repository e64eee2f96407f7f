"""letcc runtime, Ray backend: rounds decode what the code decodes, a crashed
actor is an erasure and comes back, cancellation reaches a busy actor, and a
two-node cluster keeps serving when a node is removed mid-run.

Ray starts once for the session: a local head node with 2 CPUs and no
dashboard (through ray.cluster_utils.Cluster, so the two-node test can add a
node and remove it mid-run). Skipped without Ray.
"""
from __future__ import annotations

import functools
import os
import signal
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import letcc  # noqa: E402
from letcc.runtime.coded_inference import CodedInference  # noqa: E402
from letcc.runtime.worker_main import worker_rank  # noqa: E402
from letcc.stragglers import FixedCount  # noqa: E402

pytestmark = pytest.mark.ray

TESTS = os.path.dirname(os.path.abspath(__file__))
D, M = 6, 3


class Model:
    """tanh(x @ W + c); SIGKILLs itself once on worker `rank` while <dir>/kill<rank> exists."""

    def __init__(self, script_dir, seed=0):
        rng = np.random.default_rng(seed)
        self.W = rng.standard_normal((D, M)) / np.sqrt(D)
        self.c = rng.standard_normal(M)
        self.dir = script_dir

    def f(self, x):
        return np.tanh(x.reshape(x.shape[0], -1) @ self.W + self.c)

    def __call__(self, x):
        if self.dir is not None:
            trigger = os.path.join(self.dir, f"kill{worker_rank()}")
            if os.path.exists(trigger):
                os.unlink(trigger)
                os.kill(os.getpid(), signal.SIGKILL)
        return self.f(x)


def model(script_dir=None):
    return Model(None if script_dir is None else str(script_dir))


def reference(code, X, answered):
    K = code.K
    B = X.shape[0] // K
    groups = np.ascontiguousarray(X.reshape((B, K) + X.shape[1:]).swapaxes(0, 1))
    coded = np.asarray(code.encode(groups))
    f = Model(None).f
    Y = np.stack([f(coded[j]) for j in range(code.N)])
    avail = np.asarray(sorted(answered))
    est = np.asarray(code.decode(Y[avail], avail))
    return est.swapaxes(0, 1).reshape((B * K,) + est.shape[2:])


def _connect(address):
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # workers import this module to unpickle the model factories
    path = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)
    ray.init(address=address, runtime_env={"env_vars": {"PYTHONPATH": path, "RAY_AUTH_MODE": "disabled"}})


@pytest.fixture(scope="session")
def ray_cluster():
    """Ray for the whole session: a local head node with 2 CPUs (ray.cluster_utils, so
    that the two-node test can add a second node and remove it again)."""
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    _connect(cluster.address)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_ray_rounds_decode_crash_is_an_erasure_and_cancellation_reaches_actors(ray_cluster, tmp_path, rng):
    code = letcc.LeTCC(2, 4)
    seed = int(rng.integers(1 << 30))
    with CodedInference(functools.partial(model, tmp_path), code, backend="ray",
                        stragglers=FixedCount(1), seed=seed) as ci:
        draws = np.random.default_rng(seed)
        for B in (1, 2):
            X = rng.standard_normal((2 * B, D))
            out = ci(X)
            draw = ci.stragglers.sample(4, draws)
            assert sorted(ci.last_round.answered) == draw.available.tolist()
            np.testing.assert_allclose(out, reference(code, X, draw.available), rtol=1e-11, atol=1e-11)
        # an actor process dies in the middle of a round: erasure, reported, restarted by Ray
        ci.stragglers = None
        ci(rng.standard_normal((2, D)))     # every actor answers: none is still on an old round
        (tmp_path / "kill1").touch()
        X = rng.standard_normal((2, D))
        with pytest.warns(RuntimeWarning, match=r"worker 1: .*died"):
            out = ci(X)
        assert ci.last_round.failed == {1: "died"} and sorted(ci.last_round.answered) == [0, 2, 3]
        np.testing.assert_allclose(out, reference(code, X, [0, 2, 3]), rtol=1e-11, atol=1e-11)
        ci.wait_ready(120)
        out = ci(X)
        assert sorted(ci.last_round.answered) == [0, 1, 2, 3]
        np.testing.assert_allclose(out, reference(code, X, range(4)), rtol=1e-11, atol=1e-11)
        # sleep mode: the straggler sleeps "forever" until its cancel() (control group) lands;
        # the next round needs every actor, so it completes only if cancellation worked
        ci.simulate = "sleep"
        ci.stragglers = FixedCount(1)
        out = ci(X)
        late = set(range(4)) - set(ci.last_round.answered)
        assert len(late) == 1
        ci.stragglers = None
        out = ci(X)
        assert sorted(ci.last_round.answered) == [0, 1, 2, 3] and ci.last_round.failed == {}
        np.testing.assert_allclose(out, reference(code, X, range(4)), rtol=1e-11, atol=1e-11)


def test_ray_two_node_cluster_survives_removing_a_node(ray_cluster, rng):
    node = ray_cluster.add_node(num_cpus=1)
    ray_cluster.wait_for_nodes()
    code = letcc.BACC(2, 4)
    with CodedInference(model, code, backend="ray", hang_timeout=30.0,
                        ray_options={"num_cpus": 0.2, "scheduling_strategy": "SPREAD"}) as ci:
        X = rng.standard_normal((2, D))
        out = ci(X)
        assert sorted(ci.last_round.answered) == [0, 1, 2, 3]
        np.testing.assert_allclose(out, reference(code, X, range(4)), rtol=1e-11, atol=1e-11)
        ray_cluster.remove_node(node)
        failed = set()
        with pytest.warns(RuntimeWarning, match="died|hang_timeout"):
            for _ in range(200):          # rounds go on; actors of the lost node are erasures
                X = rng.standard_normal((2, D))
                out = ci(X)
                info = ci.last_round
                assert len(info.answered) >= 1
                np.testing.assert_allclose(out, reference(code, X, info.answered), rtol=1e-11, atol=1e-11)
                failed |= {j for j, why in info.failed.items() if why in ("died", "hung", "not ready")}
                if failed and len(ci.ready_workers()) == 4:
                    break
                time.sleep(0.1)
        assert failed, "SPREAD put no actor on the removed node"
        ci.wait_ready(120)                # restarted on the remaining node
        out = ci(X)
        assert sorted(ci.last_round.answered) == [0, 1, 2, 3]
        np.testing.assert_allclose(out, reference(code, X, range(4)), rtol=1e-11, atol=1e-11)


def test_ray_serves_coded_rounds_in_flight_and_the_hedged_baseline(ray_cluster, rng):
    """CodedServer(backend="ray"): rounds in flight on one actor per worker give
    the round API's estimates; the hedged baseline answers exactly."""
    from letcc.serving import CodedServer, Hedged

    code = letcc.LeTCC(4, 8)
    X = rng.random((16, D))
    with CodedServer(functools.partial(model), code, backend="ray", rounds_in_flight=2, max_batch_delay=1e6,
                     wait_for=8, threads_per_worker=1) as s:
        futs = [s.submit(x) for x in X]
        got = np.stack([f.result(120) for f in futs])
        st = s.stats()
    for r in range(4):
        groups = X[4 * r:4 * r + 4]
        coded = np.asarray(code.encode(groups))
        f = Model(None).f
        Y = np.stack([f(coded[j][None])[0] for j in range(8)])
        want = np.asarray(code.decode(Y, np.arange(8)))
        np.testing.assert_allclose(got[4 * r:4 * r + 4], want, rtol=1e-10, atol=1e-12)
    assert st["completed"] == 16 and 1 <= st["rounds"] <= 4      # B groups of K when the queue is deep
    with CodedServer(functools.partial(model), Hedged(4), backend="ray", threads_per_worker=1) as s:
        got = np.stack(s.map(X, timeout=120))
    np.testing.assert_allclose(got, Model(None).f(X), rtol=1e-12)
