"""Extraction: ``.ncu-rep`` -> action records -> nsight-python's raw rows.

Reports are read only through NVIDIA's ``ncu_report`` package. Each profiled action (a
kernel, or a whole range under range replay) is tied to its annotation and to the call
(config, run) that launched it by the NVTX start/end ranges open at launch time.
"""

from __future__ import annotations

import functools
import math
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ncu_report
import pandas as pd

from nsight_agent.annotation import CALL_DOMAIN, NVTX_DOMAIN, WARMUP_KERNEL
from nsight_agent.engine.collection.derived import DeriveMetric, derive, number
from nsight_agent.engine.collection.launch_sampling import GRID as GRID_DIMS
from nsight_agent.engine.collection.report_file import check_report_file
from nsight_agent.engine.harness.call_markers import MARKER_KERNEL
from nsight_agent.errors import (
    ExtractionError,
    KernelCountMismatchError,
    MultipleKernelsError,
    NoKernelsProfiledError,
    UnknownMetricError,
)

RAW_COLUMNS = [
    "Annotation",
    "Value",
    "Metric",
    "Kernel",
    "GPU",
    "Host",
    "ComputeClock",
    "MemoryClock",
    "Unit",
]


@dataclass
class ActionRecord:
    """One profiled action, with the NVTX context it ran in."""

    index: int
    kernel: str
    annotation: str | None
    call: int | None
    values: dict[str, Any]
    units: dict[str, str]
    gpu: str
    compute_clock: float
    memory_clock: float
    nvtx: dict[str, list[str]] = field(default_factory=dict)
    grid: tuple[int, int, int] | None = None  # read for call markers only (call_markers.py)
    passes: float = math.nan  # ncu's replay passes for this kernel (profiler__replayer_passes)


def load(path: str | Path) -> Any:
    """Open a report, with a clear error for a missing, foreign, truncated or unreadable file."""
    p = Path(path)
    if p.is_dir():
        raise ExtractionError(
            f"{p} is a folder, not an Nsight Compute report.",
            "Give the path of a .ncu-rep file written by `ncu -o` (or --export).",
        )
    if not p.is_file():
        raise ExtractionError(
            f"No report at {p}.",
            "Check the path; reports end in .ncu-rep and are written by ncu -o.",
        )
    try:
        check_report_file(p)
    except OSError as err:
        raise ExtractionError(
            f"Cannot read {p}: {err.strerror or err}", "Check the file's permissions."
        ) from err
    try:
        return ncu_report.load_report(str(p))
    except Exception as err:
        raise ExtractionError(
            f"Cannot read {p} as an Nsight Compute report: {err}",
            "Is it a complete .ncu-rep file? A report from an interrupted run may be truncated.",
        ) from err


def iter_actions(report: Any, markers: bool = False) -> list[Any]:
    """The report's actions in order; the harness's call markers (an attached run's,
    ``harness/call_markers.py``) only with ``markers``: no view reads them as kernels. The
    child's warm-up kernel (``annotation.WARMUP_KERNEL``) is never one of them."""
    dropped = {WARMUP_KERNEL} if markers else {WARMUP_KERNEL, MARKER_KERNEL}
    found = [
        report.range_by_idx(r).action_by_idx(a)
        for r in range(report.num_ranges())
        for a in range(report.range_by_idx(r).num_actions())
    ]
    return [a for a in found if a.name() not in dropped]


def nvtx_ranges(action: Any) -> dict[str, list[str]]:
    """Domain name -> names of the start/end and push/pop ranges open at the action."""
    state = action.nvtx_state()
    if state is None:
        return {}
    found: dict[str, list[str]] = {}
    for d in state.domains():
        domain = state.domain_by_id(d)
        names = [*domain.start_end_ranges(), *domain.push_pop_ranges()]
        if names:
            found[domain.name()] = list(names)
    return found


def _metric(action: Any, name: str) -> tuple[Any, str]:
    m = action[name]
    return m.value(), m.unit()


def read_actions(
    path: str | Path,
    metrics: Sequence[str] | None = None,
    suggest: Callable[[str], list[str]] | None = None,
) -> list[ActionRecord]:
    """Every action of the report; ``metrics=None`` reads all metrics each action holds.

    ``suggest`` gives close matches for a requested metric the report lacks.
    """
    report = load(path)
    records = []
    for index, action in enumerate(iter_actions(report, markers=True)):
        available = set(action.metric_names())
        wanted = sorted(available) if metrics is None else list(metrics)
        missing = [m for m in wanted if m not in available]
        if missing:
            raise UnknownMetricError(
                missing[0],
                suggest(missing[0]) if suggest else [],
                f"Metric {missing[0]!r} is not in the report for kernel {action.name()!r}: ncu "
                "did not collect it (unknown name, or not supported on this GPU).",
            )
        values: dict[str, Any] = {}
        units: dict[str, str] = {}
        for m in wanted:
            values[m], units[m] = _metric(action, m)
        ranges = nvtx_ranges(action)
        annotation = ranges.get(NVTX_DOMAIN, [None])[-1]
        call = _call_index(ranges.get(CALL_DOMAIN, []))
        attr = functools.partial(_attr, action, available)
        records.append(
            ActionRecord(
                index=index,
                kernel=action.name(),
                annotation=annotation,
                call=call,
                values=values,
                units=units,
                gpu=str(attr("device__attribute_display_name", "")),
                compute_clock=number(attr("device__attribute_clock_rate", math.nan)),
                memory_clock=number(attr("device__attribute_memory_clock_rate", math.nan)),
                nvtx=ranges,
                grid=_grid(action, available) if action.name() == MARKER_KERNEL else None,
                passes=number(attr("profiler__replayer_passes", math.nan)),
            )
        )
    return records


def _attr(action: Any, available: set[str], name: str, default: Any) -> Any:
    """``available``: the action's metric names, read once per action (each read costs time)."""
    return action[name].value() if name in available else default


def _grid(action: Any, available: set[str]) -> tuple[int, int, int]:
    x, y, z = (int(_attr(action, available, m, 0)) for m in GRID_DIMS)  # 0: not in the report
    return x, y, z


def _call_index(names: list[str]) -> int | None:
    for n in names:
        if n.startswith("call="):
            try:
                return int(n.split("=", 1)[1])
            except ValueError:
                return None
    return None


@dataclass(frozen=True)
class Call:
    """One call of the measured function, from the manifest the runner wrote."""

    call: int
    config: int
    run: int
    annotations: list[str]
    failed: list[str]


def calls_from_manifest(manifest: Mapping[str, Any]) -> list[Call]:
    """The calls listed in a runner's manifest (``collection.child`` or a rendered harness)."""
    return [
        Call(c["call"], c["config"], c["run"], c["annotations"], c["failed"])
        for c in manifest["calls"]
    ]


Combine = Callable[[float, float], float]
# nsight-python's sentence for the same condition, first in our messages (users match on it).
SAME_COUNT = "Expect same number of kernels per run."


def group_kernels(
    records: Sequence[ActionRecord],
    calls: Sequence[Call],
    ignore_kernel_list: Sequence[str] | None = None,
    combine: Combine | None = None,
    droppable: dict[str, str] | None = None,
) -> dict[str, list[tuple[Call, ActionRecord | None]]]:
    """Annotation -> one (call, combined record) per call, in call order.

    A failed annotation (``ignore_failures``) yields ``None`` for that call. An annotation in
    ``droppable`` whose kernel count changes between runs is left out, its message written
    into ``droppable[name]``, instead of failing the whole report (a variant of a comparison
    that returns a cached result on some calls costs its own row).
    """
    ignore = set(ignore_kernel_list or ())
    by_key: dict[tuple[int, str], list[ActionRecord]] = {}
    for rec in records:
        if rec.annotation is None or rec.call is None or rec.kernel in ignore:
            continue
        by_key.setdefault((rec.call, rec.annotation), []).append(rec)
    if not by_key:
        raise NoKernelsProfiledError(
            "The report holds no kernel inside an annotated range"
            + (" once ignore_kernel_list is applied." if ignore else "."),
            "Wrap the GPU work in `with nsight_agent.annotate(name):` and check that it launches "
            "CUDA kernels; kernels named in ignore_kernel_list are dropped.",
        )
    order: list[str] = []
    for c in calls:
        order += [a for a in c.annotations if a not in order]
    out: dict[str, list[tuple[Call, ActionRecord | None]]] = {}
    for name in order:
        runs = [c for c in calls if name in c.annotations]
        # Runs of one config must launch the same kernels; configs may differ (a library can
        # pick another algorithm, e.g. split-K with a reduction kernel, for another size).
        per_config: dict[int, set[int]] = {}
        for c in runs:
            if name not in c.failed:
                per_config.setdefault(c.config, set()).add(len(by_key.get((c.call, name), [])))
        uneven = {cfg: sorted(n) for cfg, n in per_config.items() if len(n) > 1}
        if uneven:
            detail = "; ".join(f"config #{cfg}: {n}" for cfg, n in uneven.items())
            if droppable is not None and name in droppable:
                droppable[name] = (
                    "it launched a different number of kernels in different runs of the same "
                    f"config (kernel counts seen: {detail}): a result kept from an earlier call?"
                )
                continue
            raise KernelCountMismatchError(
                f"{SAME_COUNT} Annotation {name!r} launched a different number of kernels in "
                f"different runs of the same config (kernel counts seen: {detail}).",
                "Make each run launch the same kernels (warm up autotuners and caches before the "
                "annotated range), add helper kernels to ignore_kernel_list, or use "
                "replay_mode='range' to measure the range as one unit.",
            )
        counts = {cfg: min(n) for cfg, n in per_config.items()}
        if combine is None and len(set(counts.values())) > 1:
            detail = ", ".join(f"config #{cfg}: {n}" for cfg, n in counts.items())
            raise KernelCountMismatchError(
                f"{SAME_COUNT} Annotation {name!r} launched a different number of kernels for "
                f"different configs ({detail}), and one kernel per run is expected.",
                "Pass combine_kernel_metrics=lambda a, b: a + b if a library picks other "
                "kernels for other sizes, or use ignore_kernel_list or replay_mode='range'.",
            )
        out[name] = [
            (
                c,
                None
                if name in c.failed
                else _combine(name, by_key.get((c.call, name), []), combine),
            )
            for c in runs
        ]
    return out


def _combine(name: str, kernels: list[ActionRecord], combine: Combine | None) -> ActionRecord:
    if not kernels:
        raise KernelCountMismatchError(
            f"Annotation {name!r} launched no kernel in one of its runs.",
            "Every run must launch the measured kernels; check for caching that skips work.",
        )
    if len(kernels) == 1:
        return kernels[0]
    if combine is None:
        names = "\n".join(f"  - {k}" for k in dict.fromkeys(r.kernel for r in kernels))
        raise MultipleKernelsError(
            f"More than one (total={len(kernels)}) kernel is launched within the {name} "
            f"annotation. One kernel per annotation is expected; the kernels of one run:\n{names}",
            "Pass combine_kernel_metrics=lambda a, b: a + b (e.g. to sum times), add helper "
            "kernels to ignore_kernel_list, or use replay_mode='range' to profile the range as one.",
        )
    first = kernels[0]
    values = {
        m: functools.reduce(combine, [number(k.values[m]) for k in kernels]) for m in first.values
    }
    return ActionRecord(
        index=first.index,
        kernel=" + ".join(dict.fromkeys(k.kernel for k in kernels)),
        annotation=first.annotation,
        call=first.call,
        values=values,
        units=first.units,
        gpu=first.gpu,
        compute_clock=first.compute_clock,
        memory_clock=first.memory_clock,
        nvtx=first.nvtx,
    )


Info = Callable[[int, str], Mapping[str, Any]]  # (call, annotation) -> extra columns


def raw_frame(
    grouped: Mapping[str, list[tuple[Call, ActionRecord | None]]],
    metrics: Sequence[str],
    configs: Sequence[tuple[Any, ...]],
    param_names: Sequence[str],
    derive_metric: DeriveMetric | None = None,
    info: Info | None = None,
    info_columns: Iterable[str] | None = None,
) -> pd.DataFrame:
    """nsight-python's raw frame: one row per (annotation, call, metric), derived rows last.

    ``info`` gives extra columns per (call, annotation), placed before the parameters."""
    extra_names = list(info_columns or ())
    host = socket.gethostname()
    base: list[dict[str, Any]] = []
    derived: list[dict[str, Any]] = []
    units_of = _units_by_metric(grouped, metrics)
    failed_derived: list[dict[str, Any]] = []
    for annotation, rows in grouped.items():
        for call, rec in rows:
            config = configs[call.config]
            common = {
                "Annotation": annotation,
                "Kernel": rec.kernel if rec else "",
                "GPU": rec.gpu if rec else "",
                "Host": host,
                "ComputeClock": rec.compute_clock if rec else math.nan,
                "MemoryClock": rec.memory_clock if rec else math.nan,
            }
            params = {
                **(dict(info(call.call, annotation)) if info is not None else {}),
                **dict(zip(param_names, config)),
            }
            values = [(number(rec.values[m]) if rec else math.nan) for m in metrics]
            for m, v in zip(metrics, values):
                base.append({**common, "Value": v, "Metric": m, "Unit": units_of[m], **params})
            if derive_metric is not None and rec is None:
                failed_derived.append({**common, **params})
            elif derive_metric is not None:
                for m, v, unit in derive(derive_metric, values, config):
                    derived.append({**common, "Value": v, "Metric": m, "Unit": unit, **params})
    # A failed run has no values to derive from: NaN rows under the names the others produced.
    names = list(dict.fromkeys(row["Metric"] for row in derived))
    if derive_metric is not None and not names:
        names = [getattr(derive_metric, "__name__", "derived")]
    for row in failed_derived:
        derived += [{**row, "Value": math.nan, "Metric": n, "Unit": math.nan} for n in names]
    columns = [*RAW_COLUMNS, *extra_names, *param_names]
    frame = pd.DataFrame(base + derived)
    if frame.empty:
        return pd.DataFrame(columns=columns)
    frame["Value"] = frame["Value"].astype(float)
    return frame[columns]


def _units_by_metric(
    grouped: Mapping[str, list[tuple[Call, ActionRecord | None]]], metrics: Sequence[str]
) -> dict[str, str]:
    units: dict[str, str] = {}
    for rows in grouped.values():
        for _, rec in rows:
            if rec is not None:
                for m in metrics:
                    units.setdefault(m, rec.units.get(m, ""))
    return {m: units.get(m, "") for m in metrics}
