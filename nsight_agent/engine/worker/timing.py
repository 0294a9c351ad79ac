"""The timing path: each variant's time per config without ncu or counters, on a warm worker.

For each config:
1. first call: every variant once on inputs of the request's seed, judged as one call
   (``harness/verdicts.py``, as the harness judges its first calls): the baseline's invalid
   outputs fail the request, a candidate's that cannot be compared drop it (``incorrect``);
2. warm-up: every variant on the same inputs until its last 3 times are within
   ``steady_pct`` of each other (at least ``warmup_min`` calls with the first, at most
   ``warmup_max``); the first call compiles (Triton, torch.compile) and is never a sample;
3. runs, interleaved A B ... then ... B A (the order reverses every run and rotates every
   two, ``runtime.run_order``, so drift and place cancel; ``TimingResult.order`` records
   every call): each run builds fresh inputs
   from ``setup`` with a new seed (``seed + 1 + run``, outside the timed range), and every
   variant gets its own copy of them (refilled from the run's seed when ``setup`` ignores
   the seed: ``harness/integrity.py``); on CUDA the L2 is flushed and its persisting lines
   reset before each call, and the call's time is the GPU activity it caused, read from
   CUPTI's records (``worker/timer.py``, ``method="cupti"``; CUDA events when tracing is not
   available, ``method="cuda_events"``); on the CPU ``time.perf_counter_ns`` around the
   call does (``method="perf_counter"``, no flush);
4. every run's outputs are judged against the baseline's on the same inputs
   (``harness/verdicts.py``), so a memoised or stale result fails on the first run whose
   inputs changed ("run N, on new inputs: ..."); after the loop the outputs of run 0 are
   checked again against the copy taken when they were returned, so a variant that
   rewrites a buffer it returned earlier fails too; then ``after_config`` (KernelBench's
   trials, ``timing_run.py``);
5. stop after ``min_runs`` once the 95% confidence interval of every variant's median is
   within ``ci_target_pct`` of it, or at ``max_runs``, or past ``max_seconds``.

Rows use the processed frame's columns (``timing_result.py``), so ``views/compare.py`` reads
them unchanged: Metric is ``gpu__time_duration.sum`` (ncu's quantity, in ns, measured by
another method: ``Method`` says which); OutputOK is False for a variant whose check failed.
A variant that fails alone (raises, returns outputs that cannot be compared) is dropped with
its verdict (``TimingResult.dropped``) and the others go on; one whose time is below what its
outputs need at the GPU's peak DRAM bandwidth, whose call caused no GPU work, that returned
an earlier call's output storage, a tensor subclass, or that replaced the timer's or the
checker's functions is ``suspect`` (``TimingResult.suspects``), never faster.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from nsight_agent.engine.harness import checks, gpu_activity, integrity, runtime
from nsight_agent.engine.harness.verdicts import Tolerance, Verdicts
from nsight_agent.engine.store.records import Suspect, dropped_from
from nsight_agent.engine.worker import timer as timer_module
from nsight_agent.engine.worker.timer import Call, Timer
from nsight_agent.engine.worker.timing_options import TimingOptions as TimingOptions
from nsight_agent.engine.worker.timing_result import TimingResult as TimingResult
from nsight_agent.engine.worker.timing_result import converged, floors, summarize
from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import TIME_METRIC

METRIC = TIME_METRIC
RECHECK = "run 0, re-checked after the timing loop"


def clone_inputs(obj: Any, device: str | None = None) -> Any:
    """A copy of every tensor in a (nested) tuple/list/dict, on ``device`` (None: where it
    is); other values as they are."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.clone() if device is None else obj.detach().to(device, copy=True)
    if isinstance(obj, tuple):
        return tuple(clone_inputs(o, device) for o in obj)
    if isinstance(obj, list):
        return [clone_inputs(o, device) for o in obj]
    if isinstance(obj, dict):
        return {k: clone_inputs(v, device) for k, v in obj.items()}
    return obj


# --- one config ------------------------------------------------------------------------------


@dataclass
class _Config:
    """One config's inputs: how to build a run's, and whether setup ignores the seed."""

    index: int
    config: Mapping[str, Any]
    setup: Callable[..., Any]
    device: str
    seed: int
    vary: bool = False

    def inputs(self, seed: int) -> Any:
        with runtime.stage("setup", None, self.index):
            runtime.seed_all(seed)
            built = runtime.build_inputs(self.setup, dict(self.config), self.device)
            if self.vary:
                integrity.vary(built, seed)
        return built


@dataclass
class _Measured:
    """One config's outcome: each live variant's samples and warm-up calls, its checks, and
    what made a variant suspect (the first reason each)."""

    samples: dict[str, list[float]]
    warm: dict[str, int]
    verdicts: Verdicts
    suspect: dict[str, str] = field(default_factory=dict)
    written: dict[str, int] = field(default_factory=dict)  # output bytes per variant (run 0)

    def suspect_of(self, name: str, reason: str | None) -> None:
        if reason and name not in self.suspect:
            self.suspect[name] = reason


def _first_calls(
    cfg: _Config,
    variants: Mapping[str, Callable[..., Any]],
    first: Any,
    timer: Timer,
    measured: _Measured,
) -> dict[str, float]:
    """Each variant once on its own copy of ``first``, judged as one call; its time (ns)."""
    dropped = measured.verdicts.dropped
    times, inputs, outputs = {}, {}, {}
    for name in [n for n in variants if n not in dropped]:
        with dropped.isolate(name, "entry", cfg.index):
            inputs[name] = clone_inputs(first)
            call = timer.measure(variants[name], inputs[name])
            outputs[name], call.output = call.output, None
            times[name] = call.ns
        measured.suspect_of(name, replaced_now())
    runtime.synchronize(timer.device)
    with runtime.stage("check", dropped.baseline, cfg.index):
        measured.verdicts.judge(outputs, inputs, every=True)
    return {n: t for n, t in times.items() if n not in dropped}


def _warm_up(
    timer: Timer, entry: Callable[..., Any], inputs: Any, opts: TimingOptions, first_ns: float
) -> int:
    times: list[float] = [first_ns]
    while len(times) < opts.warmup_max:
        times.append(timer.measure(entry, clone_inputs(inputs)).ns)
        last = times[-3:]
        spread = (max(last) / min(last) - 1) * 100 if min(last) > 0 else math.inf
        if len(times) > opts.warmup_min and len(last) == 3 and spread <= opts.steady_pct:
            break
    return len(times)


def _time_config(
    cfg: _Config,
    variants: Mapping[str, Callable[..., Any]],
    dropped: runtime.Dropped,
    timer: Timer,
    opts: TimingOptions,
    result: TimingResult,
    after_config: Callable[[Verdicts], None] | None,
) -> _Measured:
    """One config's first calls, warm-up, runs and checks; ``dropped`` holds the variants
    dropped so far (at earlier configs too) and gains this config's."""
    first = cfg.inputs(opts.seed)
    cfg.vary = opts.vary_inputs and integrity.seed_ignored(first, cfg.inputs(opts.seed + 1))
    note = integrity.vary_note(first) if cfg.vary else None
    if note and note not in result.notes:
        result.notes.append(note)
    tolerance = Tolerance(opts.rtol, opts.atol, opts.tolerances)
    verdicts = Verdicts(dropped.baseline, tolerance, cfg.index, cfg.config, dropped)
    measured = _Measured({}, {}, verdicts)
    for name, first_ns in _first_calls(cfg, variants, first, timer, measured).items():
        with dropped.isolate(name, "entry", cfg.index):
            measured.warm[name] = _warm_up(timer, variants[name], first, opts, first_ns)
        measured.suspect_of(name, replaced_now())  # blamed on the variant that just ran
    del first
    timed = _runs(cfg, variants, timer, opts, result, measured)
    for name, calls_of in timed.items():
        for run, call in enumerate(calls_of):
            measured.suspect_of(name, _call_problem(call, timer, run))
    if after_config is not None:
        after_config(verdicts)
    measured.samples = _samples(timed, dropped, result)
    return measured


def _runs(
    cfg: _Config,
    variants: Mapping[str, Callable[..., Any]],
    timer: Timer,
    opts: TimingOptions,
    result: TimingResult,
    measured: _Measured,
) -> dict[str, list[Call]]:
    """The timed runs of one config, each run's outputs judged; after them the outputs of
    run 0 are checked against their copies. Each variant's calls."""
    verdicts = measured.verdicts
    dropped, baseline = verdicts.dropped, verdicts.baseline
    names = [n for n in variants if n not in dropped]
    timed: dict[str, list[Call]] = {n: [] for n in names}
    # The loop stops on the CUDA-event times (known at once); the GPU records of the whole
    # loop are read once at its end (one profiler session: each costs milliseconds,
    # bench/probes/kineto_events.py) and are the times reported.
    estimates: dict[str, list[float]] = {n: [] for n in names}
    watch = integrity.StorageWatch()
    kept: dict[str, tuple[Any, Any]] = {}
    start = time.monotonic()
    timer.start_run()
    try:
        for run in range(opts.max_runs):
            fresh = cfg.inputs(opts.seed + 1 + run)
            inputs: dict[str, Any] = {}
            outs: dict[str, Any] = {}
            calls: dict[str, Call] = {}
            order = [n for n in runtime.run_order(names, run) if n not in dropped]
            for name in order:
                with dropped.isolate(name, "entry", cfg.index):
                    # the last variant of the run takes the inputs as built: one copy fewer
                    # on the GPU (KernelBench's 6 GiB activations: out of memory on 80 GB)
                    inputs[name] = fresh if name == order[-1] else clone_inputs(fresh)
                    calls[name] = timer.measure(variants[name], inputs[name])
                    # outputs live in `outs` for this run only (6 GiB each: KernelBench, OOM)
                    outs[name], calls[name].output = calls[name].output, None
                result.order.append((cfg.index, run, name))
                measured.suspect_of(name, replaced_now())
            runtime.synchronize(timer.device)  # side streams too, before anything is checked
            if not timer.cuda and timer_module.cpu_probe_on():  # the machine's speed, meanwhile
                result.loop_probes_ns.append(timer_module.probe_call_ns())
            for name, call in calls.items():
                timed[name].append(call)
                estimates[name].append(call.events_ns)
                measured.suspect_of(name, watch.reused(name, outs[name]))
                problem = integrity.plain_output_problem(outs[name])
                measured.suspect_of(name, f"run {run}: {problem}" if problem else None)
            if baseline in outs:
                with runtime.stage("check", baseline, cfg.index):
                    verdicts.judge(outs, inputs, f"run {run}, on new inputs")
            if run == 0:  # the outputs stay where they are; their copies wait on the host
                kept = {n: (o, clone_inputs(o, "cpu")) for n, o in outs.items()}
                measured.written = {n: integrity.output_bytes(o) for n, o in outs.items()}
            del inputs, outs, fresh
            live = [s for n, s in estimates.items() if n not in dropped]
            done = run + 1 >= opts.min_runs and all(
                converged(s, opts.ci_target_pct) for s in live if s
            )
            if opts.on_run is not None:  # the caller's progress: this run is done
                opts.on_run(cfg.index, run)
            if done or time.monotonic() - start > opts.max_seconds:
                break
    finally:
        timer.end_run()
    runtime.synchronize(timer.device)
    for name, (out, copy) in kept.items():
        outcome = checks.compare(out, copy, 0.0, 0.0)
        if not outcome.ok:
            outcome.message = (
                "the output of run 0 changed after it was returned (the variant rewrites "
                f"or memoises its output buffer): {outcome.message}"
            )
        verdicts.record(name, outcome, RECHECK)
    return timed


def _samples(
    timed: Mapping[str, list[Call]], dropped: runtime.Dropped, result: TimingResult
) -> dict[str, list[float]]:
    """Each live variant's times; a call whose kernel records CUPTI lost is left out (its
    GPU time would read short), or, where that leaves nothing, all are timed by CUDA events."""
    samples: dict[str, list[float]] = {}
    by_events = []
    for name, calls in timed.items():
        if not calls or name in dropped:
            continue
        samples[name] = [c.ns for c in calls if not c.lost]
        if not samples[name]:
            samples[name] = [c.events_ns for c in calls]
            by_events.append(name)
    lost = [c for calls in timed.values() for c in calls if c.lost]
    if lost:
        what = "those calls were left out of the times"
        if by_events:
            what += f"; {', '.join(by_events)} had none left and were timed by CUDA events"
        result.notes.append(gpu_activity.lost_note(sum(c.lost for c in lost), len(lost), what))
    return samples


def _call_problem(call: Call, timer: Timer, run: int) -> str | None:
    """After the loop, when the GPU records are read: a call that launched no GPU work."""
    if timer.trace and call.activities == 0 and not call.lost:
        return f"run {run}: its call launched no GPU work (a result kept from an earlier call?)"
    return None


GUARD: list[integrity.Guard] = []


def replaced_now() -> str | None:
    """Whether the call just made replaced a guarded function (they are put back)."""
    names = GUARD[0].replaced() if GUARD else []
    return integrity.replaced_note(names) if names else None


# --- every config ----------------------------------------------------------------------------


def time_variants(
    setup: Callable[..., Any],
    variants: Mapping[str, Callable[..., Any]],
    configs: Sequence[Mapping[str, Any]],
    *,
    baseline: str | None = None,
    device: str = "cpu",
    options: TimingOptions | None = None,
    after_config: Callable[[Verdicts], None] | None = None,
) -> TimingResult:
    """Time every variant on every config (see the module docstring); in this process.
    ``after_config(verdicts)``: more checks of a config after its loop, before its rows."""
    opts = options or TimingOptions()
    if not variants or not configs:
        raise InvalidRequestError("time_variants needs at least one variant and one config.")
    base = baseline or next(iter(variants))
    if base not in variants:
        raise InvalidRequestError(f"baseline {base!r} is not one of {list(variants)}")
    timer = Timer(device, opts.flush_l2)
    params = list(dict.fromkeys(k for c in configs for k in c))
    result = TimingResult([], [], [], timer.method, device, params)
    if timer.flush is None and timer.cuda:
        result.notes.append("the L2 cache was not flushed between runs")
    peak = opts.peak_dram_bytes_per_s or (
        timer_module.peak_dram_bytes_per_s() if timer.cuda else None
    )
    dropped = runtime.Dropped(base)
    _probe(timer, result)
    for ci, config in enumerate(configs):
        cfg = _Config(ci, config, setup, timer.device, opts.seed)
        measured = _time_config(cfg, variants, dropped, timer, opts, result, after_config)
        floor = floors(measured.written, measured.samples, peak)
        for name, values in measured.samples.items():
            measured.suspect_of(name, floor.get(name))
            outcome = measured.verdicts.outcomes.get(name) or checks.CheckOutcome(True, "ok", "")
            row = {"Annotation": name, "Metric": METRIC, **{p: config.get(p) for p in params}}
            row.update(summarize(values, opts.ci_target_pct))
            row.update(Kernel=None, GPU=timer.name if timer.cuda else None, Host=timer.name)
            row.update(ComputeClock=None, MemoryClock=None, Unit="ns", Normalized=False)
            row.update(Method=timer.method, OutputOK=outcome.ok, WarmupRuns=measured.warm[name])
            result.rows.append(row)
            result.checks.append(
                {"variant": name, "config_index": ci, "config": dict(config), **asdict(outcome)}
            )
            if name in measured.suspect and outcome.ok:
                reason = measured.suspect[name]
                result.suspects.append(Suspect(variant=name, config_index=ci, reason=reason))
    result.dropped = dropped_from(dropped)
    _probe(timer, result)
    if result.loop_probes_ns:
        result.cpu_probe_ns.append(statistics.median(result.loop_probes_ns))
    return result


def _probe(timer: Timer, result: TimingResult) -> None:
    """On a CPU, the machine's speed now (before and after the runs), for the gate."""
    if not timer.cuda:
        probe = timer_module.cpu_probe_ns()
        result.cpu_probe_ns += [probe] if probe is not None else []
