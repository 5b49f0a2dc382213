"""Environments in Ray actors (rollout.env_executor="ray"): episodes equal the local ones, a
killed or hung worker ends its episodes as env_error (masked, never a crash) and is replaced,
and the loop trains with its environments on a two-node loopback cluster."""

import os
import signal
import time

import jax
import pytest

ray = pytest.importorskip("ray")

from rlvr.envs.kv_store import KVStoreEnv  # noqa: E402
from rlvr.rollout.agent_loop import run_episodes  # noqa: E402
from rlvr.tasks import kv_agent  # noqa: E402
from rlvr.verifiers.ray_envs import RayEnvFactory  # noqa: E402
from tests.rollout.test_agent_loop import _oracle_policy, _sampling, _starts, _tok  # noqa: E402
from tests.verifiers.test_ray_pool import cluster  # noqa: E402,F401


def _local():
    return KVStoreEnv(fault_prob=0.0)


def _run(make_env, tasks, policy):
    tok = _tok()
    return run_episodes(None, _starts(tasks, tok), make_env, jax.random.PRNGKey(0), tokenizer=tok,
                        sampling=_sampling(), policy=policy, max_turns=8, max_tokens=128,
                        wall_time_s=600.0)


def test_episodes_in_ray_workers_equal_the_local_ones(cluster):  # noqa: F811
    tasks = kv_agent.generate(4, seed=1)
    tok = _tok()
    remote = RayEnvFactory(_local, num_workers=2, call_timeout_s=30.0)
    try:
        got = _run(remote, tasks, _oracle_policy(tasks, tok))
        want = _run(_local, tasks, _oracle_policy(tasks, tok))
        assert remote.worker_pids() and os.getpid() not in remote.worker_pids()
        for a, b in zip(got.episodes, want.episodes, strict=True):
            assert a.tokens == b.tokens and a.stop_reason == b.stop_reason and a.env_error is None
            assert a.state_hashes == b.state_hashes and a.env.state() == b.env.state()
        live = lambda: sum(ray.get(remote.host(i).live.remote()) for i in range(2))  # noqa: E731
        assert live() == 4
        del got, a, b  # the episodes go, and their environments with them
        import gc
        gc.collect()
        time.sleep(0.5)
        assert live() == 0
    finally:
        remote.close()
    assert remote.name == "kv_store" and remote.version == _local().version


def test_a_killed_worker_ends_its_episodes_as_env_error_and_is_replaced(cluster):  # noqa: F811
    tasks = kv_agent.generate(4, seed=2)
    tok = _tok()
    remote = RayEnvFactory(_local, num_workers=2, call_timeout_s=30.0)
    oracle = _oracle_policy(tasks, tok)
    calls = {"n": 0}

    def killing_policy(prefixes, key, sampling, **kw):
        calls["n"] += 1
        if calls["n"] == 2:  # mid-episode: the first worker dies
            os.kill(remote.worker_pids()[0], signal.SIGKILL)
            time.sleep(0.5)
        return oracle(prefixes, key, sampling, **kw)

    try:
        out = _run(remote, tasks, killing_policy)
        errors = [e.env_error for e in out.episodes]
        assert any(errors) and not all(errors), errors  # the other worker's episodes finish
        assert all("lost" in x or "environment" in x for x in errors if x)
        assert {e.stop_reason for e in out.episodes if e.env_error} == {"env_error"}
        again = _run(remote, tasks, _oracle_policy(tasks, tok))  # a new worker takes the slot
        assert all(e.env_error is None for e in again.episodes)
        assert remote.restarts >= 1
    finally:
        remote.close()


class _HangingEnv(KVStoreEnv):
    def step(self, action):
        time.sleep(30)
        return super().step(action)


def test_a_hung_environment_call_is_env_error_within_the_limit(cluster):  # noqa: F811
    tasks = kv_agent.generate(1, seed=3)
    remote = RayEnvFactory(lambda: _HangingEnv(fault_prob=0.0), num_workers=1, call_timeout_s=1.0)
    try:
        remote.host(0)  # the worker is up: what is timed is the hung call
        t0 = time.monotonic()
        out = _run(remote, tasks, _oracle_policy(tasks, _tok()))
        assert time.monotonic() - t0 < 20  # the call sleeps 30 s; the limit is 1 s
        e, = out.episodes
        assert e.stop_reason == "env_error" and "took more than 1.0 s" in e.env_error
    finally:
        remote.close()


def test_the_loop_trains_with_its_environments_in_ray(cluster, tmp_path):  # noqa: F811
    from rlvr.verifiers.ray_envs import RayEnvironment
    from tests.train.tiny import run_tiny, tiny_agent_config

    c = tiny_agent_config("agent_grpo", rollout__env_executor="ray", rollout__env_workers=2,
                          train__num_steps=1, eval__every=1, checkpoint__every=1)
    c.reward.ray_address = cluster.address
    r, result = run_tiny(c, tmp_path)
    assert result["step"] == 1
    assert isinstance(r.collector.engine.kit.env_factory(), RayEnvironment)
