"""The KernelBench sweep as a results file, ``bench/results/kernelbench-sweep/<date>-<gpu>-<commit>.json``.

The whole sweep does not fit one command: ``bench/kernelbench_sweep.py`` runs a phase or a shard
a call and ``--merge`` combines their JSON. The merged sweep becomes the results file; its
environment is read from what the runs recorded (``meta``), never from the machine that merges
them, and a field no run recorded says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.results import RESULTS, UNRECORDED, write

SUITE = "kernelbench-sweep"


def _commits(meta: dict[str, Any]) -> list[str]:
    """Every commit the merged runs recorded, in the order they were merged."""
    seen: list[str] = []
    for part in [*(meta.get("parts") or []), meta]:
        commit = part.get("commit")
        if commit and commit not in seen:
            seen.append(str(commit))
    return seen


def environment(meta: dict[str, Any]) -> dict[str, Any]:
    """The results file's environment from a sweep's ``meta`` (the last run merged)."""
    gpu, _, driver = str(meta.get("gpu") or "").partition(",")
    env = {
        "date": meta.get("date") or UNRECORDED,
        "commit": meta.get("commit") or UNRECORDED,
        "gpu": gpu.strip() or UNRECORDED,
        "driver": driver.strip() or UNRECORDED,
        "ncu": meta.get("ncu") or UNRECORDED,
        "python": meta.get("python") or UNRECORDED,
        "torch": meta.get("torch") or UNRECORDED,
    }
    commits = _commits(meta)
    if len(commits) > 1:  # rows from runs at several commits: each row's own run says which
        env["commits"] = commits
    return env


def write_sweep(sweep: dict[str, Any], root: Path = RESULTS) -> Path:
    """A merged sweep (``meta``, ``summary``, ``rows``) as the suite's results file."""
    payload: dict[str, Any] = {
        key: sweep[key] for key in ("meta", "summary", "rows") if key in sweep
    }
    return write(SUITE, payload, root, env=environment(sweep.get("meta") or {}))
