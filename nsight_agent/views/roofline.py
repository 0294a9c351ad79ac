"""Roofline of a run's report, per kernel and config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from nsight_agent.annotation import CALL_DOMAIN, NVTX_DOMAIN
from nsight_agent.diagnose import findings as fd
from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose import roofline as rl
from nsight_agent.engine.collection import extract as extraction
from nsight_agent.views.common import Page, page, sig
from nsight_agent.views.report import (
    BOUND_RULE,
    FindingBrief,
    RooflineBrief,
    finding_briefs,
    metric_value,
    roofline_brief,
)
from nsight_agent.views.runs import RunLike, config_list


class KernelRoofline(BaseModel):
    variant: str | None = None
    config_index: int | None = None
    config: dict[str, Any] | None = None
    run: int | None = Field(default=None, description="Run index within the config")
    kernel: str
    duration_ns: float | None = None
    roofline: RooflineBrief | None = None
    findings: list[FindingBrief] | None = None


class RooflineSummary(BaseModel):
    """roofline_metrics' answer: per kernel and config, FLOP/s, bytes, intensity, % of roofline."""

    run_id: str | None = None
    report: str
    gpu: str | None = None
    thresholds: str
    page: Page
    kernels: list[KernelRoofline]
    warnings: list[str] | None = None


def _call_map(run: RunLike) -> dict[int, tuple[int, int]]:
    """call index -> (config index, run index) from the run's manifest, when it has one."""
    path = run.files.manifest
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        return {int(c["call"]): (int(c["config"]), int(c["run"])) for c in data["calls"]}
    except (KeyError, TypeError, ValueError):
        return {}


def roofline_summary(
    report: str | Path,
    *,
    run: RunLike | None = None,
    offset: int = 0,
    limit: int = 20,
    findings: int = 2,
) -> RooflineSummary:
    """Roofline of every kernel of ``report``; with ``run``, tied to its variant and config."""
    loaded = extraction.load(report)
    actions = extraction.iter_actions(loaded)
    calls = _call_map(run) if run is not None else {}
    configs = config_list(run) if run is not None else []
    ignore = set(run.request.ignore_kernels) if run is not None else set()
    items: list[KernelRoofline] = []
    gpu = None
    for action in actions:
        name = str(action.name())
        if name in ignore:
            continue
        ranges = extraction.nvtx_ranges(action)
        variant = ranges.get(NVTX_DOMAIN, [None])[-1]
        call = next(
            (int(n.split("=", 1)[1]) for n in ranges.get(CALL_DOMAIN, []) if n.startswith("call=")),
            None,
        )
        cfg, run_index = calls.get(call, (None, None)) if call is not None else (None, None)
        r = rl.roofline(action)
        if gpu is None:
            g = metric_value(action, "device__attribute_display_name")
            gpu = str(g.value) if g is not None and g.value is not None else None
        items.append(
            KernelRoofline(
                variant=variant,
                config_index=cfg,
                config=configs[cfg] if cfg is not None and 0 <= cfg < len(configs) else None,
                run=run_index,
                kernel=name,
                duration_ns=sig(r.duration_ns),
                roofline=roofline_brief(action),
                findings=finding_briefs(fd.findings(action), findings) or None,
            )
        )
    run_id = run.run_id if run is not None else None
    where = f"run_id={run_id!r}" if run_id else f"report_path={str(report)!r}"
    pg = page(
        len(items), offset, limit, f"roofline_metrics({where}, offset={{offset}}, limit={{limit}})"
    )
    warnings = []
    if any(k.roofline is None for k in items):
        warnings.append(
            "Some kernels have no roofline data: collect sections "
            + ", ".join(dm.bound_sections())
            + "."
        )
    return RooflineSummary(
        run_id=run_id,
        report=str(report),
        gpu=gpu,
        thresholds=BOUND_RULE,
        page=pg,
        kernels=items[offset : offset + limit],
        warnings=warnings or None,
    )
