"""Retention of the run store: keep the newest runs, within a count and a size.

A run folder is a folder of the runs root with a ``request.json`` (hidden folders such as the
CUDA build cache are not runs). A run whose status says it is still running is never removed,
nor is a run a baseline names (``baselines.kept_runs``): those are kept outside the count and
the size.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from nsight_agent.engine.store import baselines

DEFAULT_KEEP = 200
DEFAULT_MAX_GB = 5.0


def policy() -> tuple[int, float]:
    """(runs kept, GB kept) as each run folder is made: NSIGHT_AGENT_KEEP_RUNS,
    NSIGHT_AGENT_KEEP_GB."""
    try:
        keep = int(os.environ.get("NSIGHT_AGENT_KEEP_RUNS", DEFAULT_KEEP))
        max_gb = float(os.environ.get("NSIGHT_AGENT_KEEP_GB", DEFAULT_MAX_GB))
    except ValueError:
        return DEFAULT_KEEP, DEFAULT_MAX_GB
    return max(keep, 1), max(max_gb, 0.0)


@dataclass
class Pruned:
    removed: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    kept: int = 0


def run_folders(root: Path) -> list[Path]:
    """Run folders under ``root``, newest first."""
    if not root.is_dir():
        return []
    found = [
        d
        for d in root.iterdir()
        if d.is_dir() and not d.name.startswith(".") and (d / "request.json").is_file()
    ]
    return sorted(found, key=lambda d: d.stat().st_mtime, reverse=True)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _running(run_dir: Path) -> bool:
    try:
        status = json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(status, dict) and status.get("status") == "running"


def prune(root: Path, keep: int = DEFAULT_KEEP, max_gb: float = DEFAULT_MAX_GB) -> Pruned:
    """Remove runs beyond the newest ``keep`` or beyond ``max_gb`` in all (newest kept first)."""
    out = Pruned()
    budget = int(max_gb * 1e9)
    used = 0
    named = baselines.kept_runs(root)
    folders = run_folders(root)
    out.kept = sum(d.name in named for d in folders)
    for i, run_dir in enumerate(d for d in folders if d.name not in named):
        size = folder_bytes(run_dir)
        if _running(run_dir) or (i < keep and used + size <= budget):
            used += size
            out.kept += 1
            continue
        shutil.rmtree(run_dir, ignore_errors=True)
        out.removed.append(run_dir.name)
        out.freed_bytes += size
    return out
