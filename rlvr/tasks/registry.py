"""Task sources by name, and weighted mixtures of them (docs/architecture.md (B.1) task sampling, docs/algorithms.md (A.20)).

    src = get_task_source("arithmetic", difficulty="medium")
    batch = src.sample(64, seed=step)          # training tasks (train split)
    evals = src.eval_set("eval", 200)          # fixed held-out set; "unseen" for the unseen one
    verdict = src.verifier.verify(task, completion)
    text = src.demonstration(task)             # oracle completion (SFT warm-start)
    src.alphabet                               # chars of every prompt/answer, or None

Names: "arithmetic", "countdown", "reasoning_gym:<generator>", "jsonl:<path>". Keyword
arguments go to the source (difficulty=... for the procedural ones, generator config knobs for
reasoning-gym, verifier=... and eval_path=... for JSONL).

Every generated task carries `public_metadata["source"]`; `RoutingVerifier` (the verifier of a
JSONL source or a mixture) picks the verifier by that name; JSONL tasks without a known source
go to their task_type's default verifier (`rlvr.verifiers.routing`: code, math, structured).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from rlvr.tasks import arithmetic, countdown
from rlvr.tasks import reasoning_gym as rg_tasks
from rlvr.tasks import splits
from rlvr.tasks.loader import MAX_RECORD_BYTES, load_jsonl_numbered
from rlvr.records.task import TaskSpec

if TYPE_CHECKING:  # the kit module imports this one; the name is for annotations only
    from rlvr.tasks.kit import TaskKit

ALLOWED_NAMES = ("arithmetic", "countdown", "reasoning_gym:<generator>", "jsonl:<path>")
_PROCEDURAL = {arithmetic.NAME: arithmetic, countdown.NAME: countdown}


@runtime_checkable
class TaskSource(Protocol):
    """What the training loop needs from a task source."""

    name: str

    def sample(self, n: int, seed: splits.SeedLike) -> list[TaskSpec]: ...

    def eval_set(self, split: str = "eval", n: Optional[int] = None, seed: int = 0) -> list[TaskSpec]: ...

    @property
    def verifier(self) -> Any: ...

    def demonstration(self, task: TaskSpec) -> str: ...

    @property
    def alphabet(self) -> Optional[str]: ...


def verifier_for_source(source: str):
    """The default verifier for tasks whose public_metadata["source"] is `source`, or None."""
    if source in _PROCEDURAL:
        return _PROCEDURAL[source].verifier()
    if isinstance(source, str) and source.startswith(rg_tasks.PREFIX + ":"):
        return rg_tasks.verifier()
    return None


class RoutingVerifier:
    """Dispatches each task to a verifier by `public_metadata["source"]`, else by task_type.

    Routes are fixed at construction, so `version` (which names every route's verifier version)
    is a stable reward-cache key (docs/verifiers.md §4): it changes whenever any routed verifier changes. Each
    verdict carries the version of the verifier that produced it. A task with no route raises
    ValueError naming its source (a configuration error, not a policy failure).
    """

    def __init__(self, routes: Mapping[str, Any], by_task_type: Optional[Mapping[str, Any]] = None):
        self._routes = dict(routes)
        self._by_type = dict(by_task_type or {})
        parts = [f"{k}={v.version}" for k, v in sorted(self._routes.items())]
        parts += [f"type:{k}={v.version}" for k, v in sorted(self._by_type.items())]
        self.version = "routing/1(" + ";".join(parts) + ")"

    @classmethod
    def for_tasks(cls, tasks: Sequence[TaskSpec]) -> "RoutingVerifier":
        """Routes for every source in `tasks`; a task without a known source goes to its
        task_type's default verifier (`rlvr.verifiers.routing`: code → CodeVerifier, math →
        MathVerifier, structured → StructuredVerifier)."""
        from rlvr.verifiers.routing import DEFAULT_VERIFIERS, default_verifier_for_task_type

        routes: dict[str, Any] = {}
        by_type: dict[str, Any] = {}
        for t in tasks:
            source = t.public_metadata.get("source")
            if source in routes:
                continue
            v = verifier_for_source(source)
            if v is not None:
                routes[source] = v
            elif t.task_type in DEFAULT_VERIFIERS and t.task_type not in by_type:
                by_type[t.task_type] = default_verifier_for_task_type(t.task_type)
        return cls(routes, by_type)

    def verifier_for(self, task: TaskSpec):
        source = task.public_metadata.get("source")
        if source in self._routes:
            return self._routes[source]
        if task.task_type in self._by_type:
            return self._by_type[task.task_type]
        raise ValueError(
            f"no verifier for task {task.task_id!r}: public_metadata['source']={source!r} is not one of "
            f"{sorted(self._routes)} and task_type {task.task_type!r} is not one of {sorted(self._by_type)}")

    def verify(self, task: TaskSpec, output: str):
        return self.verifier_for(task).verify(task, output)


def _demonstration_by_source(task: TaskSpec) -> str:
    source = task.public_metadata.get("source")
    if source in _PROCEDURAL:
        return _PROCEDURAL[source].demonstration(task)
    if isinstance(source, str) and source.startswith(rg_tasks.PREFIX + ":"):
        return rg_tasks.demonstration(task)
    raise ValueError(f"no demonstration for task {task.task_id!r} (source {source!r})")


@dataclasses.dataclass(frozen=True)
class ProceduralSource:
    """Arithmetic or countdown tasks at one difficulty (preset name, knob mapping or dataclass)."""

    kind: str
    difficulty: Any = None

    def __post_init__(self):
        if self.kind not in _PROCEDURAL:
            raise ValueError(f"ProceduralSource.kind must be one of {tuple(_PROCEDURAL)}, got {self.kind!r}")
        object.__setattr__(self, "difficulty", _PROCEDURAL[self.kind].resolve_difficulty(self.difficulty))

    @property
    def name(self) -> str:
        return self.kind

    def sample(self, n: int, seed: splits.SeedLike) -> list[TaskSpec]:
        return _PROCEDURAL[self.kind].generate(n, split="train", seed=seed, difficulty=self.difficulty)

    def eval_set(self, split: str = "eval", n: Optional[int] = None, seed: int = 0) -> list[TaskSpec]:
        """`n` distinct tasks of `split` (fixed for a seed); n=None → up to 100 (fewer when the
        difficulty has fewer distinct instances in that split, e.g. 28 for easy arithmetic)."""
        if n is None:
            return _PROCEDURAL[self.kind].generate(100, split=split, seed=seed,
                                                   difficulty=self.difficulty, allow_fewer=True)
        return _PROCEDURAL[self.kind].generate(n, split=split, seed=seed, difficulty=self.difficulty)

    @functools.cached_property
    def verifier(self):
        return _PROCEDURAL[self.kind].verifier()

    def demonstration(self, task: TaskSpec) -> str:
        return _PROCEDURAL[self.kind].demonstration(task)

    @property
    def alphabet(self) -> str:
        return _PROCEDURAL[self.kind].ALPHABET


@dataclasses.dataclass(frozen=True)
class ReasoningGymSource:
    """Tasks from one reasoning-gym generator; `config` holds its knobs (difficulty)."""

    generator: str
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        rg_tasks.check_generator(self.generator)

    @property
    def name(self) -> str:
        return rg_tasks.source_name(self.generator)

    def sample(self, n: int, seed: splits.SeedLike) -> list[TaskSpec]:
        return rg_tasks.generate(self.generator, n, split="train", seed=seed, **self.config)

    def eval_set(self, split: str = "eval", n: Optional[int] = None, seed: int = 0) -> list[TaskSpec]:
        n = 100 if n is None else n
        return rg_tasks.generate(self.generator, n, split=split, seed=seed, **self.config)

    @functools.cached_property
    def verifier(self):
        return rg_tasks.verifier()

    def demonstration(self, task: TaskSpec) -> str:
        return rg_tasks.demonstration(task)

    @property
    def alphabet(self) -> None:
        return None


class JsonlSource:
    """Tasks from a JSONL file (validated by `load_jsonl`).

    Splits come from `public_metadata["split"]` ("train" when absent). `eval_path`
    (`config.task.eval_path`) adds a second JSONL file whose tasks are all "eval" (one naming
    another split, or repeating a task of the first file, is an error). `sample` draws from the
    train tasks, cycling through seeded permutations when n exceeds their number; `eval_set`
    returns the tasks tagged with the split, in file order. `max_record_bytes`: the longest line
    read (`rlvr.tasks.loader`).
    """

    def __init__(self, path: str, verifier: Any = None, eval_path: str = "",
                 max_record_bytes: int = MAX_RECORD_BYTES):
        from rlvr.tasks import files

        self.path = os.fspath(path)
        self.eval_path = files.check_eval_path(eval_path)
        numbered = load_jsonl_numbered(self.path, max_record_bytes)
        self.tasks = [t for _, t in numbered]
        if self.eval_path:
            seen = {t.task_id: (self.path, n) for n, t in numbered}
            self.tasks += files.load_tasks(self.eval_path, files.r65_task(None), force_split="eval",
                                           seen=seen, max_record_bytes=max_record_bytes)
        self.name = f"jsonl:{self.path}"
        self._verifier = verifier if verifier is not None else RoutingVerifier.for_tasks(self.tasks)
        self._by_split: dict[str, list[TaskSpec]] = {}
        for t in self.tasks:
            self._by_split.setdefault(t.public_metadata.get("split", "train"), []).append(t)

    def sample(self, n: int, seed: splits.SeedLike) -> list[TaskSpec]:
        pool = self._by_split.get("train", [])
        if not pool:
            raise ValueError(f"{self.path}: no train tasks to sample (splits present: {sorted(self._by_split)})")
        rng = splits.make_rng(splits.seed_int(seed), self.name)
        order: list[int] = []
        while len(order) < n:
            order.extend(int(i) for i in rng.permutation(len(pool)))
        return [pool[i] for i in order[:n]]

    def eval_set(self, split: str = "eval", n: Optional[int] = None, seed: int = 0) -> list[TaskSpec]:
        if split not in self._by_split:
            raise ValueError(f"{self.path}: no tasks with public_metadata.split == {split!r} "
                             f"(splits present: {sorted(self._by_split)})"
                             + ("; or set config.task.eval_path to a file of eval tasks"
                                if split == "eval" else ""))
        tasks = self._by_split[split]
        return tasks if n is None else tasks[:n]

    @property
    def verifier(self):
        return self._verifier

    def demonstration(self, task: TaskSpec) -> str:
        return _demonstration_by_source(task)

    @property
    def alphabet(self) -> None:
        return None


def weight_counts(n: int, weights: Sequence[float]) -> list[int]:
    """n split by the normalised `weights` (largest remainder): floor(n·w_i), then one more for
    the components with the largest fractional parts until they sum to n."""
    exact = [n * w for w in weights]
    counts = [int(math.floor(x)) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])[: n - sum(counts)]:
        counts[i] += 1
    return counts


class MixtureSource:
    """A weighted mixture of task sources (seed docs/algorithms.md (A.20): λ_e D_easy + λ_m D_medium + ...).

    `sample(n, seed)` draws per-source counts from a multinomial with the normalised weights,
    samples each source and shuffles; `eval_set(split, n)` splits n by largest remainder.
    """

    def __init__(self, components: Sequence[tuple[Any, float]]):
        components = list(components)
        if not components:
            raise ValueError("MixtureSource needs at least one (source, weight) pair")
        for src, w in components:
            if not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w) or w <= 0:
                raise ValueError(f"MixtureSource weights must be finite and > 0, got {w!r} for {src!r}")
            if not isinstance(src, TaskSource):
                raise ValueError(f"MixtureSource component {src!r} is not a TaskSource")
        self.sources = tuple(s for s, _ in components)
        total = float(sum(w for _, w in components))
        self.weights = tuple(float(w) / total for _, w in components)
        self.name = "mixture(" + ",".join(f"{s.name}:{w:.3g}" for s, w in zip(self.sources, self.weights)) + ")"
        routes: dict[str, Any] = {}
        for s in self.sources:
            routes.setdefault(s.name, s.verifier)
        self._verifier = RoutingVerifier(routes)

    def sample(self, n: int, seed: splits.SeedLike) -> list[TaskSpec]:
        seed = splits.seed_int(seed)
        rng = splits.make_rng(seed, "mixture")
        counts = rng.multinomial(n, np.asarray(self.weights))
        tasks: list[TaskSpec] = []
        for src, c in zip(self.sources, counts):
            if c:
                tasks.extend(src.sample(int(c), seed=int(rng.integers(0, 2**62))))
        return [tasks[i] for i in rng.permutation(len(tasks))]

    def eval_set(self, split: str = "eval", n: Optional[int] = None, seed: int = 0) -> list[TaskSpec]:
        n = 100 if n is None else n
        out: list[TaskSpec] = []
        for src, c in zip(self.sources, weight_counts(n, self.weights)):
            if c:
                out.extend(src.eval_set(split, c, seed))
        return out

    @property
    def verifier(self):
        return self._verifier

    def demonstration(self, task: TaskSpec) -> str:
        source = task.public_metadata.get("source")
        for s in self.sources:
            if s.name == source:
                return s.demonstration(task)
        return _demonstration_by_source(task)

    @property
    def alphabet(self) -> Optional[str]:
        alphabets = [s.alphabet for s in self.sources]
        if any(a is None for a in alphabets):
            return None
        return "".join(sorted(set("".join(alphabets))))


def get_task_source(name: str, **kwargs: Any):
    """A TaskSource by name: "arithmetic", "countdown", "reasoning_gym:<generator>", "jsonl:<path>".

    Raises ValueError listing the allowed names for anything else.
    """
    if not isinstance(name, str):
        raise ValueError(f"task source name must be a string, one of {ALLOWED_NAMES}; got {name!r}")
    if name in _PROCEDURAL:
        return ProceduralSource(name, **kwargs)
    prefix, _, rest = name.partition(":")
    if prefix == rg_tasks.PREFIX and rest:
        return ReasoningGymSource(rest, config=dict(kwargs))
    if prefix == "jsonl" and rest:
        return JsonlSource(rest, **kwargs)
    raise ValueError(f"unknown task source {name!r}; allowed: {', '.join(ALLOWED_NAMES)}")


def heldout_tasks(source, n: int, seed: int, split: str = "eval") -> list[TaskSpec]:
    """The fixed held-out set (docs/algorithms.md (A.21)): `n` tasks drawn i.i.d. from the training distribution,
    restricted to `split` (never a training instance, rlvr.tasks.splits).

    `source.eval_set(split, n)` returns n *distinct* instances; when the distribution mixes a
    small sub-space (e.g. 2-operand one-digit sums, ~20 eval instances) with a large one, forcing
    distinctness over-represents the large one, so held-out success would measure a harder
    distribution than the one trained on. Procedural sources are therefore drawn one task per
    derived seed (duplicates allowed, exactly the training distribution); mixtures split n by
    their weights; a source with its own `heldout(n, seed)` uses it; other sources (fixed files)
    keep `eval_set`.
    """
    if isinstance(source, ProceduralSource):
        return [source.eval_set(split, 1, _stream_seed(seed, "heldout", i))[0] for i in range(n)]
    if isinstance(source, MixtureSource):
        rng = np.random.default_rng(_stream_seed(seed, "heldout-mixture"))
        counts = rng.multinomial(n, np.asarray(source.weights))
        out: list[TaskSpec] = []
        for j, (src, k) in enumerate(zip(source.sources, counts)):
            out.extend(heldout_tasks(src, int(k), _stream_seed(seed, "component", j), split))
        return out
    if hasattr(source, "heldout") and split == "eval":
        return source.heldout(n, seed)
    return source.eval_set(split, n, seed)


def _stream_seed(*parts) -> int:
    import hashlib

    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") % (2**62)


# ------------------------------------------------------------------------------- task kits
def _source_kit(source) -> "TaskKit":
    """The kit of a single-turn source: its verifier, demonstrations and alphabet."""
    from rlvr.tasks.kit import TaskKit

    return TaskKit(name=source.name, source=source, verifier=source.verifier,
                   demonstration=source.demonstration, alphabet=source.alphabet)


def _register_kits() -> None:
    from rlvr.tasks.kit import register_kit

    for name in _PROCEDURAL:
        register_kit(name, functools.partial(lambda n, **kw: _source_kit(ProceduralSource(n, **kw)), name))
    register_kit(rg_tasks.PREFIX + ":", lambda gen, **kw: _source_kit(ReasoningGymSource(gen, config=kw)))
    register_kit("jsonl:", lambda path, **kw: _source_kit(JsonlSource(path, **kw)))


_register_kits()
