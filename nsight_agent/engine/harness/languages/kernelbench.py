"""KernelBench's conventions as the kernel contract: the problem's ``get_inputs`` becomes
``setup`` (a config overrides its module constants), each model class an entry that
measures ``model(*inputs)`` of a model built with the shared seed, and KernelBench's
correctness rule (seeded trials, its tolerances) an extra check.

The user's files are imported as they are (no code is added to them), so every error keeps
the user's line numbers. A model is built inside its entry's first call of each config,
which is never measured (the first, checked call on either path), so a candidate whose
``__init__`` raises is that candidate's error, not the run's. Candidates may launch Triton
kernels: on a CPU-only machine they run in Triton's interpreter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, ClassVar

import torch

import nsight_agent.kernelbench as kernelbench
from nsight_agent.engine.harness import runtime
from nsight_agent.engine.harness.checks import CheckOutcome
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.harness.languages.base import Adapter, Sources
from nsight_agent.engine.harness.languages.triton import interpret_on_cpu
from nsight_agent.engine.harness.spec import VariantSpec
from nsight_agent.engine.harness.verdicts import Verdicts


def to_device(value: Any, device: str) -> Any:
    """Tensors (also inside lists and tuples) moved to ``device``; other values as they are."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


class Problem:
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


class KernelBenchAdapter(Adapter):
    """The problem's module is the main one; every variant's entry is a model class."""

    title: ClassVar[str] = "KernelBench"

    @classmethod
    def environment(cls, device: str) -> None:
        interpret_on_cpu(device)  # candidates may launch Triton kernels

    def __init__(self, sources: Sources) -> None:
        super().__init__(sources)
        self.problem = Problem(sources.main, sources.modules.values(), self.spec["seed"])

    def setup(self) -> Callable[..., Any]:
        return self.problem.setup

    def entry(self, fn: Callable[..., Any], variant: VariantSpec) -> Callable[..., Any]:
        return self.problem.entry(fn)


def trial_seeds(seed: int, trials: int = kernelbench.TRIALS) -> list[int]:
    """Seeds of the correctness trials, drawn from ``seed`` as KernelBench draws its own."""
    gen = torch.Generator().manual_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,), generator=gen).item()) for _ in range(trials)]


def trials(
    setup: Callable[..., Any],
    entries: Mapping[str, Callable[..., Any]],
    verdicts: Verdicts,
    *,
    device: str,
    seed: int,
    after_call: Callable[[str], None] | None = None,
    count: int = kernelbench.TRIALS,
) -> None:
    """KernelBench's ``count`` correctness trials of one config (``verdicts``'): for each trial seed,
    every variant still judged right on inputs built from it, judged as one call
    (``Verdicts.judge``, the trial named in each message): a candidate's first failing trial
    is its check at this config. ``after_call(name)`` runs after each variant's call, raising
    or not: the guard check, so that a function replaced in a trial is put back before the
    next variant's call and blamed on the variant that replaced it."""
    baseline, index, config = verdicts.baseline, verdicts.index, verdicts.config
    for trial, trial_seed in enumerate(trial_seeds(seed, count)):
        outs, held = {}, {}
        for name, entry in entries.items():
            if not verdicts.judged(name):
                continue
            with runtime.stage("setup", name, index):
                runtime.seed_all(trial_seed)
                held[name] = runtime.build_inputs(setup, dict(config), device)
            # Every input lives until the synchronize below, as in KernelBench's own check: an
            # entry working on a stream of its own may still be reading it (its allocator would
            # hand the memory to the next variant's inputs while that stream reads).
            try:
                with runtime.stage("entry", name, index):
                    outs[name] = runtime.call(entry, held[name])
            except SourceError as err:
                if name == baseline:
                    raise  # nothing to compare with: the run's error, as in the other stages
                verdicts.record(name, CheckOutcome(False, "error", err.message))
            finally:
                if after_call is not None:
                    after_call(name)
        runtime.synchronize(device)
        if baseline not in outs:
            break
        with runtime.stage("check", baseline, index):
            verdicts.judge(outs, held, f"KernelBench trial {trial} (seed {trial_seed})")
        del held, outs
