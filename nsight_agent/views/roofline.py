"""Roofline of a run's report, per kernel and config: each kernel tied to its variant (its
NVTX range) and its config and run (its call, through the run's manifest)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from nsight_agent.annotation import CALL_DOMAIN, NVTX_DOMAIN
from nsight_agent.diagnose import findings as fd
from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose import roofline as rl
from nsight_agent.judge.reading import ReadReport
from nsight_agent.judge.run import RunLike, config_list
from nsight_agent.numbers import sig
from nsight_agent.views.common import Page, page
from nsight_agent.views.report import (
    BOUND_RULE,
    FindingBrief,
    RooflineBrief,
    finding_briefs,
    roofline_brief,
)


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


def roofline_summary(
    report: ReadReport,
    *,
    run: RunLike | None = None,
    calls: Mapping[int, tuple[int, int]] | None = None,
    offset: int = 0,
    limit: int = 20,
    findings: int = 2,
) -> RooflineSummary:
    """Roofline of every kernel of ``report``; with ``run``, tied to its variant and config
    (``calls``: call index -> (config index, run index), from the run's manifest)."""
    calls = calls or {}
    configs = config_list(run) if run is not None else []
    ignore = set(run.request.ignore_kernels) if run is not None else set()
    items: list[KernelRoofline] = []
    for action, ranges in zip(report.actions, report.ranges, strict=True):
        name = str(action.name())
        if name in ignore:
            continue
        variant = ranges.get(NVTX_DOMAIN, [None])[-1]
        call = next(
            (int(n.split("=", 1)[1]) for n in ranges.get(CALL_DOMAIN, []) if n.startswith("call=")),
            None,
        )
        cfg, run_index = calls.get(call, (None, None)) if call is not None else (None, None)
        r = rl.roofline(action)
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
    where = f"run_id={run_id!r}" if run_id else f"report_path={str(report.path)!r}"
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
        report=str(report.path),
        gpu=report.gpu,
        thresholds=BOUND_RULE,
        page=pg,
        kernels=items[offset : offset + limit],
        warnings=warnings or None,
    )
