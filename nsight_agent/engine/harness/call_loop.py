"""The pre-flight's timed calls, after a config's measured runs: each call timed end to end
(``call_time.CallClock.per_call``), and KernelBench's trials where its rule is asked for
(``CallClock.kernelbench``). Outside every profiler, on a GPU only: on the CPU the timing
loop's wall times are the per-call times already, and KernelBench times only on CUDA.

    per call     ``spec["call_runs"]`` runs, the variants interleaved as the measured runs
                 (``runtime.run_order``), each call on inputs of its run's seed built outside
                 the timed range (the measured runs' seeds, refilled where setup ignores
                 them); one untimed call per variant first, as the profiler of the runs
                 before is gone
    KernelBench  ``spec["perf_trials"]`` trials of each variant still judged right (it times
                 only correct candidates), on one set of inputs of the request's seed, as its
                 eval reuses one ``get_inputs()``

The samples (ns) go to the manifest: ``call_ns`` and ``kernelbench_ns``, one entry per
config ``{"config": i, "ns": {variant: [...]}}`` (read by ``collection/call_rows.py``).
"""

from __future__ import annotations

from typing import Any, Protocol

from nsight_agent.engine.harness import integrity, runtime, sources
from nsight_agent.engine.harness.call_time import CallClock
from nsight_agent.engine.harness.spec import Spec, VariantSpec
from nsight_agent.engine.harness.verdicts import Verdicts


class Program(Protocol):
    """What the loops read of the measuring program (``program.Program``)."""

    spec: Spec
    manifest: dict[str, Any]
    loaded: sources.Loaded
    dropped: runtime.Dropped

    def live(self) -> list[VariantSpec]: ...

    def inputs(self, ci: int, config: dict[str, Any], seed: int, name: str | None) -> Any: ...

    def replaced_by(self, name: str, ci: int) -> None: ...


def wanted(spec: Spec, preflight: bool, device: str) -> bool:
    """Whether this run of the program times calls: a pre-flight on a GPU that asks for it."""
    asked = bool(spec["call_runs"] or spec["perf_trials"])
    return asked and preflight and device.startswith("cuda")


def after_runs(
    program: Program,
    clock: CallClock,
    ci: int,
    config: dict[str, Any],
    vary: bool,
    verdicts: Verdicts,
) -> None:
    """Both loops of config ``ci``, as the spec asks; their samples into the manifest."""
    if not program.loaded.prepared.run_entries:
        return
    if program.spec["call_runs"]:
        samples = per_call(program, clock, ci, config, vary)
        program.manifest["call_ns"].append({"config": ci, "ns": samples})
    if program.spec["perf_trials"]:
        samples = kernelbench(program, clock, ci, config, verdicts)
        program.manifest["kernelbench_ns"].append({"config": ci, "ns": samples})


def per_call(
    program: Program, clock: CallClock, ci: int, config: dict[str, Any], vary: bool
) -> dict[str, list[float]]:
    """Each live variant's calls timed end to end, interleaved; ns per call."""
    spec, dropped = program.spec, program.dropped
    names = [v["name"] for v in program.live()]
    samples: dict[str, list[float]] = {n: [] for n in names}
    for run in range(-1, spec["call_runs"]):  # run -1: the untimed call of each variant
        seed = spec["seed"] + 1 + max(run, 0)
        for name in runtime.run_order(names, max(run, 0)):
            if name in dropped:
                continue
            inputs = program.inputs(ci, config, seed, name)
            if vary:
                with runtime.stage("setup", name, ci):
                    integrity.vary(inputs, seed)
            with dropped.isolate(name, "entry", ci):
                out, ns = clock.per_call(program.loaded.entries[name], inputs)
                del out
                if run >= 0:
                    samples[name].append(ns)
            program.replaced_by(name, ci)
            del inputs
    return {n: s for n, s in samples.items() if n not in dropped and s}


def kernelbench(
    program: Program, clock: CallClock, ci: int, config: dict[str, Any], verdicts: Verdicts
) -> dict[str, list[float]]:
    """KernelBench's timed trials of each variant judged right so far; ns per trial."""
    samples: dict[str, list[float]] = {}
    for v in program.live():
        name = v["name"]
        if verdicts.failed(name):
            continue
        inputs = program.inputs(ci, config, program.spec["seed"], name)
        with program.dropped.isolate(name, "entry", ci):
            samples[name] = clock.kernelbench(
                program.loaded.entries[name],
                inputs,
                program.spec["perf_trials"],
                after_call=lambda: program.replaced_by(name, ci),  # noqa: B023 - called at once
            )
        del inputs
    return {n: s for n, s in samples.items() if n not in program.dropped}
