"""Results as data: each bench suite writes one JSON file per run,
``bench/results/<suite>/<date>-<gpu>-<commit>.json``, holding the environment it ran in (GPU,
driver, ncu, Python, torch, commit, date), its inputs and its figures. docs/BENCHMARKS.md is
built from these files; nothing in the docs states a figure that no file here holds.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
UNRECORDED = "unrecorded"  # a field the run that measured a figure did not record


def _quiet(argv: list[str]) -> str | None:
    """The first line a command prints, or None when it is missing or fails."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return lines[-1] if done.returncode == 0 and lines else None


def commit() -> str:
    """The checkout's short commit, marked when tracked files differ from it; ``BENCH_COMMIT``
    names it where the tree was copied without its git folder."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    head = _quiet(["git", "-C", str(ROOT), "rev-parse", "--short=7", "HEAD"]) or "unknown"
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{head}+dirty" if dirty and head != "unknown" else head


def environment() -> dict[str, Any]:
    """Where a result was measured: enough to reproduce it and to compare like with like."""
    gpu = _quiet(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    name, _, driver = (gpu or "").partition(",")
    torch_version = None
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        pass
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "gpu": name.strip() or None,
        "driver": driver.strip() or None,
        "ncu": _quiet(["ncu", "--version"]),
        "python": platform.python_version(),
        "torch": torch_version,
    }


def emit(data: Any, out: Path | None, name: str) -> None:
    """Print a script's ``data`` as JSON and, with ``--out`` given, keep it as ``out/name``
    (the file a suite's step reads back)."""
    text = json.dumps(data, indent=1)
    print(text, flush=True)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)


def slug(text: str | None) -> str:
    """A file-name-safe form of a GPU name ("NVIDIA H200" -> "h200")."""
    if not text:
        return "cpu"
    short = re.sub(r"^nvidia\s+", "", text.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "-", short.lower()).strip("-") or "gpu"


def portable(text: str) -> str:
    """A command's output without the paths of the machine that ran it: the checkout as
    ``<repo>``, home and scratch folders as ``<home>`` and ``<tmp>``."""
    text = text.replace(str(ROOT), "<repo>").replace(str(Path.home()), "<home>")
    return re.sub(r"/tmp/[^\s\"'\\]+", "<tmp>", text)


def file_name(env: dict[str, Any]) -> str:
    """``<date>-<gpu>-<commit>.json`` of an environment: sorted by name, the newest is last."""
    commit = str(env.get("commit") or UNRECORDED).replace("+", "-")
    return f"{str(env['date'])[:10]}-{slug(env.get('gpu'))}-{commit}.json"


def write(
    suite: str, payload: dict[str, Any], root: Path = RESULTS, env: dict[str, Any] | None = None
) -> Path:
    """``payload`` (inputs and figures) with the environment, as the suite's newest file;
    ``env`` where the figures were measured elsewhere (this machine's otherwise)."""
    env = env or environment()
    path = root / suite / file_name(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"suite": suite, "environment": env, **payload}, indent=1)
    path.write_text(portable(text) + "\n")
    return path


def newest(suite: str, root: Path = RESULTS, before: Path | None = None) -> Path | None:
    """The suite's newest results file (older than ``before`` when given); None if none."""
    dated = sorted((_when(p), p) for p in root.joinpath(suite).glob("*.json"))
    if before is not None:
        limit = _when(before)
        dated = [d for d in dated if d[0] < limit]
    return dated[-1][1] if dated else None


def _when(path: Path) -> tuple[str, str]:
    """A results file's order: the date and time it records (files of one day are named alike
    but for their commit, which says nothing of order), then its name."""
    try:
        date = str(json.loads(path.read_text()).get("environment", {}).get("date") or "")
    except (OSError, ValueError):
        date = ""
    return date or path.name[:10], path.name


def latest(suite: str, root: Path = RESULTS, before: Path | None = None) -> dict[str, Any] | None:
    """The suite's newest results file (older than ``before`` when given), read; None if none."""
    path = newest(suite, root, before)
    return json.loads(path.read_text()) if path else None
