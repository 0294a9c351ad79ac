"""Launch sampling: a step profiled one launch per launch configuration, read as every launch.

A deep network or an RNN repeats the same kernel with the same grid and block many times (on
the H200 a KernelBench LSTM step makes 6242 launches in 5 configurations, ResNet101's 586 in
65: ``launches`` and ``sampled`` of the ``steps`` rows in
``bench/results/kernelbench-sweep/2026-12-04-h200-c546327.json``), and ncu replays each launch
it profiles once per pass of its sections (0.046 s a pass of one 2^20-float kernel on an H100:
``s_per_kernel_pass`` in ``bench/results/section-costs/2026-12-06-h100-80gb-hbm3-1f031cd.json``).
Under ``sample_launches`` ncu profiles the first launch of each configuration in the measured
call (``NCU_ARGS``) and the pre-flight lists every launch of that call with its configuration,
duration and torch operator (CUPTI, ``runtime.call_counting_kernels``). ``expand`` maps the
two: each launch of the call becomes the profiled launch of its configuration, its time (and
DRAM bytes) scaled by its own pre-flight duration over the profiled one's, since one
configuration can do different work (a cuDNN batch norm over more channels reads far off from
one sample: ``bench/probes/launch_config_sampling.py`` measures that error on a step), and
grouped under its own operator. A launch the map cannot place is ``SamplingMismatch``: the
caller says so rather than guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nsight_agent.options import TIME_METRIC
from nsight_agent.source_kernels import base_name

# One launch per unique launch configuration, counted among the launches the NVTX filter lets
# through (a warm-up outside the measured call takes none:
# bench/probes/launch_config_sampling.py counts the launches ncu profiles of a step after one).
NCU_ARGS = ("--filter-mode", "per-launch-config", "--launch-count", "1")
DURATION = TIME_METRIC
# Per-launch totals that grow with the launch's work; rates and percentages do not.
SCALED = frozenset({DURATION, "dram__bytes_read.sum", "dram__bytes_write.sum"})
# The grid's size as ncu names it (extract.py reads it from each profiled kernel too).
GRID = ("launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z")
BLOCK = ("launch__block_dim_x", "launch__block_dim_y", "launch__block_dim_z")


class SamplingMismatch(Exception):
    """The profiled launches and the pre-flight's launches do not map one onto the other."""


@dataclass(frozen=True)
class PreLaunch:
    """One kernel launch of the measured call, as the pre-flight saw it."""

    name: str
    config: tuple[int, ...] | None  # grid x, y, z, block x, y, z, shared memory
    ns: float
    op: str | None = None  # the outermost torch operator it ran in, with input sizes


def preflight_launches(manifest: dict[str, Any]) -> list[PreLaunch] | None:
    """The measured call's launches from a pre-flight manifest, or None when it did not list
    them (sampling was off, or the call ran on the CPU)."""
    calls = [c for c in manifest.get("calls", []) if isinstance(c.get("launches"), list)]
    if len(calls) != 1:
        return None
    return [
        PreLaunch(str(name), tuple(config) if config else None, float(ns), *(rest[:1] or [None]))
        for name, config, ns, *rest in calls[0]["launches"]
    ]


def _dims(action: Any, names: Sequence[str]) -> tuple[int, ...] | None:
    present = set(action.metric_names())
    if not all(n in present for n in names):
        return None
    return tuple(int(action[n].value()) for n in names)


def _shape(action: Any) -> tuple[int, ...] | None:
    """A profiled launch's grid and block, or None where the report holds neither."""
    grid, block = _dims(action, GRID), _dims(action, BLOCK)
    return (*grid, *block) if grid is not None and block is not None else None


class _ScaledMetric:
    """A metric of the profiled launch, its value times the launch's scale."""

    def __init__(self, metric: Any, scale: float) -> None:
        self._metric, self._scale = metric, scale

    def value(self) -> Any:
        v = self._metric.value()
        if isinstance(v, bool) or not isinstance(v, int | float):
            return v
        return v * self._scale

    def __getattr__(self, name: str) -> Any:
        return getattr(self._metric, name)


class SampledLaunch:
    """One launch of the step, read from the profiled launch of its configuration: every
    metric the profiled one has, the per-launch totals (``SCALED``) times ``scale``;
    ``own_op``: the torch operator it ran in, where that is not the profiled launch's (the
    step view groups it there: diagnose/places.places)."""

    def __init__(self, action: Any, scale: float, own_op: str | None = None) -> None:
        self.action, self.scale, self.own_op = action, scale, own_op

    def __getitem__(self, name: str) -> Any:
        metric = self.action[name]
        return _ScaledMetric(metric, self.scale) if name in SCALED else metric

    def metric_names(self) -> Iterable[str]:
        names: Iterable[str] = self.action.metric_names()
        return names

    def __getattr__(self, name: str) -> Any:
        return getattr(self.action, name)


# Within one bare name, grid and block, what else ncu's configurations tell apart, tried in
# this order: on the H200 two functors of one templated elementwise kernel shared
# a profiled launch, while one cuDNN batch-norm kernel was profiled once per shared-memory size.
_FINER: tuple[Callable[[PreLaunch], Any], ...] = (
    lambda x: None,
    lambda x: x.config[6:7] if x.config else None,
    lambda x: x.name,
    lambda x: (x.config[6:7] if x.config else None, x.name),
)


def expand(actions: Sequence[Any], launches: Sequence[PreLaunch]) -> list[Any]:
    """Every launch of the call, in order, each as the profiled launch of its configuration.

    ncu keys a configuration by rules of its own (``_FINER``), so the map does not assume
    them: a launch belongs to the profiled launches of its bare name, grid and block (or bare
    name alone where the pre-flight has no shape); where there are several, the first of
    ``_FINER`` that splits those launches into as many kinds as there are profiled ones
    places them, kinds and profiled launches both in order of first appearance. The first
    launch placed on a profiled one is the one ncu measured: the others are scaled from its
    pre-flight duration. A launch with no profiled launch to stand for it, or a profiled
    launch no launch was placed on, is a ``SamplingMismatch``. ncu having profiled every
    launch (none repeated, to its eyes) is the one-to-one map."""
    if len(actions) == len(launches) and all(
        base_name(str(a.name())) == base_name(x.name) for a, x in zip(actions, launches)
    ):
        return list(actions)
    candidates: dict[tuple[Any, ...], list[int]] = {}
    for j, action in enumerate(actions):
        bare = base_name(str(action.name()))
        candidates.setdefault((bare, _shape(action)), []).append(j)
        candidates.setdefault((bare, None), []).append(j)
    groups: dict[tuple[Any, ...], list[int]] = {}  # key -> its launches' indices
    for i, launch in enumerate(launches):
        key = (base_name(launch.name), launch.config[:6] if launch.config else None)
        if key not in candidates:
            raise SamplingMismatch(
                f"launch {i + 1} of {len(launches)} ({key[0][:60]}, grid and block "
                f"{key[1]}) has no profiled launch of its configuration"
            )
        groups.setdefault(key, []).append(i)
    placed: list[int] = [0] * len(launches)
    for key, members in groups.items():
        js = candidates[key]
        for kind in _FINER:
            kinds = list(dict.fromkeys(kind(launches[i]) for i in members))
            if len(kinds) == len(js) or (key[1] is None and len(kinds) <= len(js)):
                break
        else:
            kinds = [None]  # no rule splits them so: the first profiled launch stands for all
            kind = _FINER[0]
        for i in members:
            placed[i] = js[min(kinds.index(kind(launches[i])), len(js) - 1)]
    return _read(actions, launches, placed)


def _read(actions: Sequence[Any], launches: Sequence[PreLaunch], placed: list[int]) -> list[Any]:
    """Each launch as its profiled launch (``placed``), the first one placed on it as measured."""
    first: dict[int, PreLaunch] = {}
    out: list[Any] = []
    for launch, j in zip(launches, placed, strict=True):
        measured = first.setdefault(j, launch)
        if measured is launch:
            out.append(actions[j])
            continue
        scale = launch.ns / measured.ns if measured.ns > 0 else 1.0
        own_op = launch.op if launch.op != measured.op else None
        out.append(SampledLaunch(actions[j], scale, own_op))
    unplaced = [j for j in range(len(actions)) if j not in first]
    if unplaced:
        raise SamplingMismatch(
            f"ncu profiled {len(unplaced)} launch(es) the pre-flight's list does not hold "
            f"(first: {base_name(str(actions[unplaced[0]].name()))[:60]} "
            f"{_shape(actions[unplaced[0]])})"
        )
    return out


def note(profiled: int, launches: int) -> str:
    """What the answer says of a sampled step."""
    return (
        f"launch-sampled: ncu profiled {profiled} of the call's {launches} launches, one per "
        "launch configuration; each other launch is read from its configuration's, its time "
        "and DRAM bytes scaled by its own duration in the pre-flight (CUPTI)"
    )
