"""A small run of the verification-pool stress check (benchmarks/verify_pool_stress.py): mixed
honest / failing / hanging / crashing candidates through the process pool — every job gets
exactly one verdict of the right class, and timeouts, crashes, retries and worker restarts are
counted exactly."""

import pathlib
import sys

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))  # spawned workers inherit sys.path and unpickle the verifier

import verify_pool_stress as stress  # noqa: E402


def test_mixed_faults_through_the_process_pool():
    r = stress.run_stress(160, workers=2, timeout_s=0.2, hang_frac=0.05, crash_frac=0.05,
                          retries=1, batch=40, seed=1)
    counts = r["settings"]["counts"]
    assert counts["hanging"] == counts["crashing"] == 8
    failed = [(name, exp, obs) for name, exp, obs, ok in r["checks"] if not ok]
    assert failed == []
    assert len(r["checks"]) == 13 and r["stats"]["worker_restarts"] == 32
    assert r["rss"]["parent"] and r["rss"]["workers"]  # memory was sampled
    report = stress.format_report(r)
    assert "| worker restarts | 32 | 32 | yes |" in report


def test_a_lost_or_misplaced_verdict_is_caught(monkeypatch):
    # the check must be able to fail: a pool that swaps two verdicts is reported
    real = stress.VerificationPool.verify_batch

    def swapped(self, tasks, outputs):
        vs = real(self, tasks, outputs)
        if len(vs) > 2:
            vs[0], vs[1] = vs[1], vs[0]
        return vs

    monkeypatch.setattr(stress.VerificationPool, "verify_batch", swapped)
    r = stress.run_stress(20, workers=1, timeout_s=0.2, hang_frac=0.0, crash_frac=0.0,
                          batch=20, seed=0)
    assert not dict((name, ok) for name, _, _, ok in r["checks"])[
        "pass/fail verdicts that name their own job"]
