"""Launch sampling: a step profiled one launch per launch configuration, read as every launch.

A deep network or an RNN repeats the same kernel with the same grid and block many times (a
KernelBench LSTM: 6,242 launches a step in 5 configurations; ResNet101: 586 in 67), and ncu
costs about 0.5 s a launch with the cheap sections on the H200. Under ``sample_launches`` ncu
profiles the first launch of each configuration in the measured call (``NCU_ARGS``)
and the pre-flight lists every launch of that call with its configuration and its duration
(CUPTI, ``runtime.call_counting_kernels``). ``expand`` maps the two by launch order: each
launch of the call becomes the profiled launch of its configuration, its time (and DRAM
bytes) scaled by its own pre-flight duration over the profiled one's, since one configuration
can do different work (a cuDNN batch norm over more channels: +21 % read from one sample on
ResNet18, 2026-12-04). A launch the map cannot place is ``SamplingMismatch``: the caller says
so rather than guessing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# One launch per unique launch configuration, counted among the launches the NVTX filter lets
# through (a warm-up outside the measured call takes none: on the H200 a ResNet18 step after a
# warm-up gave 40 of its 127 launches, 2026-12-04, bench/probes/launch_config_sampling.py).
NCU_ARGS = ("--filter-mode", "per-launch-config", "--launch-count", "1")
DURATION = "gpu__time_duration.sum"
# Per-launch totals that grow with the launch's work; rates and percentages do not.
SCALED = frozenset({DURATION, "dram__bytes_read.sum", "dram__bytes_write.sum"})
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


_ANON = re.compile(r"\(anonymous namespace\)::")


def base_name(name: str) -> str:
    """A kernel's bare function name, as ncu's report and CUPTI's demangled name both hold
    it: no return type, namespace, template arguments or parameters."""
    bare = _ANON.sub("", name).strip()
    bare = bare.removeprefix("void ").split("<", 1)[0].split("(", 1)[0]
    return bare.rsplit("::", 1)[-1].strip()


def _dims(action: Any, names: Sequence[str]) -> tuple[int, ...] | None:
    present = set(action.metric_names())
    if not all(n in present for n in names):
        return None
    return tuple(int(action[n].value()) for n in names)


def _matches(action: Any, launch: PreLaunch) -> bool:
    """Whether the profiled ``action`` can be ``launch``: the same bare name, grid and block
    (what either side does not hold is not compared)."""
    a, b = base_name(str(action.name())), base_name(launch.name)
    if a and b and a != b:
        return False
    if launch.config is None:
        return True
    grid, block = _dims(action, GRID), _dims(action, BLOCK)
    if grid is not None and grid != launch.config[:3]:
        return False
    return block is None or block == launch.config[3:6]


def _key(launch: PreLaunch, shared: bool) -> tuple[Any, ...]:
    """A configuration as the pre-flight names it: the whole demangled name (two functors of
    one templated kernel are two functions, to ncu as well), grid, block and, with
    ``shared``, dynamic shared memory. ncu's report spells demangled names its own way, so an
    action is matched by bare name (``_matches``)."""
    config = launch.config or ()
    return (launch.name, config[:7] if shared else config[:6])


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
    step view groups it there: views/step.places)."""

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


def expand(actions: Sequence[Any], launches: Sequence[PreLaunch]) -> list[Any]:
    """Every launch of the call, in order, each as the profiled launch of its configuration.

    Walking the launches in order: one whose configuration was profiled already is read from
    that launch; any other is the first of its configuration, so the next profiled action,
    which must match it. A launch that does not, or a profiled action left over, is a
    ``SamplingMismatch``. Whether ncu's configurations tell shared memory apart is not
    documented: with it first, then without. ncu having profiled every launch (none of a
    configuration repeated, to its eyes) is the one-to-one map."""
    if len(actions) == len(launches) and all(map(_matches, actions, launches)):
        return list(actions)
    try:
        return _expand(actions, launches, shared=True)
    except SamplingMismatch:
        return _expand(actions, launches, shared=False)


def _expand(actions: Sequence[Any], launches: Sequence[PreLaunch], shared: bool) -> list[Any]:
    out: list[Any] = []
    profiled: dict[tuple[Any, ...], tuple[Any, PreLaunch]] = {}  # key -> (action, its launch)
    j = 0
    for i, launch in enumerate(launches):
        found = profiled.get(_key(launch, shared))
        if found is not None:
            action, first = found
            scale = launch.ns / first.ns if first.ns > 0 else 1.0
            own_op = launch.op if launch.op != first.op else None
            out.append(SampledLaunch(action, scale, own_op))
            continue
        if j >= len(actions) or not _matches(actions[j], launch):
            raise SamplingMismatch(
                f"launch {i + 1} of {len(launches)} ({base_name(launch.name)[:60]}, "
                f"{launch.config}) has no profiled launch of its configuration"
            )
        profiled[_key(launch, shared)] = (actions[j], launch)
        out.append(actions[j])
        j += 1
    if j != len(actions):
        raise SamplingMismatch(
            f"ncu profiled {len(actions) - j} launch(es) the pre-flight's list does not hold "
            f"(first: {base_name(str(actions[j].name()))[:60]})"
        )
    return out


def note(profiled: int, launches: int) -> str:
    """What the answer says of a sampled step."""
    return (
        f"launch-sampled: ncu profiled {profiled} of the call's {launches} launches, one per "
        "launch configuration; each other launch is read from its configuration's, its time "
        "and DRAM bytes scaled by its own duration in the pre-flight (CUPTI)"
    )
