"""The loop verifies through rlvr.verifiers.pool.VerificationPool (R2.1, R6.2, R6.3)."""

import numpy as np

from rlvr.train import loop
from rlvr.train.metrics import read_metrics
from rlvr.verifiers.verdict import Verdict, env_error
from tests.train.tiny import tiny_config


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


def test_env_errors_retried_then_masked_and_counted(tmp_path):
    c = tiny_config(reward__executor="inline", reward__max_retries=2)
    trainer = loop.Trainer(c, str(tmp_path))
    trainer.verifier = _Flaky()
    task = trainer.source.sample(1, seed=0)[0]
    texts = ["bad", "once", str(task.reference_answer), "nonsense"]
    rewards, valid, verdicts = trainer.verify([task], texts, repeat=4)
    np.testing.assert_array_equal(valid, [False, True, True, True])
    np.testing.assert_array_equal(rewards, [0.0, 0.0, 1.0, 0.0])
    assert trainer.verifier.calls["bad"] == 3  # 1 + max_retries, then masked
    assert trainer.verifier.calls["once"] == 2
    m = trainer.host_metrics([task], texts, verdicts, rewards, valid)
    assert m["verify/masked_count"] == 1 and m["verify/masked_frac"] == 0.25
    assert m["verify/env_error_rate"] == 0.25
    assert m["verify/retries"] == 3  # bad twice, once once
    assert trainer.host_metrics([task], texts, verdicts, rewards, valid)["verify/retries"] == 0
    trainer.close()


def test_process_executor_training_step(tmp_path):
    c = tiny_config(reward__executor="process", reward__num_workers=1, reward__timeout_s=60.0,
                    train__num_steps=1, eval__every=0, eval__num_tasks=2, checkpoint__every=0)
    trainer = loop.Trainer(c, str(tmp_path))
    loop.train(trainer)
    assert trainer._pool is None  # closed at the end of the run
    rows = [r for r in read_metrics(str(tmp_path)) if r["step"] == 1]
    assert rows and rows[-1]["verify/masked_frac"] == 0.0 and rows[-1]["verify/timeouts"] == 0.0
    ref = loop.Trainer(tiny_config(reward__executor="inline"), str(tmp_path / "ref"))
    tasks = ref.source.sample(2, seed=3)
    texts = [str(tasks[0].reference_answer), "1", "x", str(tasks[1].reference_answer)]
    expect = ref.verify(tasks, texts, repeat=2)[0]
    trainer2 = loop.Trainer(c, str(tmp_path / "p"))
    np.testing.assert_array_equal(trainer2.verify(tasks, texts, repeat=2)[0], expect)
    trainer2.close()
    ref.close()
