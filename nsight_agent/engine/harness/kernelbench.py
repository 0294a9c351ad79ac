"""KernelBench's conventions as the kernel contract, run in the harness and on the warm worker:
the problem's ``get_inputs`` becomes ``setup``, each model class an entry, and KernelBench's
correctness rule (seeded trials, its tolerances) an extra check.

The user's files are imported as they are (no code is added to them), so every error keeps
the user's line numbers. A model is built inside its entry's first call of each config, which
is never measured (the correctness call on the ncu path, warm-up on the timing path), so a
candidate whose ``__init__`` raises is that candidate's error, not the run's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

import torch

import nsight_agent.kernelbench as kernelbench
from nsight_agent.engine.harness import checks, runtime
from nsight_agent.engine.harness.errors import SourceError


def to_device(value: Any, device: str) -> Any:
    """Tensors (also inside lists and tuples) moved to ``device``; other values as they are."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


class Adapter:
    """One problem module and the candidates' modules: ``setup`` applies a config's constant
    overrides and returns ``get_inputs()`` on the device; ``entry(cls)`` measures
    ``model(*inputs)`` of a model built with KernelBench's seed convention."""

    def __init__(self, problem: ModuleType, modules: Iterable[ModuleType], seed: int) -> None:
        self.problem, self.seed = problem, seed
        self.modules = [problem, *(m for m in modules if m is not problem)]
        self.device = "cpu"
        self.key: tuple[tuple[str, Any], ...] = ()
        self.get_inputs = runtime.function_of(problem, "get_inputs", "KernelBench inputs")

    def setup(self, device: str, **overrides: Any) -> tuple[Any, ...]:
        """The config's constants set in the problem module (and in each candidate module that
        has its own copy), then ``get_inputs()`` on ``device``, passed positionally. Its tensors
        are made there (torch's default device for the call): KernelBench's sizes reach 6 GB an
        input, which the CPU fills in seconds, for every run of every variant."""
        constants = _constants(self.problem)
        for name, value in overrides.items():
            if name not in constants:
                raise ValueError(
                    f"config key {name!r} is not a module constant of the problem; its "
                    f"constants: {', '.join(constants) or 'none'}"
                )
            for module in self.modules:
                if hasattr(module, name):
                    setattr(module, name, value)
        self.device, self.key = device, tuple(sorted(overrides.items()))
        with torch.device(device):
            made = self.get_inputs()
        return tuple(to_device(x, device) for x in made)

    def build(self, cls: Callable[..., Any]) -> Any:
        """``cls(*get_init_inputs())`` on the device, the same seed before the init inputs
        and before the construction (as KernelBench: every model gets equal weights)."""
        init = getattr(self.problem, "get_init_inputs", None)
        runtime.seed_all(self.seed)
        args = to_device(list(init()) if callable(init) else [], self.device)
        runtime.seed_all(self.seed)
        model = cls(*args)
        return model.to(self.device) if isinstance(model, torch.nn.Module) else model

    def entry(self, cls: Callable[..., Any]) -> Callable[..., Any]:
        """The measured call, ``model(*inputs)`` without autograd; the model of the current
        config is built on the first call of that config (outside any measured range)."""
        built: dict[tuple[tuple[str, Any], ...], Any] = {}

        def forward(*inputs: Any) -> Any:
            if self.key not in built:
                built.clear()  # one config's model alive at a time
                built[self.key] = self.build(cls)
            with torch.no_grad():
                return built[self.key](*inputs)

        forward.__qualname__ = f"{getattr(cls, '__name__', 'model')}.forward"
        return forward


def _constants(module: ModuleType) -> list[str]:
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("__") and not callable(value) and not isinstance(value, ModuleType)
    )


def trial_seeds(seed: int, trials: int = kernelbench.TRIALS) -> list[int]:
    """Seeds of the correctness trials, drawn from ``seed`` as KernelBench draws its own."""
    gen = torch.Generator().manual_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,), generator=gen).item()) for _ in range(trials)]


def trials(
    setup: Callable[..., Any],
    entries: Mapping[str, Callable[..., Any]],
    config: Mapping[str, Any],
    *,
    baseline: str,
    device: str,
    seed: int,
    table: Mapping[str, tuple[float, float]],
    config_index: int,
    after_call: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """KernelBench's correctness trials of one config: for each trial seed, every variant on
    inputs built from it, compared with the baseline's outputs under ``table``. One failing
    check per variant (its first failing trial), in the harness's check format.
    ``after_call(name)`` runs after each variant's call, raising or not: the guard check, so
    that a function replaced in a trial is put back before the next variant's call and blamed
    on the variant that replaced it."""
    failed: dict[str, dict[str, Any]] = {}
    for trial, trial_seed in enumerate(trial_seeds(seed)):
        outs, held = {}, []
        for name, entry in entries.items():
            if name in failed:
                continue
            with runtime.stage("setup", name, config_index):
                runtime.seed_all(trial_seed)
                inputs = runtime.build_inputs(setup, dict(config), device)
            # Every input lives until the synchronize below, as in KernelBench's own check: an
            # entry working on a stream of its own may still be reading it (its allocator would
            # hand the memory to the next variant's inputs while that stream reads).
            held.append(inputs)
            try:
                with runtime.stage("entry", name, config_index):
                    outs[name] = runtime.call(entry, inputs)
            except SourceError as err:
                if name == baseline:
                    raise  # nothing to compare with: the run's error, as in the other stages
                failed[name] = _check(name, config_index, config, False, "error", err.message)
            finally:
                if after_call is not None:
                    after_call(name)
        runtime.synchronize(device)
        del held
        if baseline not in outs:
            break
        for name, out in outs.items():
            if name == baseline:
                continue
            outcome = checks.compare(out, outs[baseline], None, None, table=table)
            if not outcome.ok:
                outcome.message = (
                    f"KernelBench trial {trial} (seed {trial_seed}): {outcome.message}"
                )
                failed[name] = {**_check(name, config_index, config), **outcome.to_dict()}
    return list(failed.values())


def _check(name: str, index: int, config: Mapping[str, Any], *outcome: Any) -> dict[str, Any]:
    """A check row of the harness's format; ``outcome`` is (ok, reason, message) when given."""
    row = {"variant": name, "config_index": index, "config": dict(config)}
    if outcome:
        row.update(checks.CheckOutcome(*outcome).to_dict())
    return row
