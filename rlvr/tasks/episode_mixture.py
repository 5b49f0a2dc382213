"""Mixtures of multi-turn kits: one kit whose tasks come from several environments.

docs/algorithms.md (A.20) mixes task distributions by weight. For multi-turn kits each task
names its environment in `environment_snapshot["env"]` (a turn state in `EnvSnapshot.env_name`),
so the mixture routes everything by that name:

  * tasks: `MixtureSource` over the kits' sources (per-kit counts from a multinomial with the
    normalised weights; held-out sets split by weight);
  * `env_factory`: a `MixedEnvironment` that becomes, at `reset` (or `restore`), a fresh
    environment of the task's (or snapshot's) kit and delegates every call to it;
  * the outcome verifier, every turn verifier the kits share, the demonstrations, the episode
    renderer and the hidden verifier: the task's own kit's.

Episodes of different kits share the sampler's batches (each episode is its own stream). The
kits must agree on the action terminator; environment names must differ between kits (they are
the routing key). Kits that render with a tokenizer's chat template (tool kits) mix once bound
to the run's tokenizer: the mixture's `bind_tokenizer` binds every component.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from rlvr.records.task import TaskSpec


def env_name_of(task: TaskSpec) -> str:
    """The environment a multi-turn task (or turn task) runs in."""
    snap = task.environment_snapshot or {}
    name = snap.get("env") or snap.get("env_name")
    if not name:
        raise ValueError(f"task {task.task_id!r}: environment_snapshot names no environment "
                         f"('env' or 'env_name')")
    return str(name)


class MixedEnvironment:
    """The environment of whichever kit a task belongs to (module docstring). Before `reset`
    or `restore` it has none; then every attribute is the inner environment's."""

    def __init__(self, factories: Mapping[str, Callable[[], Any]], version: str):
        self._factories = dict(factories)
        self._inner = None
        self.name, self.version = "mixture", version

    def _become(self, env_name: str):
        if env_name not in self._factories:
            raise ValueError(f"task mixture: no kit of this mixture runs environment {env_name!r} "
                             f"(its environments: {', '.join(sorted(self._factories))})")
        self._inner = self._factories[env_name]()
        self.name, self.version = self._inner.name, self._inner.version
        return self._inner

    def reset(self, task: TaskSpec, *, seed: int):
        return self._become(env_name_of(task)).reset(task, seed=seed)

    def restore(self, snapshot) -> None:
        self._become(snapshot.env_name).restore(snapshot)

    def __getattr__(self, attr):
        inner = self.__dict__.get("_inner")
        if inner is None:
            raise AttributeError(f"MixedEnvironment.{attr}: reset() or restore() first")
        return getattr(inner, attr)


class EnvRoutingVerifier:
    """Judges each task with the verifier of its environment's kit; `version` names them all."""

    def __init__(self, routes: Mapping[str, Any]):
        self._routes = dict(routes)
        self.version = "env-routing/1(" + ";".join(
            f"{k}={getattr(v, 'version', '0')}" for k, v in sorted(self._routes.items())) + ")"

    def verifier_for(self, task: TaskSpec):
        name = env_name_of(task)
        if name not in self._routes:
            raise ValueError(f"no verifier for task {task.task_id!r}: environment {name!r} is not "
                             f"one of {sorted(self._routes)}")
        return self._routes[name]

    def verify(self, task: TaskSpec, output: str):
        return self.verifier_for(task).verify(task, output)


def episode_mixture_kit(kits: Sequence[Any], weights: Sequence[float] = ()):
    """The TaskKit mixing the multi-turn `kits` by `weights` (equal when empty); ValueError
    naming `task.names` when they cannot mix."""
    from rlvr.tasks.kit import TaskKit
    from rlvr.tasks.registry import MixtureSource

    kits = list(kits)
    names = [k.name for k in kits]
    single = [k.name for k in kits if not k.multi_turn]
    if single:
        raise ValueError(f"task.names: a mixture holds single-turn kits or multi-turn kits, not "
                         f"both; {single} are single-turn, {[n for n in names if n not in single]} "
                         f"multi-turn")
    terminators = {k.action_terminator for k in kits}
    if len(terminators) > 1:
        raise ValueError(f"task.names: the multi-turn kits {names} end actions differently "
                         f"({sorted(terminators)}); a mixture's episodes share one sampler")
    bound = [k.bind_tokenizer is not None for k in kits]
    if any(bound) and not all(bound):
        raise ValueError(f"task.names: {names} mix kits rendered by a chat template with kits "
                         f"that are not; mix kits of one kind")
    envs = {}
    for k in kits:
        env = k.env_factory()
        if env.name in envs:
            raise ValueError(f"task.names: kits {envs[env.name].name!r} and {k.name!r} both run "
                             f"environment {env.name!r}; a mixture routes tasks by environment")
        envs[env.name] = k
    by_env: dict[str, Any] = envs
    version = "+".join(f"{n}/{getattr(k.env_factory(), 'version', '0')}" for n, k in sorted(by_env.items()))
    factories = {n: k.env_factory for n, k in by_env.items()}

    def route(attr: str) -> Callable:
        def call(task, *args):
            return getattr(by_env[env_name_of(task)], attr)(task, *args)
        return call

    modes = set.intersection(*(set(k.turn_verifiers) for k in kits))
    hidden = (EnvRoutingVerifier({n: k.hidden_verifier for n, k in by_env.items()})
              if all(k.hidden_verifier is not None for k in kits) else None)
    alphabets = [k.alphabet for k in kits]
    alphabet = None if any(a is None for a in alphabets) else "".join(sorted(set("".join(alphabets))))
    weights = list(weights) or [1.0] * len(kits)
    if len(weights) != len(kits):
        raise ValueError(f"task.weights must give one weight per task.names entry, got "
                         f"{len(weights)} for {len(kits)}")
    source = MixtureSource([(k.source, float(w)) for k, w in zip(kits, weights)])

    def bind(tokenizer, **settings):
        return episode_mixture_kit([k.bind_tokenizer(tokenizer, **settings) for k in kits], weights)

    return TaskKit(
        name=source.name, source=source,
        verifier=EnvRoutingVerifier({n: k.verifier for n, k in by_env.items()}),
        demonstration=route("demonstration") if all(k.demonstration for k in kits) else None,
        alphabet=alphabet, env_factory=lambda: MixedEnvironment(factories, version),
        turn_verifiers={m: EnvRoutingVerifier({n: k.turn_verifiers[m] for n, k in by_env.items()})
                        for m in sorted(modes)},
        render_episode=route("render_episode"), action_terminator=terminators.pop(),
        hidden_verifier=hidden, bind_tokenizer=bind if all(bound) else None)
