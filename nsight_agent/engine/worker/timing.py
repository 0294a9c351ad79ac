"""The timing path: each variant's time per config without ncu or counters, on a warm worker.

For each config:
1. warm-up: every variant on the same inputs until its last 3 times are within
   ``steady_pct`` of each other (at least ``warmup_min`` calls, at most ``warmup_max``);
   the first call compiles (Triton, torch.compile) and is never a sample;
2. runs, interleaved A B ... then ... B A (the order reverses every run, so drift and order
   effects cancel; ``TimingResult.order`` records every call): each run builds fresh inputs
   from ``setup`` with a new seed (``seed + 1 + run``, outside the timed range), and every
   variant gets its own copy of them; on CUDA the L2 is flushed before each call (a write
   of 2x the device's L2, as ncu's ``--cache-control all`` does) and CUDA events around the
   call time it (``method="cuda_events"``); on the CPU ``time.perf_counter_ns`` around the
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
CUDA events time the current stream: work a variant leaves on a side stream that is not
joined to it is waited for (device-wide synchronize) before the check but is not timed.
"""

from __future__ import annotations

import functools
import math
import socket
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from nsight_agent.engine.harness import checks, runtime
from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import TIME_METRIC

METRIC = TIME_METRIC
L2_FALLBACK_BYTES = 256 * 1024 * 1024


@dataclass
class TimingOptions:
    min_runs: int = 10
    max_runs: int = 200
    ci_target_pct: float = 1.5
    warmup_min: int = 3
    warmup_max: int = 50
    steady_pct: float = 5.0
    max_seconds: float = 20.0  # per config, the timed runs
    flush_l2: bool = True
    seed: int = 0
    rtol: float | None = None
    atol: float | None = None


@dataclass
class TimingResult:
    rows: list[dict[str, Any]]
    checks: list[dict[str, Any]]  # OutputCheck fields: one per (variant, config)
    order: list[tuple[int, int, str]]  # (config index, run, variant) in the order called
    method: str
    device: str
    params: list[str]
    notes: list[str] = field(default_factory=list)

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


def summarize(samples: Sequence[float], ci_target_pct: float) -> dict[str, Any]:
    n = len(samples)
    mean, median = statistics.fmean(samples), statistics.median(samples)
    std = statistics.stdev(samples) if n > 1 else float("nan")
    half = 1.96 * std / math.sqrt(n) if n > 1 else float("nan")
    m_lo, m_hi = median_ci(samples)
    stable = n > 1 and median > 0 and (m_hi - m_lo) / 2 / median * 100 <= ci_target_pct
    return {
        "AvgValue": mean,
        "StdDev": std,
        "MinValue": min(samples),
        "MaxValue": max(samples),
        "NumRuns": n,
        "CI95_Lower": mean - half,
        "CI95_Upper": mean + half,
        "RelativeStdDevPct": std / mean * 100 if mean else float("nan"),
        "StableMeasurement": bool(stable),
        "MedianValue": median,
        "MedianCI95_Lower": m_lo,
        "MedianCI95_Upper": m_hi,
    }


# --- the timer -------------------------------------------------------------------------------


SPIN_CAP_CYCLES = 10_000_000  # 5 ms at 2 GHz


class Timer:
    """Times one call: CUDA events (L2 flushed first) on "cuda", perf_counter_ns on "cpu"."""

    def __init__(self, device: str, flush_l2: bool) -> None:
        self.device = device
        self.cuda = device.startswith("cuda")
        self.method = "cuda_events" if self.cuda else "perf_counter"
        self.flush: Any = None
        self.name = socket.gethostname() if not self.cuda else ""
        if self.cuda:
            import torch

            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            l2 = int(getattr(props, "L2_cache_size", 0) or 0)
            size = 2 * l2 if l2 else L2_FALLBACK_BYTES
            if flush_l2:
                self.flush = torch.empty(size, dtype=torch.int8, device=device)
            self.events = (
                torch.cuda.Event(enable_timing=True),  # type: ignore[no-untyped-call]
                torch.cuda.Event(enable_timing=True),  # type: ignore[no-untyped-call]
            )
            self.name = torch.cuda.get_device_name()
        # GPU cycles to spin before the start event (see measure); grown from the calls seen.
        self.spin_cycles = 0

    def measure(self, entry: Callable[..., Any], inputs: Any) -> tuple[Any, float]:
        """(output, nanoseconds) of one call; everything it launched has finished.

        On CUDA the events time the GPU's work only if the work is queued before the GPU
        reaches the start event: otherwise the time Python takes to launch it (tens of us for
        a Triton kernel) is counted as idle GPU time. So a short spin kernel, longer than the
        launch took last time, goes in front of the start event (as a padding, untimed)."""
        if not self.cuda:
            start = time.perf_counter_ns()
            out = runtime.call(entry, inputs)
            return out, float(time.perf_counter_ns() - start)
        import torch

        if self.flush is not None:
            self.flush.zero_()
        sleep = getattr(torch.cuda, "_sleep", None)
        if self.spin_cycles and sleep is not None:
            sleep(self.spin_cycles)
        begin, end = self.events
        begin.record()
        launch = time.perf_counter_ns()
        out = runtime.call(entry, inputs)
        launch = time.perf_counter_ns() - launch
        end.record()
        torch.cuda.synchronize()
        # Twice the launch time at up to 2 GHz (a slower clock only spins longer), at most 5 ms.
        self.spin_cycles = min(max(self.spin_cycles, 2 * launch * 2), SPIN_CAP_CYCLES)
        return out, float(begin.elapsed_time(end)) * 1e6


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
        times.append(timer.measure(entry, clone_inputs(inputs))[1])
        last = times[-3:]
        spread = (max(last) / min(last) - 1) * 100 if min(last) > 0 else math.inf
        if len(times) > opts.warmup_min and len(last) == 3 and spread <= opts.steady_pct:
            break
    return len(times)


class _Verdicts:
    """The first failed check per variant (or the last good one) for one config."""

    def __init__(self, names: Sequence[str], baseline: str, opts: TimingOptions) -> None:
        self.names, self.baseline, self.opts = list(names), baseline, opts
        self.outcome: dict[str, checks.CheckOutcome] = {}

    def failed(self, name: str) -> bool:
        return name in self.outcome and not self.outcome[name].ok

    def note(self, name: str, outcome: checks.CheckOutcome, run: int | str) -> None:
        if self.failed(name):
            return
        if not outcome.ok:
            outcome.message = f"run {run}: {outcome.message}"
        self.outcome[name] = outcome

    def run(self, outs: Mapping[str, Any], run: int) -> None:
        for name, out in outs.items():
            if name == self.baseline:
                outcome = checks.check_single(out)
            else:
                outcome = checks.compare(out, outs[self.baseline], self.opts.rtol, self.opts.atol)
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


def _time_config(
    ci: int,
    config: Mapping[str, Any],
    setup: Callable[..., Any],
    variants: Mapping[str, Callable[..., Any]],
    baseline: str,
    timer: Timer,
    opts: TimingOptions,
    order: list[tuple[int, int, str]],
) -> tuple[dict[str, list[float]], dict[str, int], _Verdicts]:
    names = list(variants)
    with runtime.stage("setup", None, ci):
        runtime.seed_all(opts.seed)
        first = runtime.build_inputs(setup, dict(config), timer.device)
    warm = {}
    for name in names:
        with runtime.stage("entry", name, ci):
            warm[name] = _warm_up(timer, variants[name], first, opts)
    samples: dict[str, list[float]] = {n: [] for n in names}
    verdicts = _Verdicts(names, baseline, opts)
    kept: dict[str, Any] = {}
    start = time.monotonic()
    for run in range(opts.max_runs):
        with runtime.stage("setup", None, ci):
            runtime.seed_all(opts.seed + 1 + run)
            fresh = runtime.build_inputs(setup, dict(config), timer.device)
        outs: dict[str, Any] = {}
        for name in names if run % 2 == 0 else reversed(names):
            with runtime.stage("entry", name, ci):
                outs[name], ns = timer.measure(variants[name], clone_inputs(fresh))
            samples[name].append(ns)
            order.append((ci, run, name))
        runtime.synchronize(timer.device)  # side streams too, before anything is checked
        verdicts.run(outs, run)
        if run == 0:
            kept = {n: (o, clone_inputs(o)) for n, o in outs.items()}
        done = run + 1 >= opts.min_runs and all(
            summarize(s, opts.ci_target_pct)["StableMeasurement"] for s in samples.values()
        )
        if done or time.monotonic() - start > opts.max_seconds:
            break
    runtime.synchronize(timer.device)
    verdicts.recheck({n: o for n, (o, _) in kept.items()}, {n: c for n, (_, c) in kept.items()})
    return samples, warm, verdicts


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
    if timer.flush is None:
        result.notes.append("the L2 cache was not flushed between runs")
    for ci, config in enumerate(configs):
        samples, warm, verdicts = _time_config(
            ci, config, setup, variants, base, timer, opts, result.order
        )
        for name, values in samples.items():
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
    return result


# --- a rendered run directory ----------------------------------------------------------------


def time_run_dir(run_dir: Path, device: str, **options: Any) -> TimingResult:
    """Time the variants of a rendered run (harness.py's SPEC and the user's files) on
    ``device`` ("cuda" or "cpu"), with the request's seed and tolerances; in this process."""
    import importlib.util

    known = {f.name for f in fields(TimingOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidRequestError(f"unknown timing options {unknown}; known: {sorted(known)}")
    spec_module = importlib.util.spec_from_file_location(
        "nsight_agent_spec", run_dir / "harness.py"
    )
    if spec_module is None or spec_module.loader is None:
        raise InvalidRequestError(f"no harness.py in {run_dir}")
    harness = importlib.util.module_from_spec(spec_module)
    spec_module.loader.exec_module(harness)
    spec: dict[str, Any] = harness.SPEC
    names = {v["module"] for v in spec["variants"]} | {spec["setup_module"]}
    try:
        modules = {
            v["module"]: runtime.load_user_module(v["module"], str(run_dir / v["file"]))
            for v in spec["variants"]
        }
        setup = runtime.function_of(modules[spec["setup_module"]], spec["setup"], "setup")
        entries = {v["name"]: _entry(spec, v, modules, device) for v in spec["variants"]}
        opts = TimingOptions(seed=spec["seed"], rtol=spec["rtol"], atol=spec["atol"])
        for key, value in options.items():
            setattr(opts, key, value)
        return time_variants(
            setup, entries, spec["configs"], baseline=spec["baseline"], device=device, options=opts
        )
    finally:
        for name in names:
            sys.modules.pop(name, None)


def _entry(
    spec: dict[str, Any], v: dict[str, Any], modules: dict[str, Any], device: str
) -> Callable[..., Any]:
    fn = runtime.function_of(modules[v["module"]], v["entry"], "entry point")
    if spec["language"] == "torch_compile":
        import torch

        with runtime.stage("compile", v["name"]):
            return torch.compile(fn, **spec["compile_options"])
    if spec["language"] == "cuda":
        if not device.startswith("cuda"):
            raise InvalidRequestError("CUDA sources can be timed only on a GPU.")
        main = modules[spec["setup_module"]]
        source = spec["cuda"]["source"] or getattr(main, "CUDA_SOURCE", "")
        functions = spec["cuda"]["functions"] or list(getattr(main, "CUDA_FUNCTIONS", []))
        ext, _ = _cuda_ext(source, tuple(functions), spec["cuda"]["cache_dir"])
        return functools.partial(fn, ext)
    return fn


@functools.lru_cache(maxsize=32)
def _cuda_ext(source: str, functions: tuple[str, ...], cache_dir: str) -> tuple[Any, Any]:
    """Built extensions stay loaded in the warm worker: one build (or load) per source."""
    from nsight_agent.engine.harness import cuda_build

    return cuda_build.build(source, list(functions), Path(cache_dir))
