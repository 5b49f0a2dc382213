"""Every decision goes through the one reward path: the verification pool (retries, masking,
counters) and reward composition (docs/verifiers.md (V.1), docs/architecture.md §1, §4)."""

import numpy as np

from rlvr.records.batch import RolloutBatch
from rlvr.records.verdict import Verdict, env_error
from rlvr.rollout.sampler import SamplingParams
from rlvr.tasks.kit import get_kit
from rlvr.train.collectors import Collected, make_samples
from rlvr.train.judge import Judge, reward_config_from
from rlvr.train.metrics import read_metrics
from rlvr.train.samples import sample_metrics
from tests.train.tiny import run_tiny, tiny_config


class _Flaky:
    """Output "bad" is always an env_error; "once" is an env_error on its first call only."""

    version = "flaky/1"

    def __init__(self):
        self.calls = {}

    def verify(self, task, output):
        n = self.calls[output] = self.calls.get(output, 0) + 1
        if output == "bad" or (output == "once" and n == 1):
            return env_error("simulated outage")
        ok = output.strip() == str(task.reference_answer)
        return Verdict(decision="pass" if ok else "fail", trial="valid", components={"correct": float(ok)})


def _collected(tasks, texts, j):
    b = len(texts)
    batch = RolloutBatch.create(tokens=np.ones((b, 3), np.int32), loss_mask=np.ones((b, 3)),
                                behavior_logprobs=np.zeros((b, 3)), rewards=j.rewards, valid=j.valid)
    samples = make_samples(tasks, texts, j, stop_reasons=["eos"] * b, policy_versions=0,
                           sampling=SamplingParams(), environment_version="", prompts=[t.prompt for t in tasks])
    return Collected(batch, samples, tuple(tasks), len(texts))


def test_env_errors_retried_then_masked_and_counted():
    c = tiny_config(reward__executor="inline", reward__max_retries=2)
    flaky = _Flaky()
    judge = Judge(flaky, reward_config_from(c), executor="inline")
    task = get_kit("arithmetic").source.sample(1, seed=0)[0]
    texts = ["bad", "once", str(task.reference_answer), "nonsense"]
    j = judge.judge([task] * 4, texts)
    np.testing.assert_array_equal(j.valid, [False, True, True, True])
    np.testing.assert_array_equal(j.rewards, [0.0, 0.0, 1.0, 0.0])
    assert flaky.calls["bad"] == 3  # 1 + max_retries, then masked
    assert flaky.calls["once"] == 2
    m = sample_metrics(_collected([task] * 4, texts, j))
    assert m["verify/masked_count"] == 1 and m["verify/masked_frac"] == 0.25
    assert m["verify/env_error_rate"] == 0.25
    assert judge.counters()["retries"] == 3  # bad twice, once once
    assert judge.counters()["retries"] == 0  # counters are per call
    judge.close()


def test_process_executor_training_step(tmp_path):
    c = tiny_config(reward__executor="process", reward__num_workers=1, reward__timeout_s=60.0,
                    train__num_steps=1, eval__every=0, eval__num_tasks=2, checkpoint__every=0)
    r, _ = run_tiny(c, tmp_path)
    rows = [row for row in read_metrics(str(tmp_path)) if row["step"] == 1]
    assert rows and rows[-1]["verify/masked_frac"] == 0.0 and rows[-1]["verify/timeouts"] == 0.0
    kit = get_kit("arithmetic", difficulty=dict(c.task.kwargs.difficulty))
    tasks = kit.source.sample(2, seed=3)
    texts = [str(tasks[0].reference_answer), "1", "x", str(tasks[1].reference_answer)]
    rows = [tasks[0], tasks[0], tasks[1], tasks[1]]
    inline = Judge(kit.verifier, reward_config_from(c), executor="inline")
    process = Judge(kit.verifier, reward_config_from(c), executor="process", num_workers=1, timeout_s=60.0)
    try:
        np.testing.assert_array_equal(process.judge(rows, texts).rewards, inline.judge(rows, texts).rewards)
    finally:
        inline.close()
        process.close()
