"""Whether two runs may be compared: each run's identity (how, where and on what it was
measured, read from its frames, status and recorded environment) and the rules that refuse
a comparison (docs/BASELINES.md): method, GPU model, clocks and cache policy, driver, ncu
version, configs, metric, output sizes; on a CPU, the host and the machine's speed.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pandas as pd
from pydantic import BaseModel, Field

from nsight_agent.engine.store import baselines, run_status
from nsight_agent.errors import InvalidRequestError
from nsight_agent.judge import gate
from nsight_agent.judge.emulated import COLUMN, emulator
from nsight_agent.judge.run import RunLike, config_key, config_list, first_text


class RunIdentity(BaseModel):
    """What decides whether two runs may be compared, and what is only shown."""

    run_id: str
    variant: str
    baseline: str | None = Field(default=None, description="Its name, when it is a baseline")
    date: str | None = None
    source_hash: str
    method: str
    gpu: str | None = None
    host: str | None = None
    clock_control: str | None = None
    cache_control: str | None = None
    driver: str | None = None
    ncu: str | None = None
    torch: str | None = None


def pick_variant(run: RunLike, wanted: str | None, prefer: str | None = None) -> str:
    """``wanted`` (which must be a variant of the run), else ``prefer`` when the run has it,
    else the run's only variant."""
    names = [v.name for v in run.request.effective_variants()]
    if wanted is not None:
        if wanted not in names:
            raise InvalidRequestError(
                f"{wanted!r} is not a variant of run {run.run_id}.",
                f"Variants: {', '.join(names)}.",
            )
        return wanted
    if prefer in names:
        return str(prefer)
    if len(names) == 1:
        return names[0]
    raise InvalidRequestError(
        f"Run {run.run_id} has {len(names)} variants; say which one.",
        f"Variants: {', '.join(names)} (CLI --variant, MCP NAME@VARIANT).",
    )


def identity(run: RunLike, variant: str, name: str | None = None) -> RunIdentity:
    """One variant of a run as a comparison reads it; ``name``: its baseline name."""
    env = baselines.read_environment(run.run_dir)
    frame = run.processed
    method = first_text(frame, "Method") or str(run.facts.method or "ncu")
    gpu = (
        first_text(frame, "GPU") or env.get("gpu") or ("cpu" if method == "perf_counter" else None)
    )
    status = run_status.read_status(run.run_dir) or {}
    started = status.get("started")
    date = (
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
        if isinstance(started, int | float)
        else run.run_id[:15]
    )
    packages = env.get("packages") or {}
    return RunIdentity(
        run_id=run.run_id,
        variant=variant,
        baseline=name,
        date=date,
        source_hash=baselines.variant_hashes(run.request).get(variant, "?"),
        method=method,
        gpu=gpu,
        host=first_text(frame, "Host") or status.get("host") or env.get("host"),
        clock_control=run.request.clock_control,
        cache_control=run.request.cache_control,
        driver=env.get("driver_version"),
        ncu=env.get("ncu_version"),
        torch=packages.get("torch") if isinstance(packages, dict) else None,
    )


def baseline_entry(run: RunLike, variant: str | None, name: str) -> baselines.Baseline:
    """What a baseline of ``run`` (its ``variant``, or its only one) records and lists."""
    chosen = pick_variant(run, variant)
    f = identity(run, chosen)
    return baselines.Baseline(
        name=name,
        run_id=run.run_id,
        variant=chosen,
        created=baselines.utc_now(),
        source_hash=f.source_hash,
        gpu=f.gpu,
        method=f.method,
        measured=f.date,
    )


def comparability(
    base: RunIdentity, cand: RunIdentity, base_run: RunLike, cand_run: RunLike, metric: str
) -> tuple[list[str], list[str]]:
    """(reasons they are not comparable, rules that could not be checked)."""
    reasons: list[str] = []
    unverified: list[str] = []

    def same(what: str, a: Any, b: Any, *, needed: bool = True) -> None:
        if a is None or b is None:
            if needed:
                unverified.append(f"{what} (not recorded: baseline {a}, this run {b})")
        elif a != b:
            reasons.append(f"{what} differs: baseline {a}, this run {b}")

    same("method", base.method, cand.method)
    same("GPU model", base.gpu, cand.gpu)
    if base.gpu == "cpu" and cand.gpu == "cpu":
        same("host (CPU timing)", base.host, cand.host)
        slow, unknown = gate.machine_speed(base_run.facts.cpu_probe_ns, cand_run.facts.cpu_probe_ns)
        reasons += [slow] if slow else []
        unverified += [unknown] if unknown else []
    emulation = (_emulation(base_run, base.variant), _emulation(cand_run, cand.variant))
    same("emulation", *emulation, needed=False)
    same("clock control", base.clock_control, cand.clock_control)
    same("cache control", base.cache_control, cand.cache_control)
    on_gpu = base.gpu != "cpu" or cand.gpu != "cpu"
    same("driver", base.driver, cand.driver, needed=on_gpu)
    same("ncu version", base.ncu, cand.ncu, needed="ncu" in (base.method, cand.method))
    b_configs = {config_key(c) for c in config_list(base_run)}
    c_configs = {config_key(c) for c in config_list(cand_run)}
    if b_configs != c_configs:
        only_b, only_c = sorted(b_configs - c_configs), sorted(c_configs - b_configs)
        reasons.append(
            f"configs differ: only in the baseline {only_b[:3]}, only in this run {only_c[:3]}"
        )
    for side, run in (("baseline", base_run), ("this run", cand_run)):
        if metric not in set(run.processed.get("Metric", pd.Series(dtype=str))):
            reasons.append(f"{side} has no {metric!r} rows")
    sizes_b, sizes_c = _out_bytes(base_run, base.variant), _out_bytes(cand_run, cand.variant)
    differ = [k for k in sizes_b if k in sizes_c and sizes_b[k] != sizes_c[k]]
    if differ:
        reasons.append(
            f"output sizes differ at {len(differ)} config(s), e.g. {differ[0]}: baseline "
            f"{sizes_b[differ[0]]} B, this run {sizes_c[differ[0]]} B (not the same problem)"
        )
    return reasons, unverified


def _emulation(run: RunLike, variant: str) -> str | None:
    """The emulator the variant's rows ran under ("native" when none); None when the run did
    not record it (made before the rows said), so that rule is not checked."""
    frame = run.processed
    if COLUMN not in frame.columns:
        return None
    rows = frame[frame["Annotation"].astype(str) == variant].to_dict("records")
    return next((e for e in map(emulator, rows) if e), "native")


def _out_bytes(run: RunLike, variant: str) -> dict[str, int]:
    """Bytes of the variant's outputs per config (the pre-flight's record), keyed by config."""
    try:
        manifest = json.loads((run.run_dir / "preflight-manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    out: dict[str, int] = {}
    configs = manifest.get("configs") or []
    for config, sizes in zip(configs, manifest.get("out_bytes") or [], strict=False):
        if isinstance(sizes, dict) and isinstance(sizes.get(variant), int):
            out[config_key(config)] = int(sizes[variant])
    return out
