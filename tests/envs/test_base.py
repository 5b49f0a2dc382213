"""Environment protocol pieces: seeds (docs/architecture.md §4), snapshots and hashes."""

import dataclasses
import hashlib
import json

import pytest

from rlvr.envs.base import (
    EnvSnapshot,
    SnapshotError,
    canonical_json,
    derive_seed,
    group_seeds,
    hash_state,
    retry_seed,
)


def test_group_seeds_common_and_independent():
    assert group_seeds(7, 4) == [7, 7, 7, 7]
    indep = group_seeds(7, 4, common=False)
    assert len(set(indep)) == 4 and 7 not in indep
    assert indep == group_seeds(7, 4, common=False)  # deterministic
    assert indep != group_seeds(8, 4, common=False)
    with pytest.raises(ValueError, match="group_size"):
        group_seeds(7, 0)
    with pytest.raises(ValueError, match="base_seed"):
        group_seeds("7", 2)


def test_retry_seed_changes_only_on_retry():
    assert retry_seed(5, 0) == 5
    assert len({retry_seed(5, a) for a in range(5)}) == 5
    with pytest.raises(ValueError):
        retry_seed(5, -1)


def test_derive_seed_range_and_determinism():
    s = derive_seed("a", 1, 2)
    assert s == derive_seed("a", 1, 2) and 0 <= s < 2**63
    assert s != derive_seed("a", 2, 1)


def test_hash_state_is_sha256_of_canonical_json_and_order_free():
    a = {"b": [1, 2], "a": {"y": None, "x": "s"}}
    b = {"a": {"x": "s", "y": None}, "b": [1, 2]}
    ref = hashlib.sha256(b'{"a":{"x":"s","y":null},"b":[1,2]}').hexdigest()
    assert hash_state(a) == hash_state(b) == ref
    assert canonical_json(a) == '{"a":{"x":"s","y":null},"b":[1,2]}'
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_snapshot_is_frozen_deep_copied_serialisable_and_tamper_evident():
    state = {"regs": {"a": 1}, "log": []}
    snap = EnvSnapshot.of("kv_store", "v1", 3, state)
    state["regs"]["a"] = 9  # mutating the source does not reach the snapshot
    assert snap.state() == {"regs": {"a": 1}, "log": []}
    got = snap.state()
    got["regs"]["a"] = 5  # nor does mutating a returned copy
    assert snap.state()["regs"]["a"] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.seed = 4
    assert EnvSnapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap
    d = snap.to_dict()
    d["state_json"] = d["state_json"].replace('"a":1', '"a":2')
    with pytest.raises(SnapshotError, match="corrupt"):
        EnvSnapshot.from_dict(d)
    with pytest.raises(SnapshotError, match="missing"):
        EnvSnapshot.from_dict({"env_name": "x"})
