"""Verification pool on Ray actors (reward.executor="ray"): same verdicts as the process pool,
timeouts and killed actors become env_error, are retried on another actor, and are masked.

One local Ray cluster per module: a head node and one worker node, each its own raylet process,
on the loopback address, shut down after the module even when a test fails."""

import os
import signal
import sys
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from rlvr.records.task import TaskSpec  # noqa: E402
from rlvr.verifiers.arithmetic import IntegerAnswerVerifier  # noqa: E402
from rlvr.verifiers.compose import RewardConfig, compose_rewards  # noqa: E402
from rlvr.verifiers.pool import VerificationPool  # noqa: E402
from tests.verifiers.test_pool import ScriptedVerifier  # noqa: E402

T = TaskSpec(task_id="t", prompt="", task_type="text")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MB = 1024 * 1024


@pytest.fixture(scope="module")
def cluster():
    import ray._private.services as services
    from ray.cluster_utils import Cluster

    mp = pytest.MonkeyPatch()  # every node on the loopback address, whatever the network says
    mp.setattr(services, "node_ip_address_from_perspective", lambda *a, **k: "127.0.0.1")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = ROOT + (os.pathsep + old if old else "")  # actors import rlvr, tests
    c = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=2, object_store_memory=100 * MB, include_dashboard=False,
        node_ip_address="127.0.0.1"))
    try:
        c.add_node(num_cpus=2, object_store_memory=100 * MB, node_ip_address="127.0.0.1")
        ray.init(address=c.address, log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        mp.undo()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def test_cluster_has_two_nodes_on_loopback(cluster):
    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 2 and {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}


def test_ray_verdicts_equal_the_process_pool(cluster):
    tasks = [TaskSpec(f"a{i}", "x=", "math", reference_answer=i)
             for i in range(12)]
    outputs = [str(i if i % 3 else i + 1) for i in range(12)]
    with VerificationPool(IntegerAnswerVerifier(), num_workers=2, executor="process") as p:
        want = p.verify_batch(tasks, outputs)
    with VerificationPool(IntegerAnswerVerifier(), num_workers=2, executor="ray") as p:
        got = p.verify_batch(tasks, outputs)
    assert [v.to_dict() for v in got] == [v.to_dict() for v in want]
    assert {v.decision for v in got} == {"pass", "fail"}
    r1, m1 = compose_rewards(want, RewardConfig())
    r2, m2 = compose_rewards(got, RewardConfig())
    assert r1.tolist() == r2.tolist() and m1.tolist() == m2.tolist()


def test_ray_mixed_batch_timeouts_crashes_retries(cluster, tmp_path):
    outs = ["pass", "fail", "env_error", "hang", "die", f"die_once:{tmp_path}/m", "raise", "pass"]
    with VerificationPool(ScriptedVerifier(), num_workers=2, timeout_s=1.0, max_env_retries=1,
                          executor="ray") as p:
        vs = p.verify_batch([T] * len(outs), outs)
        s = p.stats()
    assert [v.decision for v in vs[:2]] == ["pass", "fail"]
    assert vs[2].trial == "env_error" and vs[2].evidence["attempts"] == 2
    assert vs[3].trial == "env_error" and vs[3].evidence["timeout_class"] == "verifier_service"
    assert vs[4].trial == "env_error" and vs[4].evidence["fault"] == "infrastructure"
    assert vs[5].decision == "pass" and vs[5].evidence["attempts"] == 2  # crashed, retried, ok
    assert vs[6].trial == "env_error" and vs[7].decision == "pass"
    assert compose_rewards(vs, RewardConfig())[1].tolist() == \
        [True, True, False, False, False, True, False, True]
    assert s["verdicts"] == 8 and s["env_error"] == 4 and s["pass"] == 3
    assert s["timeouts"]["verifier_service"] == 2
    assert s["worker_crashes"] == 3 and s["worker_restarts"] >= 5 and s["retries"] == 5


def test_killing_an_actor_mid_verification_is_retried_on_another(cluster):
    with VerificationPool(ScriptedVerifier(), num_workers=2, timeout_s=20.0, max_env_retries=2,
                          executor="ray") as p:
        p.verify_batch([T] * 2, ["pass", "pass"])  # both actors up
        victim = p.executor.worker_pids()[0]
        killed = threading.Event()

        def killer():
            time.sleep(0.5)
            os.kill(victim, signal.SIGKILL)
            killed.set()

        th = threading.Thread(target=killer)
        th.start()
        vs = p.verify_batch([T] * 2, ["sleep:2", "sleep:2"])
        th.join()
        s = p.stats()
        assert victim not in p.executor.worker_pids()
    assert killed.is_set()
    assert s["worker_crashes"] == 1 and s["env_error_events"] == 1 and s["retries"] == 1
    assert all(v.decision == "pass" for v in vs)
    assert sorted(v.evidence.get("attempts", 1) for v in vs) == [1, 2]


def test_killed_actor_without_retries_is_masked(cluster):
    with VerificationPool(ScriptedVerifier(), num_workers=1, timeout_s=5.0, max_env_retries=0,
                          executor="ray") as p:
        v, = p.verify_batch([T], ["die"])
    assert v.trial == "env_error" and v.evidence["fault"] == "infrastructure"
    assert compose_rewards([v], RewardConfig())[1].tolist() == [False]


def test_missing_ray_is_named_in_config_and_pool_errors(monkeypatch):
    from configs.base import get_config
    from rlvr.train.config import ConfigError, validate_config

    c = get_config()
    c.reward.executor = "ray"
    validate_config(c)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    with pytest.raises(ConfigError, match=r'reward.executor="ray" needs the ray package: '
                                          r'pip install "rlvr\[ray\]"'):
        validate_config(c)
    with pytest.raises(ImportError, match=r'pip install "rlvr\[ray\]"'):
        VerificationPool(ScriptedVerifier(), executor="ray")


def test_an_empty_ray_address_is_refused_naming_the_field():
    from configs.base import get_config
    from rlvr.train.config import ConfigError, validate_config

    c = get_config()
    c.reward.executor = "ray"
    c.reward.ray_address = "auto"
    validate_config(c)
    c.reward.ray_address = " "
    with pytest.raises(ConfigError, match="config.reward.ray_address must be 'local', 'auto'"):
        validate_config(c)
