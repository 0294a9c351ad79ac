"""The timing path: each variant's time per config without ncu or counters, on a warm worker.

For each config:
1. warm-up: every variant on the same inputs until its last 3 times are within
   ``steady_pct`` of each other (at least ``warmup_min`` calls, at most ``warmup_max``);
   the first call compiles (Triton, torch.compile) and is never a sample;
2. runs, interleaved A B ... then ... B A (the order reverses every run and rotates every
   two, ``runtime.run_order``, so drift and place cancel; ``TimingResult.order`` records
   every call): each run builds fresh inputs
   from ``setup`` with a new seed (``seed + 1 + run``, outside the timed range), and every
   variant gets its own copy of them (refilled from the run's seed when ``setup`` ignores
   the seed: ``harness/integrity.py``); on CUDA the L2 is flushed and its persisting lines
   reset before each call, and the call's time is the GPU activity it caused, read from
   CUPTI's records (``worker/timer.py``, ``method="cupti"``; CUDA events when tracing is not
   available, ``method="cuda_events"``); on the CPU ``time.perf_counter_ns`` around the
   call does (``method="perf_counter"``, no flush);
3. every run's outputs are checked against the baseline's on the same inputs
   (``harness/checks.py``), so a memoised or stale result fails on the first run whose
   inputs changed; outputs sharing memory with another variant's are flagged ``alias``;
   after the loop the outputs of run 0 are checked again against the copy taken when they
   were returned, so a variant that rewrites a buffer it returned earlier fails too;
4. stop after ``min_runs`` once the 95% confidence interval of every variant's median is
   within ``ci_target_pct`` of it, or at ``max_runs``, or past ``max_seconds``.

Rows use the processed frame's columns (``engine/collection/aggregate.py``), so ``views/compare.py``
reads them unchanged: Metric is ``gpu__time_duration.sum`` (the same quantity as ncu's, in ns,
measured by another method: the ``Method`` column says which); AvgValue, StdDev and
CI95_Lower/Upper are the mean, the sample std (n-1) and mean ± 1.96·std/√n as in the ncu path;
MedianValue and MedianCI95_Lower/Upper (order statistics) are added; StableMeasurement says
the median's CI reached ``ci_target_pct``; OutputOK is False for a variant whose check failed.
A variant that fails alone (raises, returns no tensors) is dropped with its verdict
(``TimingResult.dropped``) and the others go on; one whose time is below what its outputs
need at the GPU's peak DRAM bandwidth, whose call caused no GPU work, that returned an
earlier call's output storage, a tensor subclass, or that replaced the timer's or the
checker's functions is ``suspect`` (``TimingResult.suspects``), never faster.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from nsight_agent.engine.collection.aggregate import STABLE_RSD_PCT
from nsight_agent.engine.harness import checks, gpu_activity, integrity, runtime
from nsight_agent.engine.store.records import DroppedVariant, Suspect, dropped_from
from nsight_agent.engine.worker import timer as timer_module
from nsight_agent.engine.worker.timer import Call, Timer
from nsight_agent.engine.worker.timing_options import TimingOptions as TimingOptions
from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import TIME_METRIC

METRIC = TIME_METRIC


@dataclass
class TimingResult:
    rows: list[dict[str, Any]]
    checks: list[dict[str, Any]]  # OutputCheck fields: one per (variant, config)
    order: list[tuple[int, int, str]]  # (config index, run, variant) in the order called
    method: str
    device: str
    params: list[str]
    notes: list[str] = field(default_factory=list)
    dropped: dict[str, DroppedVariant] = field(default_factory=dict)
    suspects: list[Suspect] = field(default_factory=list)
    # On a CPU: the probe before and after the runs, then the median of the loop's probes
    cpu_probe_ns: list[float] = field(default_factory=list)
    loop_probes_ns: list[float] = field(default_factory=list)  # one after each run

    def frame(self) -> pd.DataFrame:
        """The rows as a processed frame, Geomean per variant over the configs."""
        out = pd.DataFrame(self.rows)
        if not out.empty:
            out["Geomean"] = out.groupby("Annotation", sort=False)["AvgValue"].transform(
                lambda v: math.exp(sum(math.log(x) for x in v) / len(v)) if min(v) > 0 else 0.0
            )
        return out


# --- statistics ------------------------------------------------------------------------------


def median_ci(samples: Sequence[float]) -> tuple[float, float]:
    """Distribution-free 95% CI of the median (order statistics, normal approximation)."""
    xs, n = sorted(samples), len(samples)
    half = 1.96 * math.sqrt(n) / 2
    lo, hi = math.floor(n / 2 - half), math.ceil(n / 2 + half)
    return xs[max(lo, 0)], xs[min(hi, n - 1)]


def converged(samples: Sequence[float], ci_target_pct: float) -> bool:
    """The stopping rule: the median's 95% CI is within ``ci_target_pct`` of it."""
    n, median = len(samples), statistics.median(samples) if samples else 0.0
    lo, hi = median_ci(samples) if samples else (0.0, 0.0)
    return n > 1 and median > 0 and (hi - lo) / 2 / median * 100 <= ci_target_pct


def summarize(samples: Sequence[float], ci_target_pct: float) -> dict[str, Any]:
    """The processed columns of one (variant, config); StableMeasurement is the engine's one
    rule, RSD < STABLE_RSD_PCT (as on the ncu path)."""
    n = len(samples)
    mean, median = statistics.fmean(samples), statistics.median(samples)
    std = statistics.stdev(samples) if n > 1 else float("nan")
    half = 1.96 * std / math.sqrt(n) if n > 1 else float("nan")
    m_lo, m_hi = median_ci(samples)
    rsd = std / mean * 100 if mean and n > 1 else float("nan")
    return {
        "AvgValue": mean,
        "StdDev": std,
        "MinValue": min(samples),
        "MaxValue": max(samples),
        "NumRuns": n,
        "CI95_Lower": mean - half,
        "CI95_Upper": mean + half,
        "RelativeStdDevPct": rsd,
        "StableMeasurement": bool(rsd < STABLE_RSD_PCT),
        "MedianValue": median,
        "MedianCI95_Lower": m_lo,
        "MedianCI95_Upper": m_hi,
    }


def clone_inputs(obj: Any) -> Any:
    """A copy of every tensor in a (nested) tuple/list/dict; other values as they are."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, tuple):
        return tuple(clone_inputs(o) for o in obj)
    if isinstance(obj, list):
        return [clone_inputs(o) for o in obj]
    if isinstance(obj, dict):
        return {k: clone_inputs(v) for k, v in obj.items()}
    return obj


# --- the loop --------------------------------------------------------------------------------


def _warm_up(timer: Timer, entry: Callable[..., Any], inputs: Any, opts: TimingOptions) -> int:
    times: list[float] = []
    while len(times) < opts.warmup_max:
        times.append(timer.measure(entry, clone_inputs(inputs)).ns)
        last = times[-3:]
        spread = (max(last) / min(last) - 1) * 100 if min(last) > 0 else math.inf
        if len(times) > opts.warmup_min and len(last) == 3 and spread <= opts.steady_pct:
            break
    return len(times)


class _Verdicts:
    """The first failed check per variant (or the last good one) for one config, and what
    made a variant suspect."""

    def __init__(self, names: Sequence[str], baseline: str, opts: TimingOptions) -> None:
        self.names, self.baseline, self.opts = list(names), baseline, opts
        self.outcome: dict[str, checks.CheckOutcome] = {}
        self.suspect: dict[str, str] = {}
        self.written: dict[str, int] = {}  # output bytes per variant (run 0)

    def failed(self, name: str) -> bool:
        return name in self.outcome and not self.outcome[name].ok

    def note(self, name: str, outcome: checks.CheckOutcome, run: int | str) -> None:
        if self.failed(name):
            return
        if not outcome.ok:
            outcome.message = f"run {run}: {outcome.message}"
        self.outcome[name] = outcome

    def suspect_of(self, name: str, reason: str | None) -> None:
        if reason and name not in self.suspect:
            self.suspect[name] = reason

    def run(self, outs: Mapping[str, Any], run: int) -> None:
        for name, out in outs.items():
            if name == self.baseline:
                outcome = checks.check_single(out)
            else:
                outcome = checks.compare(
                    out, outs[self.baseline], self.opts.rtol, self.opts.atol, self.opts.tolerances
                )
            if outcome.ok:
                mine = checks.storages(runtime.tensors_in(out))
                theirs = checks.storages(runtime.tensors_in([outs[n] for n in outs if n != name]))
                if mine & theirs:
                    outcome = checks.CheckOutcome(
                        False, "alias", "outputs share memory with another variant's outputs"
                    )
            self.note(name, outcome, run)

    def recheck(self, returned: Mapping[str, Any], copies: Mapping[str, Any]) -> None:
        for name, out in returned.items():
            outcome = checks.compare(out, copies[name], 0.0, 0.0)
            if not outcome.ok:
                outcome.message = (
                    "the output of run 0 changed after it was returned (the variant rewrites "
                    f"or memoises its output buffer): {outcome.message}"
                )
            self.note(name, outcome, "0, re-checked after the timing loop")


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


def _time_config(
    cfg: _Config,
    variants: Mapping[str, Callable[..., Any]],
    dropped: runtime.Dropped,
    timer: Timer,
    opts: TimingOptions,
    result: TimingResult,
) -> tuple[dict[str, list[float]], dict[str, int], _Verdicts]:
    """One config's warm-up, runs and checks; ``dropped`` holds the variants dropped so far
    (at earlier configs too) and gains this config's."""
    first = cfg.inputs(opts.seed)
    cfg.vary = opts.vary_inputs and integrity.seed_ignored(first, cfg.inputs(opts.seed + 1))
    note = integrity.vary_note(first) if cfg.vary else None
    if note and note not in result.notes:
        result.notes.append(note)
    baseline = dropped.baseline
    warm = {}
    verdicts = _Verdicts(list(variants), baseline, opts)
    for name in variants:
        with dropped.isolate(name, "entry", cfg.index):
            warm[name] = _warm_up(timer, variants[name], first, opts)
        verdicts.suspect_of(name, replaced_now())  # blamed on the variant that just ran
    names = [n for n in variants if n not in dropped]
    timed: dict[str, list[Call]] = {n: [] for n in names}
    # The loop stops on the CUDA-event times (known at once); the GPU records of the whole
    # loop are read once at its end (one profiler session: 14 ms for 10 calls on the H200,
    # 39 ms with one per run) and are the times reported.
    estimates: dict[str, list[float]] = {n: [] for n in names}
    watch = integrity.StorageWatch()
    kept: dict[str, Any] = {}
    start = time.monotonic()
    timer.start_run()
    try:
        for run in range(opts.max_runs):
            fresh = cfg.inputs(opts.seed + 1 + run)
            outs: dict[str, Any] = {}
            calls: dict[str, Call] = {}
            for name in [n for n in runtime.run_order(names, run) if n not in dropped]:
                with dropped.isolate(name, "entry", cfg.index):
                    calls[name] = timer.measure(variants[name], clone_inputs(fresh))
                    # outputs live in `outs` for this run only (6 GiB each: KernelBench, OOM)
                    outs[name], calls[name].output = calls[name].output, None
                result.order.append((cfg.index, run, name))
                verdicts.suspect_of(name, replaced_now())
            runtime.synchronize(timer.device)  # side streams too, before anything is checked
            if not timer.cuda and timer_module.cpu_probe_on():  # the machine's speed, meanwhile
                result.loop_probes_ns.append(timer_module.probe_call_ns())
            for name, call in calls.items():
                timed[name].append(call)
                estimates[name].append(call.events_ns)
                verdicts.suspect_of(name, watch.reused(name, outs[name]))
                problem = integrity.plain_output_problem(outs[name])
                verdicts.suspect_of(name, f"run {run}: {problem}" if problem else None)
            if baseline in outs:
                verdicts.run(outs, run)
            if run == 0:
                kept = {n: (o, clone_inputs(o)) for n, o in outs.items()}
                verdicts.written = {n: integrity.output_bytes(o) for n, o in outs.items()}
            live = [s for n, s in estimates.items() if n not in dropped]
            done = run + 1 >= opts.min_runs and all(
                converged(s, opts.ci_target_pct) for s in live if s
            )
            if done or time.monotonic() - start > opts.max_seconds:
                break
    finally:
        timer.end_run()
    for name, calls_of in timed.items():
        for run, call in enumerate(calls_of):
            verdicts.suspect_of(name, _call_problem(call, timer, run))
    runtime.synchronize(timer.device)
    verdicts.recheck({n: o for n, (o, _) in kept.items()}, {n: c for n, (_, c) in kept.items()})
    return _samples(timed, dropped, result), warm, verdicts


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


def time_variants(
    setup: Callable[..., Any],
    variants: Mapping[str, Callable[..., Any]],
    configs: Sequence[Mapping[str, Any]],
    *,
    baseline: str | None = None,
    device: str = "cpu",
    options: TimingOptions | None = None,
) -> TimingResult:
    """Time every variant on every config (see the module docstring); in this process."""
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
        samples, warm, verdicts = _time_config(cfg, variants, dropped, timer, opts, result)
        floor = _floors(verdicts.written, samples, peak)
        for name, values in samples.items():
            verdicts.suspect_of(name, floor.get(name))
            outcome = verdicts.outcome.get(name) or checks.CheckOutcome(True, "ok", "")
            row = {"Annotation": name, "Metric": METRIC, **{p: config.get(p) for p in params}}
            row.update(summarize(values, opts.ci_target_pct))
            row.update(Kernel=None, GPU=timer.name if timer.cuda else None, Host=timer.name)
            row.update(ComputeClock=None, MemoryClock=None, Unit="ns", Normalized=False)
            row.update(Method=timer.method, OutputOK=outcome.ok, WarmupRuns=warm[name])
            result.rows.append(row)
            result.checks.append(
                {"variant": name, "config_index": ci, "config": dict(config), **asdict(outcome)}
            )
            if name in verdicts.suspect and outcome.ok:
                result.suspects.append(
                    Suspect(variant=name, config_index=ci, reason=verdicts.suspect[name])
                )
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


def _floors(
    written: Mapping[str, int], samples: Mapping[str, list[float]], peak: float | None
) -> dict[str, str]:
    """Variants whose median time is below what writing their outputs needs at peak DRAM
    bandwidth (bytes / peak B/s): no honest kernel is that fast."""
    if not peak:
        return {}
    out = {}
    for name, values in samples.items():
        need = written.get(name, 0) / peak * 1e9
        median = statistics.median(values)
        if median < need:
            out[name] = (
                f"its median {median / 1e3:.3g} us is below the {need / 1e3:.3g} us that "
                f"writing its {written.get(name, 0) / 1e6:.3g} MB of outputs takes at the GPU's peak DRAM "
                f"bandwidth ({peak / 1e12:.3g} TB/s): the time does not include its work"
            )
    return out
