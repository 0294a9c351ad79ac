"""The nsight-python API: ``analyze.kernel`` profiles a function over configs, ``analyze.plot``
draws the result.

Calling a decorated function runs its configs in ONE child process under ncu
(``engine.child``), reads the report and returns ``ProfileResults``. The function travels to
that process by value (``engine.shipping``): nested functions, closures, lambdas, methods and
notebook cells profile like module-level functions, and the user's script is not re-run.
"""

from __future__ import annotations

import functools
import os
import pickle
import tempfile
import time
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from nsight_agent.api import compat, prefetch
from nsight_agent.api import configs as configs_
from nsight_agent.api.compat import Verbosity, VerbosityLevel
from nsight_agent.api.plotting import PlottedFunction, plot
from nsight_agent.engine import process
from nsight_agent.engine.collection import derived, ncu
from nsight_agent.engine.collection.ncu_args import NcuOptions, check_choice
from nsight_agent.engine.store.run_files import RunFiles
from nsight_agent.engine.thermal import ThermalMode
from nsight_agent.engine.worker import cuda_early, info, shipping
from nsight_agent.engine.worker.child import ChildSpec
from nsight_agent.errors import InvalidRequestError, UnknownMetricError
from nsight_agent.experimental import info_collectors as collecting
from nsight_agent.options import (
    MIN_TIMEOUT_S,
    TIME_METRIC,
    CacheControl,
    ClockControl,
    ReplayMode,
)

if TYPE_CHECKING:
    from nsight_agent.api.results import ProfileResults

# What reading the report needs (pandas, ncu_report: slow imports). Not imported with the
# decorator, so the profiled child, whose script decorates the function too, never loads them;
# the caller loads them in a thread while ncu runs (``prefetch``).
READERS = ("nsight_agent.engine.collection.measure", "nsight_agent.api.results")

DEFAULT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class KernelSettings:
    configs: tuple[Any, ...] | None = None
    runs: int = 1
    metrics: tuple[str, ...] = (TIME_METRIC,)
    derive_metric: Callable[..., Any] | None = None
    normalize_against: str | None = None
    ignore_kernel_list: tuple[str, ...] = ()
    combine_kernel_metrics: Callable[[float, float], float] | None = None
    replay_mode: ReplayMode = "kernel"
    cache_control: CacheControl = "all"
    clock_control: ClockControl = "none"
    thermal_mode: ThermalMode = "auto"
    thermal_wait: int | None = None
    thermal_cont: int | None = None
    thermal_timeout: float | None = None
    output_prefix: str | None = None
    output_csv: bool = False
    verbosity: Verbosity = "progress"
    timeout: float = DEFAULT_TIMEOUT_S
    info_collectors: tuple[collecting.Normalized, ...] = ()

    def check(self) -> None:
        check_choice("verbosity", self.verbosity, Verbosity)
        check_choice("thermal_mode", self.thermal_mode, ThermalMode)
        if not isinstance(self.runs, int) or self.runs < 1:
            raise InvalidRequestError(f"runs must be a positive integer; got {self.runs!r}")
        if not self.timeout >= MIN_TIMEOUT_S:
            raise InvalidRequestError(f"timeout must be >= {MIN_TIMEOUT_S} s; got {self.timeout!r}")
        if self.combine_kernel_metrics is not None and not callable(self.combine_kernel_metrics):
            raise InvalidRequestError("combine_kernel_metrics must be a function of two values")
        if self.derive_metric is not None and not callable(self.derive_metric):
            raise InvalidRequestError("derive_metric must be callable")
        self.ncu_options()  # checks replay/cache/clock options at decoration time

    def ncu_options(self) -> NcuOptions:
        return NcuOptions(
            metrics=self.metrics,
            replay_mode=self.replay_mode,
            cache_control=self.cache_control,
            clock_control=self.clock_control,
        )


param_names = configs_.param_names
normalize_configs = configs_.normalize


class ProfiledFunction:
    """A function decorated with ``analyze.kernel``; calling it profiles it."""

    _nsight_agent_wrapper = True  # shipping.unwrap measures the user's function inside

    def __init__(self, func: Callable[..., Any], settings: KernelSettings) -> None:
        settings.check()
        collecting.validate(settings.info_collectors, param_names(func), func.__name__)
        self.func = func
        self.settings = settings
        self.calls = 0
        # updated=(): copying the wrapped object's __dict__ would overwrite our own fields.
        functools.update_wrapper(self, func, updated=())

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """Decorating a method profiles it bound to the instance it is looked up on."""
        if obj is None:
            return self
        return ProfiledFunction(types.MethodType(self.func, obj), self.settings)

    def __call__(self, *args: Any, configs: Iterable[Any] | None = None, **kwargs: Any) -> Any:
        if shipping.in_worker():
            raise shipping.ImportStop()
        chosen = configs_.choose(self.func, args, kwargs, configs, self.settings.configs)
        normalized = configs_.normalize(self.func, chosen)
        run_id = self.calls
        self.calls += 1
        return profile(self.func, normalized, self.settings, run_id)


def profile(
    func: Callable[..., Any],
    configs: list[tuple[Any, ...]],
    s: KernelSettings,
    run_id: int = 0,
) -> ProfileResults:
    """Run ``func`` over ``configs`` under ncu in one child process and read the report."""
    names = param_names(func)
    from nsight_agent.catalog import metrics as catalog

    try:  # a misspelt metric is said before ncu is looked for, as on every path
        catalog.validate_metrics(list(s.metrics))
    except UnknownMetricError as err:
        raise compat.as_metrics_error(err) from err
    if s.derive_metric is not None:
        derived.check_derive_signature(s.derive_metric, len(s.metrics), len(names))
    prefix = s.output_prefix
    if prefix is None:
        prefix = tempfile.mkdtemp(prefix="nsight_agent_") + "/"
    # A prefix ending in a separator is a folder; otherwise its last part starts file names.
    (Path(prefix) if prefix.endswith(("/", "\\")) else Path(prefix).parent).mkdir(
        parents=True, exist_ok=True
    )
    stem = f"{func.__name__}-{run_id}"

    def path(kind: str, ext: str) -> Path:
        return Path(f"{prefix}{kind}-{stem}.{ext}")

    files = RunFiles(
        report=path("ncu-output", "ncu-rep"),
        ncu_log=path("ncu-output", "log"),
        program_output=path("program-output", "log"),
        manifest=path("manifest", "json"),
        error=path("error", "txt"),
        progress=path("progress", "txt"),
        raw_csv=path("profiled_data", "csv"),
        processed_csv=path("processed_data", "csv"),
    )
    # What ProfileResults.artifacts names (the CSVs only when written, below).
    artifacts = {
        "report": files.report,
        "ncu_log": files.ncu_log,
        "program_output": files.program_output,
        "manifest": files.manifest,
    }
    spec_path = path("spec", "pkl")
    if s.info_collectors:
        artifacts["collected_info"] = path("collected_info", "pkl")
    fixed = info.in_caller(s.info_collectors, configs) if s.info_collectors else None
    spec = ChildSpec(
        target=shipping.ship(func, configs=configs),
        runs=s.runs,
        manifest_path=str(files.manifest),
        progress_path=str(files.progress),
        error_path=str(files.error),
        thermal_mode=s.thermal_mode,
        thermal_wait=s.thermal_wait,
        thermal_cont=s.thermal_cont,
        thermal_timeout=s.thermal_timeout,
        collectors=collecting.ship(info.in_profiled(s.info_collectors)),
        info_path=str(artifacts["collected_info"]) if s.info_collectors else None,
    )
    for stale in (files.progress, files.error, files.manifest, *_optional(artifacts)):
        stale.unlink(missing_ok=True)
    spec_path.write_bytes(pickle.dumps(spec))

    total = len(configs) * s.runs
    say = (
        (lambda msg: print(f"[nsight-agent] {msg}", flush=True)) if s.verbosity != "quiet" else None
    )
    if say:
        say(f"profiling {func.__name__}: {len(configs)} config(s) x {s.runs} run(s) under ncu")
    start = time.monotonic()
    spawned = time.time()
    shown = [0]
    readers = prefetch.start(*READERS, name="nsight-agent-report-readers")

    def poll() -> None:
        if say is None or not files.progress.exists():
            return
        done = len(files.progress.read_text().splitlines())
        if done != shown[0]:
            shown[0] = done
            say(f"  {done}/{total} calls")

    try:
        ncu.profile_cold(
            [process.python_executable(), "-m", "nsight_agent.engine.worker.entry", str(spec_path)],
            ncu.Invocation(
                s.ncu_options(), files, timeout=s.timeout, poll=poll, suggest=catalog.suggestions
            ),
            env=process.child_env(early_cuda(s.replay_mode)),
        )
        ncu_done = time.time()
        if s.output_csv:
            artifacts |= {"raw_csv": files.raw_csv, "processed_csv": files.processed_csv}
        readers.join()  # its imports done before this thread imports the same modules
        from nsight_agent.engine.collection import measure

        manifest = measure.read_manifest(files.manifest)
        compat.warn_if_returned(func.__name__, manifest)
        results = results_from_report(artifacts, configs, names, s, manifest, fixed)
        results.stage_seconds = stage_split(spawned, manifest.get("times"), ncu_done, time.time())
    except UnknownMetricError as err:
        raise compat.as_metrics_error(err) from err
    finally:
        if s.verbosity == "verbose":
            for log in (files.ncu_log, files.program_output):
                if log.exists():
                    print(log.read_text(errors="replace"))
    results.seconds = time.monotonic() - start
    if say:
        split = ", ".join(f"{k} {v:.1f} s" for k, v in results.stage_seconds.items())
        say(f"done in {results.seconds:.1f} s ({split}); report {files.report}")
    return results


def early_cuda(replay_mode: ReplayMode) -> dict[str, str]:
    """The child's early CUDA start (engine/worker/cuda_early.py): under kernel replay, a
    warm-up kernel takes ncu's first-kernel set-up off the measured calls; under application
    and range replay (where an extra kernel in the range would be replayed or measured with
    the calls) the driver only. A setting in the caller's environment wins."""
    if cuda_early.ENV in os.environ:
        return {}
    return {cuda_early.ENV: "warmup" if replay_mode == "kernel" else "init"}


def stage_split(spawned: float, times: Any, ncu_done: float, read_done: float) -> dict[str, float]:
    """Where one profile call's wall went, from the child's stamps (engine/worker/child.py) and
    the caller's: ncu's and python's start, loading the function (its imports), the calls with
    ncu's replay, ncu writing the report after them, and reading it. Empty where a stamp is
    missing (an older child, a clock that went back)."""
    if not isinstance(times, dict):
        return {}
    found = [times.get(k) for k in ("entered", "loaded", "calls_done")]
    child = [float(t) for t in found if isinstance(t, (int, float))]
    if len(child) != len(found):
        return {}
    stamps = [spawned, *child, ncu_done, read_done]
    if stamps != sorted(stamps):
        return {}
    names = ("ncu and python start", "imports", "calls and replay", "report written", "report read")
    return {n: round(b - a, 3) for n, a, b in zip(names, stamps, stamps[1:])}


def _optional(artifacts: dict[str, Path]) -> list[Path]:
    """Artifacts of an earlier call under the same prefix that this call may not rewrite."""
    return [artifacts[k] for k in ("collected_info",) if k in artifacts]


def results_from_report(
    artifacts: dict[str, Path],
    configs: list[tuple[Any, ...]],
    names: list[str],
    s: KernelSettings,
    manifest: dict[str, Any] | None = None,
    fixed: info.Fixed | None = None,
) -> ProfileResults:
    """Report + manifest -> ProfileResults (and the CSV files when their paths are given);
    ``fixed``: the once/config-scope collectors' values, computed in this process."""
    from nsight_agent.api.results import ProfileResults
    from nsight_agent.catalog import metrics as catalog
    from nsight_agent.engine.collection import measure

    manifest = manifest if manifest is not None else measure.read_manifest(artifacts["manifest"])
    collected = None
    if s.info_collectors:
        names_ = [c[0] for c in s.info_collectors]
        path = artifacts.get("collected_info")
        collected = info.Collected.read(path, names_, fixed, manifest)
        collecting.warn_collected(collected)
    done = measure.measure(
        artifacts["report"],
        manifest,
        s.metrics,
        configs,
        names,
        ignore_kernels=s.ignore_kernel_list,
        combine=s.combine_kernel_metrics,
        derive_metric=compat.with_unit_warnings(s.derive_metric) if s.derive_metric else None,
        normalize_against=s.normalize_against,
        suggest=catalog.suggestions,
        info=collected.columns if collected is not None else None,
        info_scopes={name: scope for name, _, scope in s.info_collectors},
    )
    if "raw_csv" in artifacts:
        done.raw.to_csv(artifacts["raw_csv"], index=False)
    if "processed_csv" in artifacts:
        done.processed.to_csv(artifacts["processed_csv"], index=False)
    return ProfileResults(done.processed, done.raw, names, list(s.metrics), artifacts)


@overload
def kernel(_func: Callable[..., Any]) -> ProfiledFunction: ...


@overload
def kernel(
    _func: None = None,
    *,
    configs: Iterable[Any] | None = None,
    runs: int = 1,
    metrics: Sequence[str] = (TIME_METRIC,),
    derive_metric: Callable[..., Any] | None = None,
    normalize_against: str | None = None,
    ignore_kernel_list: Sequence[str] | None = None,
    combine_kernel_metrics: Callable[[float, float], float] | None = None,
    replay_mode: ReplayMode = "kernel",
    cache_control: CacheControl = "all",
    clock_control: ClockControl = "none",
    thermal_mode: ThermalMode = "auto",
    thermal_wait: int | None = None,
    thermal_cont: int | None = None,
    thermal_timeout: float | None = None,
    output_prefix: str | None = None,
    output_csv: bool = False,
    verbosity: Verbosity | VerbosityLevel = "progress",
    timeout: float = DEFAULT_TIMEOUT_S,
    info_collectors: Sequence[Any] | None = None,
) -> Callable[[Callable[..., Any]], ProfiledFunction]: ...


def kernel(
    _func: Callable[..., Any] | None = None,
    *,
    configs: Iterable[Any] | None = None,
    runs: int = 1,
    metrics: Sequence[str] = (TIME_METRIC,),
    derive_metric: Callable[..., Any] | None = None,
    normalize_against: str | None = None,
    ignore_kernel_list: Sequence[str] | None = None,
    combine_kernel_metrics: Callable[[float, float], float] | None = None,
    replay_mode: ReplayMode = "kernel",
    cache_control: CacheControl = "all",
    clock_control: ClockControl = "none",
    thermal_mode: ThermalMode = "auto",
    thermal_wait: int | None = None,
    thermal_cont: int | None = None,
    thermal_timeout: float | None = None,
    output_prefix: str | None = None,
    output_csv: bool = False,
    verbosity: Verbosity | VerbosityLevel = "progress",
    timeout: float = DEFAULT_TIMEOUT_S,
    info_collectors: Sequence[Any] | None = None,
) -> ProfiledFunction | Callable[[Callable[..., Any]], ProfiledFunction]:
    """Profile the decorated function with Nsight Compute over ``configs``.

    Each config is a sequence of arguments (a scalar for a one-parameter function; trailing
    parameters with defaults may be left out). Every config runs ``runs`` times; kernels
    inside ``nsight_agent.annotate`` ranges are measured with ``metrics``. ``derive_metric``
    is called with the metric values then the config and returns a value, ``(value, unit)``
    or a dict of them. ``normalize_against`` divides by that annotation's AvgValue.
    ``combine_kernel_metrics`` folds several kernels of one annotation into one value;
    ``ignore_kernel_list`` drops kernels by name. ``replay_mode``, ``cache_control`` and
    ``clock_control`` are ncu's options of those names; ``thermal_mode`` pauses between calls
    while the GPU is near throttling. ``output_prefix`` places the artifacts (report, logs,
    CSVs with ``output_csv``); ``verbosity`` is quiet, progress or verbose (or nsight-python's
    ``VerbosityLevel.SILENT``/``INFO``/``DEBUG``). ``info_collectors`` adds columns captured per
    session, config, run or annotation (``nsight_agent.experimental.collect``).
    """
    if isinstance(metrics, str):
        metrics = [metrics]
    settings = KernelSettings(
        configs=tuple(configs) if configs is not None else None,
        runs=runs,
        metrics=tuple(m.strip() for m in metrics),
        derive_metric=derive_metric,
        normalize_against=normalize_against,
        ignore_kernel_list=tuple(ignore_kernel_list or ()),
        combine_kernel_metrics=combine_kernel_metrics,
        replay_mode=replay_mode,
        cache_control=cache_control,
        clock_control=clock_control,
        thermal_mode=thermal_mode,
        thermal_wait=thermal_wait,
        thermal_cont=thermal_cont,
        thermal_timeout=thermal_timeout,
        output_prefix=output_prefix,
        output_csv=output_csv,
        verbosity=compat.as_verbosity(verbosity),
        timeout=timeout,
        info_collectors=tuple(collecting.normalize(info_collectors)),
    )
    if _func is not None:
        return ProfiledFunction(_func, settings)
    return lambda func: ProfiledFunction(func, settings)


__all__ = ["PlottedFunction", "ProfiledFunction", "kernel", "plot"]
