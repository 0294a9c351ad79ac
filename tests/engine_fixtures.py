"""Helpers to read the engine fixtures recorded on the H200 by scripts/record_fixtures.py."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ncu_report

ENGINE = Path(__file__).parent / "fixtures" / "engine"


@dataclass
class Fixture:
    name: str
    report: Path
    manifest: Path
    configs: list[tuple[Any, ...]]
    runs: int
    metrics: list[str]
    replay_mode: str

    @property
    def calls(self) -> list[dict[str, Any]]:
        return list(json.loads(self.manifest.read_text())["calls"])


def fixture(name: str) -> Fixture:
    d = ENGINE / name
    meta = json.loads((d / "fixture.json").read_text())
    return Fixture(
        name=name,
        report=d / "report.ncu-rep",
        manifest=d / "manifest.json",
        configs=[c if isinstance(c, (list, tuple)) else (c,) for c in meta["configs"]],
        runs=int(meta.get("runs", 1)),
        metrics=list(meta.get("metrics", ["gpu__time_duration.sum"])),
        replay_mode=str(meta.get("replay_mode", "kernel")),
    )


def values_by_hand(fx: Fixture, metric: str) -> dict[tuple[str, int], list[list[float]]]:
    """(annotation, config index) -> per run, the metric of each kernel: read straight from
    ncu_report, independently of nsight_agent.extraction."""
    config_of = {c["call"]: c["config"] for c in fx.calls}
    report = ncu_report.load_report(str(fx.report))
    per_call: dict[tuple[str, int], list[float]] = {}
    for r in range(report.num_ranges()):
        rng = report.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            state = action.nvtx_state()
            names = {}
            for d in state.domains():
                dom = state.domain_by_id(d)
                names[dom.name()] = list(dom.start_end_ranges())
            if not names.get("nsight_agent") or not names.get("nsight_agent.call"):
                continue
            ann = names["nsight_agent"][-1]
            call = int(names["nsight_agent.call"][0].split("=")[1])
            per_call.setdefault((ann, call), []).append(float(action[metric].value()))
    out: dict[tuple[str, int], list[list[float]]] = {}
    for (ann, call), vals in sorted(per_call.items(), key=lambda kv: kv[0][1]):
        out.setdefault((ann, config_of[call]), []).append(vals)
    return out


def mean_std(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else float("nan"))
