"""Timing a rendered run folder on the warm worker: its SPEC read, its sources loaded by the
loader the harness program calls (``harness/sources.py``: the language's adapter, each
variant's failure its own, the timer's and checker's functions guarded before user code is
imported), then ``timing.time_variants``, with KernelBench's trials after each config's
loop where the request asks for them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import nsight_agent.stages as stages
from nsight_agent.engine.harness import emulation, sources
from nsight_agent.engine.harness.languages import adapter_for, kernelbench
from nsight_agent.engine.harness.spec import Spec, read_spec
from nsight_agent.engine.harness.verdicts import Verdicts
from nsight_agent.engine.store import progress
from nsight_agent.engine.store.records import RunFiles, Suspect, dropped_from
from nsight_agent.engine.worker import timing
from nsight_agent.engine.worker.timing import TimingOptions, TimingResult
from nsight_agent.errors import InvalidRequestError


def time_run_dir(run_dir: Path, device: str, options: TimingOptions | None = None) -> TimingResult:
    """Time the variants of a rendered run (harness.py's SPEC and the user's files) on
    ``device`` ("cuda" or "cpu"), with the request's seed, tolerances and vary_inputs (the
    SPEC's, over those of ``options``); in this process."""
    if not (run_dir / "harness.py").is_file():
        raise InvalidRequestError(f"no harness.py in {run_dir}")
    spec = read_spec(run_dir / "harness.py")
    opts = replace(
        options or TimingOptions(),
        seed=spec["seed"],
        rtol=spec["rtol"],
        atol=spec["atol"],
        vary_inputs=spec["vary_inputs"],
        tolerances=spec["tolerances"],
        on_run=_reporter(RunFiles.in_folder(run_dir).progress, len(spec["configs"])),
    )
    language = adapter_for(spec["language"])
    if language.gpu_only and not device.startswith("cuda"):
        raise InvalidRequestError(f"{language.title} sources can be timed only on a GPU.")
    try:
        loaded = sources.load(spec, run_dir, device, opts.skip)
        timing.GUARD[:] = [loaded.guard]
        blamed: list[Suspect] = []  # replacements made in the trials' calls
        entries, emulated = emulation.watched(loaded.entries)
        result = timing.time_variants(
            loaded.setup,
            entries,
            spec["configs"],
            baseline=spec["baseline"],
            device=device,
            options=opts,
            after_config=_trials(spec, loaded, device, blamed) if spec["trials"] else None,
        )
        result.suspects += blamed
        emulation.label_rows(result.rows, emulated)
        note = loaded.import_note()
        if note:
            result.notes.append(f"the source {note}")
            result.suspects = [
                Suspect(variant=name, config_index=ci, reason=note)
                for name in loaded.entries
                for ci in range(len(spec["configs"]))
            ]
        result.dropped = {**dropped_from(loaded.dropped), **result.dropped}
        return result
    finally:
        timing.GUARD.clear()
        for name in sources.module_names(spec):
            sys.modules.pop(name, None)


def _reporter(path: Path, configs: int) -> Callable[[int, int], None]:
    """Each timed run as a line of the run's progress file (the caller follows it)."""
    done = [0]

    def on_run(config: int, run: int) -> None:
        done[0] += 1
        progress.append(path, done[0], 0, stages.config_run(config, configs, run))

    return on_run


def _trials(
    spec: Spec, loaded: sources.Loaded, device: str, blamed: list[Suspect]
) -> Callable[[Verdicts], None]:
    """correctness="kernelbench": its seeded trials of a config after its timing loop; a
    failing trial is that (variant, config)'s check if it passed until then."""

    def after_config(verdicts: Verdicts) -> None:
        def blame(name: str) -> None:
            note = timing.replaced_now()  # put back, and blamed on the variant that ran
            if note:
                blamed.append(Suspect(variant=name, config_index=verdicts.index, reason=note))

        kernelbench.trials(
            loaded.setup,
            loaded.entries,
            verdicts,
            device=device,
            seed=spec["seed"],
            after_call=blame,
            count=spec["trials"],
        )

    return after_config
